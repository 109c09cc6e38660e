"""`hostctl verify` on real loop drives provisioned under a private sysroot, on this host and over
SSH: a second sshd on a free port of 127.0.0.1, started by the test with its own host key, a
client key made in the test and `SetEnv HOSTCTL_SYSROOT=...`, so the remote side reads the test's
sysroot and never this machine's /etc. No mock: verify connects through testinfra's ssh backend and
reads the facts with the hostctl installed here (`hostctl facts --json` over the same connection).
Also `provision --json` of a real storage run: `changed`, then on the re-run only `ok`."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopdrives import check, drive_toml, write_profile
from loopdrives import host, restore_sysctls, sysroot  # noqa: F401  (fixtures)
from need import need

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


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def sshd(tmp_path, sysroot):
    """A private sshd on 127.0.0.1 that hands every session HOSTCTL_SYSROOT=<the test's sysroot>;
    yields the --host spec that reaches it."""
    sshd_bin = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
    # the console script of the Python running these tests (this checkout), else the one on PATH
    beside = Path(sys.executable).parent / "hostctl"
    hostctl_bin = str(beside) if beside.exists() else shutil.which("hostctl")
    for what, found in (("sshd (openssh-server; .ci/run installs it)", sshd_bin),
                        ("the hostctl console script (pip install -e .)", hostctl_bin)):
        need(found is not None, f"{what} is not installed")
    d = tmp_path / "ssh"
    d.mkdir(mode=0o700)
    for key in ("host", "client"):
        check(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"hostctl-test-{key}", "-f", str(d / key)])
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    port = _free_port()
    path = f"{os.path.dirname(hostctl_bin)}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    (d / "sshd_config").write_text("\n".join([
        f"ListenAddress 127.0.0.1:{port}", f"HostKey {d / 'host'}", f"PidFile {d / 'sshd.pid'}",
        f"AuthorizedKeysFile {d / 'authorized_keys'}", "PermitRootLogin prohibit-password",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
        "AllowTcpForwarding no", "X11Forwarding no", "PrintMotd no",
        f"SetEnv HOSTCTL_SYSROOT={sysroot} PATH={path}", ""]))
    known = d / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {(d / 'host.pub').read_text().split(' ', 2)[0]} "
                     f"{(d / 'host.pub').read_text().split(' ', 2)[1]}\n")
    (d / "ssh_config").write_text("\n".join([
        "Host 127.0.0.1", f"  IdentityFile {d / 'client'}", "  IdentitiesOnly yes", f"  UserKnownHostsFile {known}",
        "  StrictHostKeyChecking yes", "  BatchMode yes", "  LogLevel ERROR", ""]))
    # the other side's installed hostctl, where its boot units would call it: this checkout's
    (sysroot / "usr/local/bin").mkdir(parents=True, exist_ok=True)
    os.symlink(hostctl_bin, sysroot / "usr/local/bin/hostctl")
    made_run_dir = not os.path.isdir("/run/sshd")
    if made_run_dir:
        os.makedirs("/run/sshd", mode=0o755)  # sshd's privilege separation directory
    proc = subprocess.Popen([sshd_bin, "-D", "-e", "-f", str(d / "sshd_config")], stdout=subprocess.DEVNULL,
                            stderr=open(d / "sshd.log", "w"))
    try:
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"sshd did not start: {(d / 'sshd.log').read_text()[-2000:]}")
            time.sleep(0.1)
        yield f"ssh://root@127.0.0.1:{port}?ssh_config={d / 'ssh_config'}", d
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if made_run_dir:
            shutil.rmtree("/run/sshd", ignore_errors=True)


def test_verify_over_ssh_reads_the_other_sides_facts_and_files(provisioned, sshd, tmp_path, sysroot):
    drive, profile, _, _ = provisioned
    spec, d = sshd
    # This side's sysroot holds nothing: whatever verify finds provisioned, it read over SSH.
    env = dict(os.environ, HOSTCTL_SYSROOT=str(tmp_path / "empty"))
    code, out, err = hostctl("verify", "--only", "storage", "--config", str(profile), env=env)
    assert code == 0 and "storage: not provisioned" in out, out + err
    code, out, err = hostctl("verify", "--json", "--only", "storage", "--host", spec, "--config", str(profile), env=env)
    assert code == 0, out + err
    doc = json.loads(out)
    assert doc["host"].startswith("ssh://root@127.0.0.1:") and "?" not in doc["host"]
    assert doc["parts"][0]["status"] == "pass" and doc["parts"][0]["checks"] >= 7
    assert {c["status"] for c in doc["checks"]} == {"pass"}
    local = json.loads(hostctl("verify", "--json", "--only", "storage", "--config", str(profile))[1])
    print(f"\n  verify --only storage: {local['seconds']:.2f} s here, {doc['seconds']:.2f} s over ssh "
          f"({len(doc['checks'])} checks)")
    check(["swapoff", drive.part(1)])
    code, out, err = hostctl("verify", "--only", "storage", "--host", spec, "--config", str(profile), env=env)
    assert code == 1 and "FAIL  storage/d1/swap:" in out, out + err
    assert out.strip().endswith("failed: storage/converged, storage/d1/swap")
    # verify closed its SSH connection: no ssh process of this test's config is left behind
    left = subprocess.run(["pgrep", "-f", f"ssh .*{d}"], capture_output=True, text=True).stdout.split()
    assert left == [], left
