"""A private sshd on 127.0.0.1 for the tests that reach "another host" over SSH (verify --host,
the cluster's remote take-down): its own host and client keys, config and known_hosts in a
directory of the test's, root by key only, and each session's environment set by the test."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from need import need


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hostctl_console_script() -> str:
    """The console script of the Python running these tests (this checkout), else the one on PATH."""
    beside = Path(sys.executable).parent / "hostctl"
    found = str(beside) if beside.exists() else shutil.which("hostctl")
    need(found is not None, "the hostctl console script (pip install -e .) is not installed")
    return found


@contextmanager
def private_sshd(d: Path, session_env: dict[str, str]) -> Iterator[tuple[str, Path, Path]]:
    """Start sshd with its files in `d` (made here); yields (the ssh:// spec that reaches it, its
    log, the client's ssh config: hostctl's --ssh-config or a member's ssh_config). Every session
    gets `session_env`, and a PATH that finds this checkout's hostctl first."""
    sshd_bin = shutil.which("sshd") or ("/usr/sbin/sshd" if os.path.exists("/usr/sbin/sshd") else None)
    need(sshd_bin is not None, "sshd (openssh-server; .ci/run installs it) is not installed")
    hostctl_bin = hostctl_console_script()
    d.mkdir(mode=0o700)
    for key in ("host", "client"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"hostctl-test-{key}", "-f",
                        str(d / key)], check=True, capture_output=True, timeout=60)
    (d / "authorized_keys").write_text((d / "client.pub").read_text())
    port = free_port()
    path = f"{os.path.dirname(hostctl_bin)}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    env = " ".join(f"{k}={v}" for k, v in {**session_env, "PATH": path}.items())
    (d / "sshd_config").write_text("\n".join([
        f"ListenAddress 127.0.0.1:{port}", f"HostKey {d / 'host'}", f"PidFile {d / 'sshd.pid'}",
        f"AuthorizedKeysFile {d / 'authorized_keys'}", "PermitRootLogin prohibit-password",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "StrictModes no",
        "AllowTcpForwarding no", "X11Forwarding no", "PrintMotd no", "LogLevel VERBOSE",
        f"SetEnv {env}", ""]))
    kind, key = (d / "host.pub").read_text().split(" ", 2)[:2]
    known = d / "known_hosts"
    known.write_text(f"[127.0.0.1]:{port} {kind} {key}\n")
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
        yield f"ssh://root@127.0.0.1:{port}", log, d / "ssh_config"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if made_run_dir:
            shutil.rmtree("/run/sshd", ignore_errors=True)
