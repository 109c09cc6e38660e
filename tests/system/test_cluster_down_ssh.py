"""The group take-down reaching a member over SSH, for real: a private sshd on a free port of
127.0.0.1 (its own host key, a client key made here), and a follower whose address is 127.0.0.1
but whose `ssh` in cluster.toml sends its part of `down` through that sshd (the SSH transport of
`verify --host`). Neither runtime is running, so no container starts: the follower's line comes
from its own `hostctl down --member follow`, run on the far side of the SSH connection (its
stdout, marked with the host it came from); sshd's log shows the key it accepted.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from hostctl import paths
from hostctl.cluster import run
from loopsshd import free_port, private_sshd

pytestmark = pytest.mark.system
ROOT = Path(__file__).resolve().parents[2]
HOSTS = paths.hosts_dir()


@pytest.fixture
def sshd(tmp_path):
    """A private sshd on 127.0.0.1 whose sessions run this checkout's hostctl; yields (spec, log)."""
    # PYTHONPATH: the far side runs this checkout's hostctl whatever the console script was installed from.
    with private_sshd(tmp_path / "ssh", {"PYTHONPATH": str(ROOT)}) as (spec, log, config):
        yield spec, log, config


def write_cluster(tmp_path: Path, ssh: str, ssh_config: Path) -> Path:
    members = []
    for name, role, rank, api, extra in (("lead", "leader", 0, 8321, ""), ("follow", "follower", 1, 8322,
                                                                           f'ssh = "{ssh}"\nssh_config = "{ssh_config}"\n')):
        members.append(f'[[hosts]]\nname = "{name}"\nrole = "{role}"\nrank = {rank}\naddress = "127.0.0.1"\n'
                       f'profile = "{HOSTS / "demo-cpu.toml"}"\nfacts = "{HOSTS / "demo-cpu.facts.json"}"\n'
                       f'api_port = {api}\nstate_dir = "{tmp_path / name}"\n{extra}')
    path = tmp_path / "cluster.toml"
    path.write_text('name = "sshdown"\nsocket_ifname = "lo"\nmaster_port = 29620\n\n' + "\n".join(members))
    return path


def hostctl(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hostctl", *args], cwd=ROOT, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=300)


def test_down_takes_the_ssh_member_down_on_its_own_host(tmp_path, sshd):
    spec, log, config = sshd
    cluster = write_cluster(tmp_path, spec, config)
    p = hostctl("down", "--cluster", str(cluster))
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.strip().splitlines()
    # the leader first, here; then the follower's own `down --member follow`, over SSH
    assert lines[0] == "lead: down", lines
    port = spec.split(":")[2]
    assert lines[1] == f"follow: down (on ssh://root@127.0.0.1:{port})", lines
    assert "follow: taking it down over ssh://root@127.0.0.1" in p.stderr
    assert "Accepted publickey for root" in log.read_text()


def test_an_unreachable_ssh_member_fails_down_and_names_it(tmp_path, sshd):
    spec, log, config = sshd
    dead = free_port()  # nobody listens there
    cluster = write_cluster(tmp_path, spec.replace(spec.split(":")[2], str(dead), 1), config)
    p = hostctl("down", "--cluster", str(cluster))
    assert p.returncode == 1, p.stdout + p.stderr
    assert "could not take down follow" in p.stderr and f"cannot reach ssh://root@127.0.0.1:{dead}" in p.stderr
    assert "lead: down" in p.stderr  # what was done is still said


def test_a_failed_groups_take_down_reaches_the_ssh_member(tmp_path, sshd):
    spec, _, config = sshd
    from hostctl.cluster.commands import load

    cluster = write_cluster(tmp_path, spec, config)
    _, cp, _ = load(cluster, None)
    said: list[str] = []
    lines = run.group_down(cp, said.append, reason="lead failed", me="lead", cluster_path=cluster)
    assert lines[0] == "lead: down (lead failed)"
    assert lines[1].startswith("follow: down (on ssh://") and \
        lines[1].endswith("(lead failed)"), lines
