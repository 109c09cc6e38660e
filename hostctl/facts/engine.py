"""Container engine facts: the Docker engine (reachable, version, runtimes, cgroup setup, the
daemon's own limits, hostctl's runtime containers) and the Compose v2 CLI plugin.

A local engine is asked over its unix socket with hostctl.http10: the docker SDK costs ~0.15 s
to import, most of doctor's quick-level budget, and http.client ~35 ms (ssl, email). A remote
engine (DOCKER_HOST=tcp://, ssh://) goes through the SDK, which knows TLS and SSH.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import struct
from pathlib import Path
from typing import TYPE_CHECKING

from hostctl import http10, runner
from hostctl.facts import compose_cache

if TYPE_CHECKING:
    from hostctl.facts.model import ContainerFacts, DaemonLimits, EngineFacts, ImageFacts

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


class EngineApiError(Exception):
    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status  # the HTTP status the engine answered with (404: no such object)


class EngineApi:
    """GET requests to a local Docker engine's API over its unix socket (hostctl.http10: one
    HTTP/1.0 connection per request, which on a local socket costs microseconds)."""

    def __init__(self, socket_path: str, timeout: float = API_TIMEOUT_S):
        self._path = socket_path
        self._timeout = timeout

    def response(self, url: str) -> http10.Response:
        resp = http10.get(url, unix_socket=self._path, host_header="docker", timeout=self._timeout)
        if resp.status != 200:
            try:
                message = json.loads(resp.body).get("message", "")
            except (ValueError, AttributeError):
                message = resp.body[:200].decode("utf-8", "replace")
            raise EngineApiError(f"GET {url}: HTTP {resp.status}: {message}", resp.status)
        return resp

    def get(self, url: str) -> bytes:
        return self.response(url).body

    def json(self, url: str):
        return json.loads(self.get(url))

    def close(self) -> None:
        pass  # nothing stays open between requests

    def __enter__(self) -> "EngineApi":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def local_socket() -> str | None:
    """The unix socket of the engine DOCKER_HOST names (default /var/run/docker.sock); None for a remote engine."""
    host = os.environ.get("DOCKER_HOST", "")
    if host and not host.startswith("unix://"):
        return None
    return host.removeprefix("unix://") or DEFAULT_SOCKET


def demux_logs(data: bytes) -> str:
    """The engine's log stream for a container without a TTY: 8-byte frame headers
    (stream, 0, 0, 0, big-endian length) before each chunk. With a TTY it is plain text."""
    if len(data) < 8 or data[0] not in (0, 1, 2) or data[1:4] != b"\0\0\0":
        return data.decode("utf-8", "replace")
    out, i = [], 0
    while i + 8 <= len(data):
        (size,) = struct.unpack(">I", data[i + 4:i + 8])
        out.append(data[i + 8:i + 8 + size])
        i += 8 + size
    return b"".join(out).decode("utf-8", "replace")


def container_logs(container_id: str, tail: int = 2000) -> str:
    """The last `tail` lines of a container's stdout and stderr, with timestamps (for support bundles)."""
    path = local_socket()
    if path is None:
        import docker  # a remote engine: the SDK knows how to reach it

        client = docker.from_env(timeout=API_TIMEOUT_S)
        try:
            return client.containers.get(container_id).logs(tail=tail, timestamps=True).decode("utf-8", "replace")
        finally:
            client.close()
    with EngineApi(path, timeout=10) as api:
        return demux_logs(api.get(f"/containers/{container_id}/logs?stdout=1&stderr=1&timestamps=1&tail={tail}"))


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
    through `docker compose` (~70-200 ms: a second Go binary that only dispatches to it), and
    only once per installed binary (hostctl.facts.compose_cache)."""
    plugin = compose_plugin()
    if plugin is not None and shutil.which("docker"):
        cached = compose_cache.remembered(plugin)
        if cached is not None:
            return cached, None
        before = compose_cache.identity(plugin)
        direct = runner.run([plugin, "version", "--short"], timeout=10)
        if direct.ok and direct.stdout.strip():
            version = direct.stdout.strip().removeprefix("v")
            compose_cache.remember(plugin, version, before)
            return version, None
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
    from hostctl.facts.model import DaemonLimits

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
    from hostctl.facts.model import ContainerFacts

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


def _image(api: "EngineApi", ref: str) -> ImageFacts:
    from urllib.parse import quote

    from hostctl.facts.model import ImageFacts

    try:
        return ImageFacts(ref=ref, id=api.json(f"/images/{quote(ref, safe='')}/json").get("Id"))
    except EngineApiError as exc:
        return ImageFacts(ref=ref, reason=_one_line(str(exc)))


def _probe_local(path: str, image_refs: tuple[str, ...] = ()) -> EngineFacts:
    from urllib.parse import quote

    from hostctl.facts.model import EngineFacts

    try:
        with EngineApi(path) as api:
            # The engine names its API version in a header of every answer: /version, which
            # asks containerd and runc for theirs (~10 ms here), is not needed for it.
            answer = api.response("/info")
            info, api_version = json.loads(answer.body), answer.headers.get("api-version")
            filters = quote(json.dumps({"label": [RUNTIME_LABEL]}))
            containers = []
            for summary in api.json(f"/containers/json?all=1&filters={filters}"):
                try:
                    inspect = api.json(f"/containers/{summary['Id']}/json")
                except EngineApiError:
                    inspect = None  # removed between the two requests
                containers.append(_container(summary, inspect))
            images = [_image(api, ref) for ref in image_refs]
    except (OSError, EngineApiError, ValueError) as exc:
        return EngineFacts(available=False, reason=f"Docker engine unreachable at {path}: {_one_line(str(exc) or type(exc).__name__)}")
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
    try:
        pid = daemon_pid()
        if pid is None:
            facts.daemon_reason = "no dockerd process visible here (rootless engine, or another PID namespace)"
        else:
            facts.daemon = read_daemon_limits(pid)
    except (OSError, ValueError) as exc:
        facts.daemon_reason = f"cannot read the engine daemon's limits: {exc}"
    return facts


def probe_docker(image_refs: tuple[str, ...] = ()) -> EngineFacts:
    from hostctl.facts.model import EngineFacts, ImageFacts

    problem = _socket_problem()
    if problem:
        return EngineFacts(available=False, reason=problem)
    path = local_socket()
    if path is not None:
        return _probe_local(path, image_refs)
    try:
        import docker

        client = docker.from_env(version="auto", timeout=API_TIMEOUT_S)
        try:
            info = client.info()
            api_version = client.api.api_version
            images = []
            for ref in image_refs:
                try:
                    images.append(ImageFacts(ref=ref, id=client.images.get(ref).id))
                except Exception as exc:  # NotFound or an API error: the reason is kept
                    images.append(ImageFacts(ref=ref, reason=_one_line(str(exc))))
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
        images=images,
    )


def _inspect_local(path: str, name: str) -> tuple[dict | None, str | None]:
    from urllib.parse import quote

    try:
        with EngineApi(path) as api:
            return api.json(f"/containers/{quote(name, safe='')}/json"), None
    except EngineApiError as exc:
        return None, (None if exc.status == 404 else f"the Docker engine refused: {_one_line(str(exc))}")
    except (OSError, ValueError) as exc:
        return None, f"Docker engine unreachable at {path}: {_one_line(str(exc) or type(exc).__name__)}"


def _inspect_remote(name: str) -> tuple[dict | None, str | None]:
    try:
        import docker  # a remote engine: the SDK knows how to reach it
        import docker.errors
    except ImportError as exc:
        return None, f"the docker SDK is not installed: {exc}"
    try:
        client = docker.from_env(version="auto", timeout=API_TIMEOUT_S)
        try:
            return client.containers.get(name).attrs, None
        finally:
            client.close()
    except docker.errors.NotFound:
        return None, None
    except Exception as exc:  # the SDK wraps socket, HTTP and API errors in several types
        return None, f"Docker engine unreachable: {_one_line(str(exc))}"


def probe_container(name: str) -> tuple[dict | None, str | None]:
    """One container, by name, as the engine sees it: (ContainerFacts' fields, None); (None, None)
    when the engine has no container of that name; (None, why) when the engine cannot be asked.
    For `status`, which needs this container and nothing else of the host, and so no model: plain
    values."""
    problem = _socket_problem()
    if problem:
        return None, problem
    path = local_socket()
    inspect, why = _inspect_local(path, name) if path is not None else _inspect_remote(name)
    if inspect is None:
        return None, why
    config = inspect.get("Config") or {}
    summary = {"Id": inspect.get("Id", ""), "Names": [inspect.get("Name") or name], "Image": config.get("Image"),
               "Labels": config.get("Labels") or {}}
    return container_fields(summary, inspect), None
