"""doctor's all-reduce across hosts, for real on one machine: two members of one model across hosts
on 127.0.0.1, each its own `hostctl doctor --cluster --member NAME --level full` process, each
starting its own rank (PyTorch's gloo backend on the CPU, TCP rendezvous at the leader's address).
The verdicts are proven, not assumed: the right sums pass on both; a member whose input is wrong
(the child's test hook) makes both members report wrong data; a member that never joins leaves
the other's rank to be killed at the deadline: a hang.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostctl import paths
from hostctl.gpu.harness import free_port
from need import needs

pytestmark = [
    pytest.mark.system,
    needs(importlib.util.find_spec("torch") is not None, "torch (CPU) not installed; .ci/run installs /opt/wheels/torch-*+cpu"),
]
ROOT = Path(__file__).resolve().parents[2]
HOSTS = paths.hosts_dir()
PATIENT_S = 180  # torch imports slowly on a loaded 2-core CI machine
SHORT_S = 12  # long enough for torch's import, short enough to show the hang is the deadline's


def write_cluster(tmp_path: Path, timeout_s: int) -> Path:
    master = free_port(range(18510, 18600)) - 10  # the rendezvous is master_port + 10
    members = []
    for name, role, rank, api in (("lead", "leader", 0, 8311), ("follow", "follower", 1, 8312)):
        members.append(f'[[hosts]]\nname = "{name}"\nrole = "{role}"\nrank = {rank}\naddress = "127.0.0.1"\n'
                       f'profile = "{HOSTS / "demo-cpu.toml"}"\nfacts = "{HOSTS / "demo-cpu.facts.json"}"\n'
                       f'api_port = {api}\nstate_dir = "{tmp_path / name}"\n')
    path = tmp_path / "cluster.toml"
    path.write_text(f'name = "ar"\nsocket_ifname = "lo"\nmaster_port = {master}\n'
                    f'collective_timeout_s = {timeout_s}\n\n' + "\n".join(members))
    return path


def start(cluster: Path, member: str, **env) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "hostctl", "doctor", "--cluster", str(cluster), "--member", member,
                             "--level", "full", "--json"], cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, **env))


def finish(proc: subprocess.Popen) -> tuple[int, dict, str]:
    out, err = proc.communicate(timeout=PATIENT_S + 120)
    doc = json.loads(out)
    (check,) = [c for c in doc["checks"] if c["id"] == "cluster.collective"]
    return proc.returncode, check, err


def test_two_members_sum_right_and_pass(tmp_path):
    cluster = write_cluster(tmp_path, PATIENT_S)
    lead, follow = start(cluster, "lead"), start(cluster, "follow")
    for proc, rank in ((lead, 0), (follow, 1)):
        code, check, err = finish(proc)
        assert check["status"] == "pass", (check, err)
        obs = check["observed"]
        assert obs["verdict"] == "ok" and obs["rank"] == rank and obs["world"] == 2 and obs["backend"] == "gloo"
        assert obs["report"]["mismatches"] == 0 and obs["env"]["GLOO_SOCKET_IFNAME"] == "lo"
        assert obs["init"].startswith("tcp://127.0.0.1:") and obs["leftover"] == []
        assert code == 0, err


def test_a_member_with_wrong_data_fails_on_both(tmp_path):
    cluster = write_cluster(tmp_path, PATIENT_S)
    lead, follow = start(cluster, "lead"), start(cluster, "follow", HOSTCTL_TEST_ALLREDUCE_FAULT="wrong")
    for proc in (lead, follow):
        code, check, err = finish(proc)
        assert check["status"] == "fail" and check["observed"]["verdict"] == "wrong_data", (check, err)
        assert "wrong data" in check["summary"] and check["observed"]["report"]["mismatches"] > 0
        assert code == 1


def test_a_member_that_never_joins_is_a_hang_at_the_deadline(tmp_path):
    cluster = write_cluster(tmp_path, SHORT_S)
    code, check, err = finish(start(cluster, "lead"))  # "follow" never starts
    obs = check["observed"]
    assert check["status"] == "fail" and obs["verdict"] == "hang", (check, err)
    assert SHORT_S <= obs["seconds"] < SHORT_S + 10 and obs["leftover"] == []
    assert "follow" in check["fix"] and code == 1


def test_full_without_member_is_bad_input(tmp_path):
    cluster = write_cluster(tmp_path, SHORT_S)
    p = subprocess.run([sys.executable, "-m", "hostctl", "doctor", "--cluster", str(cluster), "--level", "full"],
                       cwd=ROOT, capture_output=True, text=True, stdin=subprocess.DEVNULL)
    assert p.returncode == 2 and "--member" in p.stderr
