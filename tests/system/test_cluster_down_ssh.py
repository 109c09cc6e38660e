"""The group take-down reaching a member over SSH, for real: a private sshd on a free port of
127.0.0.1 (its own host key, a client key made here), and a follower whose address is 127.0.0.1
but whose `ssh` in cluster.toml sends its part of `down` through that sshd (the SSH transport of
`verify --host`). Neither runtime is running, so no container starts: the follower's line comes
from its own `hostctl down --member follow`, run on the far side of the SSH connection (its
stdout, marked with the host it came from); sshd's log shows the key it accepted.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hostctl import paths
from hostctl.cluster import run
from need import need

pytestmark = pytest.mark.system
ROOT = Path(__file__).resolve().parents[2]
HOSTS = paths.hosts_dir()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _check(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


@pytest.fixture
def sshd(tmp_path):
    """A private sshd on 127.0.0.1 whose sessions run this checkout's hostctl; yields (spec, log)."""
    sshd_bin = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
    beside = Path(sys.executable).parent / "hostctl"
    hostctl_bin = str(beside) if beside.exists() else shutil.which("hostctl")
    for what, found in (("sshd (openssh-server; .ci/run installs it)", sshd_bin),
                        ("the hostctl console script (pip install -e .)", hostctl_bin)):
        need(found is not None, f"{what} is not installed")
    d = tmp_path / "ssh"
    d.mkdir(mode=0o700)
    for key in ("host", "client"):
        _check(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"hostctl-test-{key}", "-f", str(d / key)])
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    port = _free_port()
    path = f"{os.path.dirname(hostctl_bin)}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    # PYTHONPATH: the far side runs this checkout's hostctl whatever the console script was installed from.
    (d / "sshd_config").write_text("\n".join([
        f"ListenAddress 127.0.0.1:{port}", f"HostKey {d / 'host'}", f"PidFile {d / 'sshd.pid'}",
        f"AuthorizedKeysFile {d / 'authorized_keys'}", "PermitRootLogin prohibit-password",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
        "AllowTcpForwarding no", "X11Forwarding no", "PrintMotd no", "LogLevel VERBOSE",
        f"SetEnv PATH={path} PYTHONPATH={ROOT}", ""]))
    host_pub = (d / "host.pub").read_text().split(" ", 2)
    known = d / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {host_pub[0]} {host_pub[1]}\n")
    (d / "ssh_config").write_text("\n".join([
        "Host 127.0.0.1", f"  IdentityFile {d / 'client'}", "  IdentitiesOnly yes", f"  UserKnownHostsFile {known}",
        "  StrictHostKeyChecking yes", "  BatchMode yes", "  LogLevel ERROR", ""]))
    made_run_dir = not os.path.isdir("/run/sshd")
    if made_run_dir:
        os.makedirs("/run/sshd", mode=0o755)  # sshd's privilege separation directory
    log = d / "sshd.log"
    proc = subprocess.Popen([sshd_bin, "-D", "-e", "-f", str(d / "sshd_config")], stdout=subprocess.DEVNULL,
                            stderr=open(log, "w"))
    try:
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"sshd did not start: {log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield f"ssh://root@127.0.0.1:{port}?ssh_config={d / 'ssh_config'}", log
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if made_run_dir:
            shutil.rmtree("/run/sshd", ignore_errors=True)


def write_cluster(tmp_path: Path, ssh: str) -> Path:
    members = []
    for name, role, rank, api, extra in (("lead", "leader", 0, 8321, ""), ("follow", "follower", 1, 8322,
                                                                           f'ssh = "{ssh}"\n')):
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
    spec, log = sshd
    cluster = write_cluster(tmp_path, spec)
    p = hostctl("down", "--cluster", str(cluster))
    assert p.returncode == 0, p.stdout + p.stderr
    lines = p.stdout.strip().splitlines()
    # the leader first, here; then the follower's own `down --member follow`, over SSH
    assert lines[0] == "lead: down", lines
    port = spec.split(":")[2].split("?")[0]
    assert lines[1] == f"follow: down (on ssh://root@127.0.0.1:{port})", lines
    assert "follow: taking it down over ssh://root@127.0.0.1" in p.stderr
    assert "Accepted publickey for root" in log.read_text()


def test_an_unreachable_ssh_member_fails_down_and_names_it(tmp_path, sshd):
    spec, log = sshd
    dead = _free_port()  # nobody listens there
    cluster = write_cluster(tmp_path, spec.replace(spec.split(":")[2].split("?")[0], str(dead), 1))
    p = hostctl("down", "--cluster", str(cluster))
    assert p.returncode == 1, p.stdout + p.stderr
    assert "could not take down follow" in p.stderr and f"cannot reach ssh://root@127.0.0.1:{dead}" in p.stderr
    assert "lead: down" in p.stderr  # what was done is still said


def test_a_failed_groups_take_down_reaches_the_ssh_member(tmp_path, sshd):
    spec, _ = sshd
    from hostctl.cluster.commands import load

    cluster = write_cluster(tmp_path, spec)
    _, cp, _ = load(cluster, None)
    said: list[str] = []
    lines = run.group_down(cp, said.append, reason="lead failed", me="lead", cluster_path=cluster)
    assert lines[0] == "lead: down (lead failed)"
    assert lines[1].startswith("follow: down (on ssh://") and \
        lines[1].endswith("(lead failed)"), lines
