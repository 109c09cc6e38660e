"""A real systemd for system tests: this machine's PID 1 is not systemd (no `systemd-run`), so
a container runs systemd as its PID 1 (README "Supervision", how it is tested).

The box is a Docker container of the debootstrap base (hostctl.images) plus Debian's systemd,
installed from the configured Debian mirror at build time and tagged by a hash of its inputs. It
shares the host's network (never a bridge) and the host's cgroup namespace, and gets the host's
Docker socket, the docker CLI with its Compose plugin, the checkout, the test's Python and the
test's directories bind-mounted at the same paths: hostctl inside drives the host's engine and
the real demo runtime, and the paths it renders into the Compose project mean the same thing to
that engine. The engine's service is outside the box; a stand-in docker.service (a oneshot that
checks the engine answers) satisfies the unit's Requires=docker.service.

Capabilities are the few systemd needs (SYS_ADMIN for its mounts), not --privileged: this
machine's capability bounding set lacks CAP_SYS_RESOURCE, which --privileged asks for.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time
from pathlib import Path

DOCKERFILE = """FROM {base}
RUN apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \\
    systemd systemd-sysv && apt-get clean && rm -rf /var/lib/apt/lists/*
STOPSIGNAL SIGRTMIN+3
CMD ["/lib/systemd/systemd"]
"""
REPO = "hostctl/systemd-box"
DOCKER_UNIT = """[Unit]
Description=stand-in for the host's Docker engine (its socket is bind-mounted into this box)
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/usr/local/bin/docker info --format {{.ServerVersion}}
"""
CAPS = ("SYS_ADMIN", "NET_ADMIN", "SYS_PTRACE", "DAC_READ_SEARCH", "IPC_LOCK", "SYS_NICE")


def _run(argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, **kw)


def ensure_image() -> str:
    from hostctl import images

    base = images.ensure_base()
    text = DOCKERFILE.format(base=base)
    tag = f"{REPO}:{hashlib.sha256(text.encode()).hexdigest()[:16]}"
    if images.image_exists(tag):
        return tag
    ctx = Path(subprocess.check_output(["mktemp", "-d"], text=True).strip())
    try:
        (ctx / "Dockerfile").write_text(text)
        # The legacy builder with host networking, as hostctl.images builds the demo (BuildKit's
        # RUN steps get no network on these engines).
        res = _run(["docker", "build", "--network", "host", "-t", tag, str(ctx)],
                   env={"DOCKER_BUILDKIT": "0", "PATH": "/usr/local/bin:/usr/bin:/bin"}, timeout=900)
        if res.returncode != 0:
            raise RuntimeError(f"building {tag} failed:\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
    finally:
        shutil.rmtree(ctx, ignore_errors=True)
    return tag


def python_mounts() -> list[Path]:
    """What the test's Python needs inside the box: its venv and the interpreter it was made from."""
    found = {Path(sys.prefix).resolve(), Path(sys.base_prefix).resolve(), Path(sys.executable).resolve().parent.parent}
    return sorted(p for p in found if not str(p).startswith(("/usr", "/bin", "/lib")))


class SystemdBox:
    def __init__(self, name: str, mounts: list[Path]):
        self.name = name
        self.mounts = sorted({Path(m).resolve() for m in mounts})

    def start(self, timeout: float = 60) -> None:
        image = ensure_image()
        _run(["docker", "rm", "-f", self.name])
        argv = ["docker", "run", "-d", "--name", self.name, "--network", "host", "--cgroupns", "host",
                "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
                *[a for c in CAPS for a in ("--cap-add", c)],
                "--tmpfs", "/run", "--tmpfs", "/run/lock", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw",
                "-v", "/var/run/docker.sock:/var/run/docker.sock"]
        docker = Path(shutil.which("docker") or "/usr/local/bin/docker").resolve()
        argv += ["-v", f"{docker}:/usr/local/bin/docker:ro"]
        for plugins in ("/usr/local/lib/docker/cli-plugins", "/usr/libexec/docker/cli-plugins",
                        "/usr/lib/docker/cli-plugins"):
            if Path(plugins).is_dir():
                argv += ["-v", f"{plugins}:{plugins}:ro"]
        for m in self.mounts:
            argv += ["-v", f"{m}:{m}"]
        res = _run([*argv, image])
        if res.returncode != 0:
            raise RuntimeError(f"the systemd box did not start: {res.stderr.strip()}")
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            state = self.exec("systemctl", "is-system-running").stdout.strip()
            if state in ("running", "degraded"):
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"systemd in the box did not finish booting (state {state!r})")
        self.write("/etc/systemd/system/docker.service", DOCKER_UNIT)
        self.exec("systemctl", "daemon-reload", check=True)

    def exec(self, *argv: str, check: bool = False, timeout: float = 600) -> subprocess.CompletedProcess:
        res = _run(["docker", "exec", self.name, *argv], timeout=timeout)
        if check and res.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} in the box: rc {res.returncode}: {res.stderr.strip()}")
        return res

    def write(self, path: str, text: str) -> None:
        res = subprocess.run(["docker", "exec", "-i", self.name, "sh", "-c", f"mkdir -p \"$(dirname {path})\" && cat > {path}"],
                             input=text, capture_output=True, text=True)
        if res.returncode != 0:
            raise RuntimeError(f"writing {path} in the box: {res.stderr.strip()}")

    def show(self, unit: str, *props: str) -> dict[str, str]:
        out = self.exec("systemctl", "show", unit, "-p", ",".join(props)).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def journal(self, unit: str) -> str:
        return self.exec("journalctl", "--no-pager", "-o", "cat", "-u", unit).stdout

    def remove(self) -> None:
        _run(["docker", "rm", "-f", self.name])
