"""The host `hostctl verify` reads, through pytest-testinfra's Python API: this machine
(`local://`) or another one over SSH (`ssh://user@host[:port]`, parsed by hostctl.sshtarget; no
query options: an ssh config file comes only from --ssh-config or a member's `ssh_config`, and
only when root or the invoking user owns it). Each command is one `ssh ... -- HOST COMMAND`
that hostctl builds (sshtarget.ssh_argv), run by a small testinfra backend of this module.

Everything is read through the same connection: commands, files (under the target's own
HOSTCTL_SYSROOT, read from its environment), and on a remote host its facts, from the hostctl
installed there (`hostctl --config PROFILE facts --json`; the hostctl its boot units call,
/usr/local/bin/hostctl, else the one on its PATH). testinfra is imported here and only
here, when verify runs: `--help`, `plan` and `status` never load it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
import tempfile
from typing import Any

from hostctl import sshtarget
from hostctl.errors import FailedError
from hostctl.facts.sysfiles import Stat
from hostctl.sshtarget import SshTarget

SSH_TIMEOUT_S = 15


def parse_target(spec: str | None, field: str = "--host") -> SshTarget | None:
    """The ssh target `spec` names (hostctl.sshtarget.parse: exit 2 naming `field`), or None for this host."""
    if spec is None or spec in ("local", "local://"):
        return None
    return sshtarget.parse(spec, field)


def _ssh_host(target: SshTarget, config: str | None, control_path: str):
    """A testinfra Host whose every command runs as the argv hostctl.sshtarget.ssh_argv builds,
    without a shell: testinfra's own ssh backend puts the host where ssh reads options and takes
    options from the URL's query, so it is not used."""
    import subprocess

    import testinfra.host
    from testinfra.backend.base import BaseBackend

    class HostctlSsh(BaseBackend):
        NAME = "ssh"

        def run(self, command: str, *args: str, **kwargs: Any):
            remote = self.get_command(command, *args)
            argv = sshtarget.ssh_argv(target, remote, config=config, control_path=control_path,
                                      timeout_s=SSH_TIMEOUT_S)
            p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, check=False)
            out = self.result(p.returncode, self.encode(remote), p.stdout, p.stderr)
            if p.returncode == 255:  # ssh itself failed (testinfra's convention, kept for the callers)
                raise RuntimeError(out)
            return out

    backend = HostctlSsh(target.host)
    host = testinfra.host.Host(backend)
    backend.set_host(host)
    return host


class Target:
    """An open connection: the testinfra host, the target's sysroot and its Python."""

    def __init__(self, host: Any, name: str, remote: bool, *, ssh: SshTarget | None = None,
                 ssh_config: str | None = None, sysroot: str = "/", python: str = sys.executable,
                 hostctl: str = "hostctl", control_dir: str | None = None) -> None:
        self.host = host
        self.name = name  # "local" or ssh://user@host:port
        self.remote = remote
        self.ssh = ssh
        self.ssh_config = ssh_config
        self.sysroot = sysroot
        self.python = python  # a Python on the target, for the endpoint checks
        self.hostctl = hostctl  # the hostctl on the target (remote only)
        self._control_dir = control_dir  # the SSH master's socket directory, removed by close()

    # ---- the Reader interface of hostctl.facts.sysfiles, over testinfra

    def _p(self, host_path: str) -> str:
        return os.path.join(self.sysroot, host_path.lstrip("/")) if self.sysroot not in ("", "/") else host_path

    def read_bytes(self, host_path: str) -> bytes | None:
        r = self.host.run("cat -- %s", self._p(host_path))
        return r.stdout_bytes if r.rc == 0 else None

    def stat(self, host_path: str) -> Stat | None:
        r = self.host.run("stat -L -c '%%F %%u %%g' -- %s", self._p(host_path))
        if r.rc != 0:
            return None
        kind, uid, gid = r.stdout.strip().rsplit(" ", 2)
        return Stat(is_dir=kind == "directory", uid=int(uid), gid=int(gid))

    def stat_real(self, path: str) -> Stat | None:
        """A path of the running system itself (a mountpoint, a binary), not under the sysroot."""
        r = self.host.run("stat -L -c '%%F %%u %%g' -- %s", path)
        if r.rc != 0:
            return None
        kind, uid, gid = r.stdout.strip().rsplit(" ", 2)
        return Stat(is_dir=kind == "directory", uid=int(uid), gid=int(gid))

    def readlink(self, host_path: str) -> str | None:
        r = self.host.run("readlink -- %s", self._p(host_path))
        return r.stdout.strip() if r.rc == 0 else None

    def real_is_dir(self, path: str) -> bool:
        return self.host.run("test -d %s", path).rc == 0

    def run(self, argv: list[str]) -> tuple[int, str]:
        r = self.host.run(shlex.join(argv))
        return r.rc, r.stdout

    # ---- helpers for the checks

    def cmd(self, command: str, *args: str):
        return self.host.run(command, *args)

    def close(self) -> None:
        """Stop the SSH master connection verify opened (nothing of verify outlives it)."""
        if self._control_dir is None:
            return
        control = os.path.join(self._control_dir, "master")
        if os.path.exists(control):
            import subprocess

            argv = sshtarget.ssh_argv(self.ssh, None, config=self.ssh_config, control_path=control, control="exit")
            subprocess.run(argv, capture_output=True, timeout=30, check=False)
        shutil.rmtree(self._control_dir, ignore_errors=True)
        self._control_dir = None


def connect(spec: str | None, *, ssh_config: str | None = None, field: str = "--host",
            config_field: str = "--ssh-config") -> Target:
    """Open the target `spec` names; `ssh_config`: an ssh config file to use (checked by
    hostctl.sshtarget.trusted_config, exit 3 when another user could have written it)."""
    import testinfra  # only verify imports testinfra

    ssh = parse_target(spec, field)
    if ssh is None:
        from hostctl import paths

        return Target(testinfra.get_host("local://"), "local", remote=False, sysroot=str(paths.sysroot()))
    config = sshtarget.trusted_config(ssh_config, config_field) if ssh_config is not None else None
    shown = ssh.display()
    # One SSH connection for every command (ControlMaster in a private directory), closed at the end.
    control_dir = tempfile.mkdtemp(prefix="hostctl-verify-ssh-")
    host = _ssh_host(ssh, config, os.path.join(control_dir, "master"))
    target = Target(host, shown, remote=True, ssh=ssh, ssh_config=config, control_dir=control_dir)
    try:
        # The hostctl there is the one its boot units call (/usr/local/bin/hostctl, under its
        # sysroot), else the one its PATH finds.
        probe = host.run('r="${HOSTCTL_SYSROOT:-/}"; printf "%s\\n" "$r"; '
                         'if [ -x "${r%/}/usr/local/bin/hostctl" ]; then echo "${r%/}/usr/local/bin/hostctl"; '
                         'else command -v hostctl || echo /usr/local/bin/hostctl; fi')
    except RuntimeError as exc:  # testinfra raises when ssh itself fails (exit 255)
        target.close()
        out = getattr(exc.args[0], "stderr", "") if exc.args else ""
        raise FailedError(f"cannot reach {shown} over SSH", details=str(out).strip().splitlines()[-3:],
                          fix="check `ssh` to that machine works with the same user, port and key") from None
    lines = probe.stdout.splitlines()
    target.sysroot = lines[0] if lines else "/"
    target.hostctl = lines[1] if len(lines) > 1 else "/usr/local/bin/hostctl"
    shebang = host.run("head -c 200 -- %s", target.hostctl).stdout.splitlines()[:1]
    target.python = shebang[0][2:].strip() if shebang and shebang[0].startswith("#!") else "python3"
    return target


def remote_facts(target: Target, profile_path: str, profile_bytes: bytes):
    """The target's facts from its own hostctl, with the same profile (which must be there too)."""
    import hashlib

    from hostctl.facts.records import HostFacts

    there = target.host.run("sha256sum -- %s", profile_path)
    if there.rc != 0:
        raise FailedError(f"the profile {profile_path} is not on {target.name}: verify reads that machine's facts "
                          "with the same profile, at the same path",
                          fix="install it there (`hostctl provision --only system` puts it at /etc/hostctl/hostctl.toml) "
                              "and pass that path as --config")
    res = target.host.run("%s --config %s facts --json", target.hostctl, profile_path)
    if res.rc != 0:
        raise FailedError(f"`hostctl facts --json` failed on {target.name} (exit {res.rc})",
                          details=res.stderr.strip().splitlines()[-5:],
                          fix=f"run `hostctl --config {profile_path} facts` there to see why")
    try:
        facts = HostFacts.model_validate_json(res.stdout, strict=True)
    except ValueError as exc:
        raise FailedError(f"the facts {target.name} printed are not this hostctl's {exc.__class__.__name__}",
                          details=str(exc).splitlines()[:3],
                          fix="install the same hostctl version on both machines") from None
    same = there.stdout.split()[0] == hashlib.sha256(profile_bytes).hexdigest()
    return facts, same
