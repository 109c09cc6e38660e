"""`hostctl verify` on real loop drives provisioned under a private sysroot, on this host and over
SSH: a second sshd on a free port of 127.0.0.1, started by the test with its own host key, a
client key made in the test and `SetEnv HOSTCTL_SYSROOT=...`, so the remote side reads the test's
sysroot and never this machine's /etc. No mock: verify connects through testinfra's ssh backend and
reads the facts with the hostctl installed here (`hostctl facts --json` over the same connection).
Also `provision --json` of a real storage run: `changed`, then on the re-run only `ok`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from loopdrives import check, drive_toml, write_profile
from loopdrives import host, restore_sysctls, sysroot  # noqa: F401  (fixtures)
from loopsshd import hostctl_console_script, private_sshd

pytestmark = pytest.mark.system
ROOT = Path(__file__).resolve().parents[2]
ROLES = 'planes_cache = "d1"\nexpert_store = "d1"\ncompile_cache = "d1"\nswappiness_serving = 7\npage_cluster = 1'


def hostctl(*args: str, env: dict | None = None, timeout: float = 300) -> tuple[int, str, str]:
    p = subprocess.run([sys.executable, "-m", "hostctl", *args], capture_output=True, text=True, cwd=ROOT,
                       env=env or dict(os.environ), timeout=timeout, stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout, p.stderr


@pytest.fixture
def provisioned(host, tmp_path, sysroot):
    """One loop drive laid out by `provision --only storage --json`; the run and its re-run."""
    drive = host.drive("160M", "d1")
    profile = tmp_path / "p.toml"
    write_profile(profile, [drive_toml("d1", drive.dev, tmp_path / "m1")], storage=ROLES)
    code, out, err = hostctl("provision", "--only", "storage", "--yes", "--json", "--config", str(profile))
    assert code == 0, err
    first = json.loads(out)
    code, out, err = hostctl("provision", "--only", "storage", "--yes", "--json", "--config", str(profile))
    assert code == 0, err
    return drive, profile, first, json.loads(out)


def test_a_storage_run_is_changed_then_only_ok(provisioned):
    _, _, first, again = provisioned
    assert first["schema"] == "hostctl.provision/v1" and not first["dry_run"] and first["ok"]
    changed = [a for a in first["actions"] if a["status"] == "changed"]
    assert len(changed) >= 10 and {a["part"] for a in first["actions"]} == {"storage"}
    partition = next(a for a in changed if a["id"] == "storage/d1/partition")
    assert partition["argv"][0] == "sgdisk" and partition["destructive"] and partition["consent"] == "yes"
    assert partition["seconds"] >= 0 and partition["why"].startswith("drive d1")
    assert next(a for a in changed if a["id"] == "storage/fstab")["diff"].startswith("--- /dev/null")
    (part,) = first["parts"]
    assert (part["part"], part["status"], part["changed"]) == ("storage", "converged", len(changed))
    assert again["actions"] and {a["status"] for a in again["actions"]} == {"ok"}
    assert again["parts"][0]["changed"] == 0


def test_verify_passes_then_names_the_swap_turned_off_by_hand(provisioned, sysroot):
    drive, profile, _, _ = provisioned
    code, out, err = hostctl("verify", "--only", "storage", "--config", str(profile))
    assert code == 0, out + err
    for check_id in ("storage/converged", "storage/d1/mount", "storage/d1/swap", "storage/fstab", "storage/sysctl",
                     "storage/sysctl/vm.swappiness", "storage/dirs/planes_cache"):
        assert f"pass  {check_id}:" in out, out
    check(["swapoff", drive.part(1)])
    code, out, err = hostctl("verify", "--json", "--only", "storage", "--config", str(profile))
    doc = json.loads(out)
    assert code == 1 and not doc["ok"], out + err
    failed = {c["id"]: c for c in doc["checks"] if c["status"] == "fail"}
    assert set(failed) == {"storage/converged", "storage/d1/swap"}
    assert f"{drive.part(1)} is not active swap" in failed["storage/d1/swap"]["found"]
    assert "swapon --priority 1" in failed["storage/converged"]["found"]


# ---------------------------------------------------------------- over SSH


@pytest.fixture
def sshd(tmp_path, sysroot):
    """A private sshd on 127.0.0.1 that hands every session HOSTCTL_SYSROOT=<the test's sysroot>;
    yields (the --host and --ssh-config arguments that reach it, sshd's directory)."""
    # the other side's installed hostctl, where its boot units would call it: this checkout's
    (sysroot / "usr/local/bin").mkdir(parents=True, exist_ok=True)
    os.symlink(hostctl_console_script(), sysroot / "usr/local/bin/hostctl")
    with private_sshd(tmp_path / "ssh", {"HOSTCTL_SYSROOT": str(sysroot)}) as (spec, log, config):
        yield ["--host", spec, "--ssh-config", str(config)], log.parent


def test_verify_over_ssh_reads_the_other_sides_facts_and_files(provisioned, sshd, tmp_path, sysroot):
    drive, profile, _, _ = provisioned
    over_ssh, d = sshd
    # This side's sysroot holds nothing: whatever verify finds provisioned, it read over SSH.
    env = dict(os.environ, HOSTCTL_SYSROOT=str(tmp_path / "empty"))
    code, out, err = hostctl("verify", "--only", "storage", "--config", str(profile), env=env)
    assert code == 0 and "storage: not provisioned" in out, out + err
    code, out, err = hostctl("verify", "--json", "--only", "storage", *over_ssh, "--config", str(profile), env=env)
    assert code == 0, out + err
    doc = json.loads(out)
    assert doc["host"].startswith("ssh://root@127.0.0.1:") and "?" not in doc["host"]
    assert doc["parts"][0]["status"] == "pass" and doc["parts"][0]["checks"] >= 7
    assert {c["status"] for c in doc["checks"]} == {"pass"}
    local = json.loads(hostctl("verify", "--json", "--only", "storage", "--config", str(profile))[1])
    print(f"\n  verify --only storage: {local['seconds']:.2f} s here, {doc['seconds']:.2f} s over ssh "
          f"({len(doc['checks'])} checks)")
    check(["swapoff", drive.part(1)])
    code, out, err = hostctl("verify", "--only", "storage", *over_ssh, "--config", str(profile), env=env)
    assert code == 1 and "FAIL  storage/d1/swap:" in out, out + err
    assert out.strip().endswith("failed: storage/converged, storage/d1/swap")
    # verify closed its SSH connection: no ssh process of this test's config is left behind
    left = subprocess.run(["pgrep", "-f", f"ssh .*{d}"], capture_output=True, text=True).stdout.split()
    assert left == [], left
