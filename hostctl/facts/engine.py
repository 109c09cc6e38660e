"""Container engine facts: the Docker engine (reachable, version, runtimes, cgroup setup, the
daemon's own limits, hostctl's runtime containers) and the Compose v2 CLI plugin.

The engine is asked through the docker SDK's low-level client (its answers are the engine's own
documents). The SDK costs ~0.12 s to import (requests, urllib3, ssl), so it is imported only by
the functions that ask the engine, and only once a local socket is known to be usable: a host
without an engine, and every command that needs no engine, never imports it.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from hostctl import runner

if TYPE_CHECKING:
    from docker import APIClient

    from hostctl.facts.records import ContainerFacts, DaemonLimits, EngineFacts, ImageFacts

DEFAULT_SOCKET = "/var/run/docker.sock"
API_TIMEOUT_S = 3
# Containers hostctl rendered carry this label (templates/compose.yaml.j2).
RUNTIME_LABEL = "io.hostctl.profile"
KEPT_LABELS = ("io.hostctl.profile", "io.hostctl.recipe", "io.hostctl.phase", "com.docker.compose.project",
               "com.docker.compose.service")
DOCKERD_PIDFILE = Path("/var/run/docker.pid")
PROC = Path("/proc")
# Where the docker CLI looks for plugins (after ~/.docker/cli-plugins), in its order.
CLI_PLUGIN_DIRS = ("/usr/local/lib/docker/cli-plugins", "/usr/local/libexec/docker/cli-plugins",
                   "/usr/lib/docker/cli-plugins", "/usr/libexec/docker/cli-plugins")
CAP_SYS_RESOURCE = 24


def local_socket() -> str | None:
    """The unix socket of the engine DOCKER_HOST names (default /var/run/docker.sock); None for a remote engine."""
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return None
    return host.removeprefix("unix://") or DEFAULT_SOCKET


def _client() -> "APIClient":
    """The SDK's low-level client for the engine DOCKER_HOST names (TLS and SSH as the SDK knows
    them); its API version is the engine's own (asked once, `version="auto"`)."""
    import docker

    return docker.APIClient(**docker.utils.kwargs_from_env(), version="auto", timeout=API_TIMEOUT_S)


def unreachable(exc: Exception) -> str:
    """Why the engine could not be asked, naming the socket it was asked on."""
    path = local_socket()
    where = f" at {path}" if path is not None else ""
    return f"Docker engine unreachable{where}: {_one_line(str(exc) or type(exc).__name__)}"


def _refusal(exc: Exception) -> str:
    """The engine's own message of an API error (docker.errors.APIError.explanation)."""
    return _one_line(getattr(exc, "explanation", None) or str(exc))


def container_logs(container_id: str, tail: int = 2000) -> str:
    """The last `tail` lines of a container's stdout and stderr, with timestamps (for support bundles)."""
    client = _client()
    try:
        return client.logs(container_id, stdout=True, stderr=True, timestamps=True, tail=tail).decode("utf-8", "replace")
    finally:
        client.close()


def _one_line(text: str) -> str:
    lines = [ln.strip() for ln in str(text).splitlines() if ln.strip()]
    return lines[0] if lines else "unknown error"


def _socket_problem() -> str | None:
    """A plain-words reason when the local socket cannot work, before any request's own error."""
    path = local_socket()
    if path is None:
        return None  # a remote engine: only the SDK can tell
    if not os.path.exists(path):
        return f"Docker socket {path} does not exist (engine not installed or not running)"
    if not os.access(path, os.R_OK | os.W_OK):
        return f"permission denied on {path} (run as root or join the docker group)"
    return None


def compose_plugin() -> str | None:
    """The Compose v2 CLI plugin binary the docker CLI would run, if it lies in a standard place."""
    config = os.environ.get("DOCKER_CONFIG") or os.path.expanduser("~/.docker")
    for folder in (os.path.join(config, "cli-plugins"),) + CLI_PLUGIN_DIRS:
        candidate = os.path.join(folder, "docker-compose")
        if os.access(candidate, os.X_OK):
            return candidate
    return None


def probe_compose() -> tuple[str | None, str | None]:
    """(version, reason it is unavailable). The plugin is asked directly (~20 ms) rather than
    through `docker compose` (~70-200 ms: a second Go binary that only dispatches to it), beside
    the engine's API round trips (probe_engine). Not remembered between runs: a reader writes
    nothing, and the memo saved ~10 ms of doctor's ~400 on the 2-CPU machine."""
    plugin = compose_plugin()
    if plugin is not None and shutil.which("docker"):
        direct = runner.run([plugin, "version", "--short"], timeout=10)
        if direct.ok and direct.stdout.strip():
            return direct.stdout.strip().removeprefix("v"), None
    result = runner.run(["docker", "compose", "version", "--short"], timeout=10)
    if not result.ok:
        if result.missing:
            return None, "the docker CLI is not installed, so Compose v2 cannot run"
        return None, f"Compose v2 plugin unavailable: {result.why()}"
    return result.stdout.strip().removeprefix("v") or None, None


def probe_engine(image_refs: tuple[str, ...] = ()) -> EngineFacts:
    """image_refs: the image references to resolve to image ids (the plan's runtime image)."""
    from concurrent.futures import ThreadPoolExecutor  # not at import: `status` asks one container, without a pool

    # the compose CLI takes as long as the engine's API round trips: run them side by side
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="hostctl-compose") as pool:
        compose = pool.submit(probe_compose)
        facts = probe_docker(image_refs)
        facts.compose_version, facts.compose_reason = compose.result()
    return facts


def _limit(value: str) -> int | None:
    return None if value == "unlimited" else int(value)


def read_daemon_limits(pid: int, proc: Path = PROC) -> DaemonLimits:
    """The engine daemon's memlock and open-file limits and whether it may raise them: a
    container's `ulimits` are set by the engine's runc, which needs CAP_SYS_RESOURCE to go
    above the limits it inherited ("error setting rlimit" otherwise)."""
    from hostctl.facts.records import DaemonLimits

    limits = DaemonLimits(pid=pid)
    for line in (proc / str(pid) / "limits").read_text().splitlines():
        fields = re.split(r"\s{2,}", line.strip())
        if len(fields) >= 3 and fields[0] == "Max locked memory":
            limits.memlock_soft_bytes, limits.memlock_hard_bytes = _limit(fields[1]), _limit(fields[2])
        elif len(fields) >= 3 and fields[0] == "Max open files":
            limits.nofile_soft, limits.nofile_hard = _limit(fields[1]), _limit(fields[2])
    for line in (proc / str(pid) / "status").read_text().splitlines():
        if line.startswith("CapEff:"):
            limits.cap_sys_resource = bool(int(line.split()[1], 16) >> CAP_SYS_RESOURCE & 1)
    return limits


def daemon_pid(proc: Path = PROC, pidfile: Path = DOCKERD_PIDFILE) -> int | None:
    try:
        pid = int(pidfile.read_text().strip())
        if (proc / str(pid) / "comm").read_text().strip() == "dockerd":
            return pid
    except (OSError, ValueError):
        pass
    for entry in os.scandir(proc):
        if entry.name.isdigit():
            try:
                if Path(entry.path, "comm").read_text().strip() == "dockerd":
                    return int(entry.name)
            except OSError:
                continue
    return None


def _container(summary: dict, inspect: dict | None) -> ContainerFacts:
    from hostctl.facts.records import ContainerFacts

    return ContainerFacts(**container_fields(summary, inspect))


def container_fields(summary: dict, inspect: dict | None) -> dict:
    """ContainerFacts' fields, as plain values, from the engine's summary and inspect documents."""
    labels = summary.get("Labels") or {}
    state = (inspect or {}).get("State") or {}
    names = summary.get("Names") or []
    return dict(
        id=summary.get("Id", ""),
        name=(names[0].lstrip("/") if names else summary.get("Id", "")[:12]),
        image=summary.get("Image"),
        state=state.get("Status") or summary.get("State") or "unknown",
        status=summary.get("Status"),
        health=(state.get("Health") or {}).get("Status"),
        exit_code=state.get("ExitCode"),
        oom_killed=state.get("OOMKilled"),
        pid=state.get("Pid") or None,
        image_id=(inspect or {}).get("Image"),
        started_at=state.get("StartedAt"),
        finished_at=state.get("FinishedAt"),
        labels={k: v for k, v in labels.items() if k in KEPT_LABELS},
    )


def _image(client: "APIClient", ref: str) -> ImageFacts:
    import docker.errors

    from hostctl.facts.records import ImageFacts

    try:
        return ImageFacts(ref=ref, id=client.inspect_image(ref).get("Id"))
    except docker.errors.APIError as exc:
        return ImageFacts(ref=ref, reason=_refusal(exc))


def probe_docker(image_refs: tuple[str, ...] = ()) -> EngineFacts:
    """image_refs: the image references to resolve to image ids (the plan's runtime image)."""
    from hostctl.facts.records import EngineFacts

    problem = _socket_problem()
    if problem:
        return EngineFacts(available=False, reason=problem)
    try:
        client = _client()
        try:
            info = client.info()
            containers = []
            for summary in client.containers(all=True, filters={"label": [RUNTIME_LABEL]}):
                containers.append(_container(summary, _inspect(client, summary["Id"])))
            images = [_image(client, ref) for ref in image_refs]
            api_version = client.api_version
        finally:
            client.close()
    except Exception as exc:  # the SDK wraps socket, HTTP and API errors in several types
        return EngineFacts(available=False, reason=unreachable(exc))
    facts = EngineFacts(
        version=info.get("ServerVersion"),
        api_version=api_version,
        runtimes=sorted(info.get("Runtimes") or {}),
        default_runtime=info.get("DefaultRuntime"),
        cgroup_version=str(info["CgroupVersion"]) if info.get("CgroupVersion") else None,
        cgroup_driver=info.get("CgroupDriver"),
        containers=containers,
        images=images,
    )
    if local_socket() is None:
        return facts  # a remote engine's daemon is another machine's process
    try:
        pid = daemon_pid()
        if pid is None:
            facts.daemon_reason = "no dockerd process visible here (rootless engine, or another PID namespace)"
        else:
            facts.daemon = read_daemon_limits(pid)
    except (OSError, ValueError) as exc:
        facts.daemon_reason = f"cannot read the engine daemon's limits: {exc}"
    return facts


def _inspect(client: "APIClient", container: str) -> dict | None:
    """A container's inspect document; None when the engine has no such container (removed
    between listing and asking)."""
    import docker.errors

    try:
        return client.inspect_container(container)
    except docker.errors.NotFound:
        return None


def probe_container(name: str) -> tuple[dict | None, str | None]:
    """One container, by name, as the engine sees it: (ContainerFacts' fields, None); (None, None)
    when the engine has no container of that name; (None, why) when the engine cannot be asked.
    For `status`, which needs this container and nothing else of the host, and so no model: plain
    values."""
    problem = _socket_problem()
    if problem:
        return None, problem
    import docker.errors

    try:
        client = _client()
        try:
            inspect = _inspect(client, name)
        finally:
            client.close()
    except docker.errors.APIError as exc:
        return None, f"the Docker engine refused: {_refusal(exc)}"
    except Exception as exc:  # the SDK wraps socket, HTTP and API errors in several types
        return None, unreachable(exc)
    if inspect is None:
        return None, None
    config = inspect.get("Config") or {}
    summary = {"Id": inspect.get("Id", ""), "Names": [inspect.get("Name") or name], "Image": config.get("Image"),
               "Labels": config.get("Labels") or {}}
    return container_fields(summary, inspect), None
