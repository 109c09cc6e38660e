"""Container engine facts: the Docker engine (reachable, version, runtimes, cgroup setup)
through the docker SDK, and the Compose v2 CLI plugin."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor

from hostctl import runner
from hostctl.facts.model import EngineFacts

DEFAULT_SOCKET = "/var/run/docker.sock"
API_TIMEOUT_S = 3


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[0] if lines else "unknown error"


def _socket_problem() -> str | None:
    """A plain-words reason when the default socket cannot work, before the SDK's own error."""
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return None  # a remote engine: only the SDK can tell
    path = host.removeprefix("unix://") or DEFAULT_SOCKET
    if not os.path.exists(path):
        return f"Docker socket {path} does not exist (engine not installed or not running)"
    if not os.access(path, os.R_OK | os.W_OK):
        return f"permission denied on {path} (run as root or join the docker group)"
    return None


def probe_compose() -> tuple[str | None, str | None]:
    """(version, reason it is unavailable)."""
    result = runner.run(["docker", "compose", "version", "--short"], timeout=10)
    if not result.ok:
        if result.missing:
            return None, "the docker CLI is not installed, so Compose v2 cannot run"
        return None, f"Compose v2 plugin unavailable: {result.why()}"
    return result.stdout.strip().removeprefix("v") or None, None


def probe_engine() -> EngineFacts:
    # the compose CLI takes as long as the engine's API round trips: run them side by side
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="hostctl-compose") as pool:
        compose = pool.submit(probe_compose)
        facts = probe_docker()
        facts.compose_version, facts.compose_reason = compose.result()
    return facts


def probe_docker() -> EngineFacts:
    problem = _socket_problem()
    if problem:
        return EngineFacts(available=False, reason=problem)
    try:
        import docker

        client = docker.from_env(version="auto", timeout=API_TIMEOUT_S)
        try:
            info = client.info()
            api_version = client.api.api_version
        finally:
            client.close()
    except ImportError as exc:
        return EngineFacts(available=False, reason=f"the docker SDK is not installed: {exc}")
    except Exception as exc:  # the SDK wraps socket, HTTP and API errors in several types
        return EngineFacts(available=False, reason=f"Docker engine unreachable: {_one_line(str(exc))}")
    return EngineFacts(
        version=info.get("ServerVersion"),
        api_version=api_version,
        runtimes=sorted(info.get("Runtimes") or {}),
        default_runtime=info.get("DefaultRuntime"),
        cgroup_version=str(info["CgroupVersion"]) if info.get("CgroupVersion") else None,
        cgroup_driver=info.get("CgroupDriver"),
    )
