"""The demo runtime for system tests: the image, throwaway hosts (profile, recipe, sysroot, port),
and ONE shared runtime started once per test session that every read-only test (status, smoke,
logs, bench, qualify, doctor) talks to. A boot costs ~40 s here; CI pays for each.

Order (tests/conftest.py sorts the session): tests that use the shared runtime first, then the
one marked `stops_shared_runtime` (it takes the shared runtime down and checks what is left),
then every test that boots (or breaks) a runtime of its own. The session also counts every
runtime container the engine started (docker events, label io.hostctl.profile) and prints it.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from need import IN_CI, missing, need

ROOT = Path(__file__).resolve().parents[2]
DEMO_RECIPE = ROOT / "runtime" / "recipes" / "demo-cpu-tiny-moe.yaml"
SHARED_PORT = 18510
SHARED_NAME = "shared"
STOPS_MARK = "stops_shared_runtime"
SHARED_FIXTURE = "shared_runtime"


def engine_answers() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "info"], capture_output=True, timeout=30).returncode == 0


def build_demo_image() -> str:
    need(engine_answers(), "the Docker engine does not answer (.ci/run starts it)")
    from hostctl import images

    try:
        return images.ensure_demo()
    except Exception as exc:  # a machine without the torch wheel or debootstrap cannot build it
        if IN_CI:
            raise
        missing(f"cannot build the CPU demo image: {exc}")


def engine_cores(container: str) -> list[int]:
    """The host pids of the runtime's engine core processes (vLLM names them VLLM::EngineCore;
    the comm is cut at 15 bytes): what a test freezes to stand in for a wedged engine."""
    import psutil

    def is_core(p: psutil.Process) -> bool:
        try:
            return p.name().startswith("VLLM::EngineCor") or "EngineCore" in " ".join(p.cmdline())
        except psutil.NoSuchProcess:  # ZombieProcess too: a worker that exited and is not reaped yet (CI saw one)
            return False

    top = int(subprocess.check_output(["docker", "inspect", "-f", "{{.State.Pid}}", container], text=True).strip())
    cores = [p.pid for p in psutil.Process(top).children(recursive=True) if is_core(p)]
    assert cores, f"no VLLM::EngineCore process in {container}"
    return cores


class Frozen:
    """SIGSTOP of the runtime's engine cores, SIGCONT when the block ends (also after a failure):
    its API server goes on answering /health while no request completes."""

    def __init__(self, container: str) -> None:
        self.pids = engine_cores(container)

    def __enter__(self) -> Frozen:
        for pid in self.pids:
            os.kill(pid, signal.SIGSTOP)
        return self

    def thaw(self) -> None:
        for pid in self.pids:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:  # stopped with its container meanwhile
                pass

    def __exit__(self, *exc) -> None:
        self.thaw()


def demo_recipe(**changes) -> dict:
    data = yaml.safe_load(DEMO_RECIPE.read_text())
    data.update(changes)
    return data


class Host:
    """A throwaway host: profile, recipe copy, sysroot, cache directory, its own Compose project
    (hc5-*) and port."""

    def __init__(self, tmp: Path, name: str, port: int, *, recipe: dict | None = None, image: str | None = None,
                 cache: Path | None = None, container_ram: str | None = None):
        self.tmp, self.project, self.port = tmp, f"hc5-{name}", port
        self.sysroot = tmp / "sysroot"
        self.sysroot.mkdir()
        self.cache = cache if cache is not None else tmp / "compile-cache"
        if cache is None:
            self.cache.mkdir()
        data = recipe if recipe is not None else yaml.safe_load(DEMO_RECIPE.read_text())
        (tmp / "recipe.yaml").write_text(yaml.safe_dump(data, sort_keys=False))
        lines = [f'name = "{self.project}"', 'recipe = "recipe.yaml"', "[memory]", 'host_reserve = "4GiB"',
                 *([f'container_ram = "{container_ram}"'] if container_ram else []),
                 "[storage]", f'compile_cache = "{self.cache}"', "[runtime]", f'project = "{self.project}"',
                 f"api_port = {port}"]
        if image:
            lines.append(f'image = "{image}"')
        self.profile = tmp / "hostctl.toml"
        self.profile.write_text("\n".join(lines) + "\n")
        self.state = self.sysroot / "var/lib/hostctl"

    def env(self) -> dict:
        return dict(os.environ, HOSTCTL_SYSROOT=str(self.sysroot))

    def argv(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "hostctl", *args, "--config", str(self.profile)]

    def run(self, *args: str, timeout: float = 400) -> tuple[int, str, str, float]:
        t0 = time.monotonic()
        p = subprocess.run(self.argv(*args), capture_output=True, text=True, env=self.env(), timeout=timeout, cwd=ROOT)
        return p.returncode, p.stdout, p.stderr, time.monotonic() - t0

    def popen(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(self.argv(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=self.env(), cwd=ROOT)

    @property
    def container(self) -> str:
        return f"{self.project}-runtime"

    def container_exists(self) -> bool:
        return subprocess.run(["docker", "container", "inspect", self.container], capture_output=True).returncode == 0

    def cleanup(self) -> None:
        subprocess.run(["docker", "rm", "-f", self.container], capture_output=True)


class SharedRuntime(Host):
    """The session's one demo runtime. `up` is started in the background so the lifecycle lock can
    be probed while it runs (a second up/down must fail fast); its result is kept for the test
    that asserts on it."""

    def start(self) -> None:
        first = self.popen("up")
        self.up_pid = first.pid
        self.lock_probes: dict[str, tuple[int, str, str, float]] = {}
        try:
            lock = self.state / "lock"
            deadline = time.monotonic() + 60
            while not (lock.exists() and lock.read_text().strip()) and time.monotonic() < deadline:
                time.sleep(0.1)
            for verb in ("up", "down"):
                self.lock_probes[verb] = self.run(verb, timeout=60)
            self.up_out, self.up_err = first.communicate(timeout=400)
        finally:
            if first.poll() is None:
                first.kill()
        self.up_rc = first.returncode

    def require_ready(self) -> None:
        if self.up_rc != 0:
            pytest.fail(f"the shared demo runtime did not start (rc {self.up_rc}):\n{self.up_err[-3000:]}")


def shared_runtime(demo_image, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shared-runtime")
    h = SharedRuntime(tmp, SHARED_NAME, SHARED_PORT)
    try:
        h.start()
        yield h
    finally:
        subprocess.run(h.argv("down"), capture_output=True, env=h.env(), timeout=120, cwd=ROOT)
        h.cleanup()


def order(items: list) -> None:
    """Shared-runtime users first, then the test that stops it, then everything else (stable)."""
    def rank(item) -> int:
        if item.get_closest_marker(STOPS_MARK):
            return 1
        if SHARED_FIXTURE in getattr(item, "fixturenames", ()):
            return 0
        return 2

    items.sort(key=rank)


class BootCounter:
    """Every runtime container the engine starts during the session (hostctl labels them)."""

    def __init__(self) -> None:
        self.proc = None
        if shutil.which("docker") is None:
            return
        try:
            self.proc = subprocess.Popen(
                ["docker", "events", "--filter", "type=container", "--filter", "event=start", "--filter",
                 "label=io.hostctl.profile", "--format", "{{.Actor.Attributes.name}}"],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        except OSError:
            self.proc = None

    def stop(self) -> list[str] | None:
        if self.proc is None:
            return None
        self.proc.terminate()
        try:
            out, _ = self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            out, _ = self.proc.communicate()
        return [ln for ln in out.splitlines() if ln.strip()]
