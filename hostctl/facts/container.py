"""The runtime container as the Docker engine sees it (docker SDK), for the commands that act on
it (up's watch, the supervisor, down, status, bench, tune): its state, a local image's id, its
log (a tail, or the whole of it for `hostctl logs`), and a live feed of its engine events (`oom`,
`die` with the exit code) and log lines for the watcher. The engine facts doctor judges are
facts/engine.py's.

Events and log lines are read from the moment `docker compose up` was asked, so a container that
dies at once is still seen; the container's state is polled as well, in case the event stream
hiccups. A container that ended (`docker kill`, a crash) is started again in place by compose,
with the same id and its earlier run's log: what came before that moment belongs to the earlier
run and is not this one's (a supervised restart read the kill that caused it as its own death).
"""

from __future__ import annotations

import queue
import re
import threading
import time
from datetime import datetime, timezone

from pydantic import ConfigDict

from hostctl.data import Data

API_TIMEOUT_S = 10


def client():
    """The docker SDK's client for the engine DOCKER_HOST names; an engine that does not answer is
    a FailedError naming its socket, not a traceback."""
    import docker

    try:
        return docker.from_env(version="auto", timeout=API_TIMEOUT_S)
    except docker.errors.DockerException as exc:
        from hostctl.errors import FailedError
        from hostctl.facts.engine import unreachable

        raise FailedError(unreachable(exc), fix="start the engine (`systemctl start docker`) or point DOCKER_HOST "
                          "at the one that runs the runtime, then run the command again") from exc


class ContainerState(Data):
    exists: bool
    id: str | None = None
    status: str | None = None  # created, running, exited, ...
    image_id: str | None = None  # the image it was created from, as the engine's id
    exit_code: int | None = None
    oom_killed: bool | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    error: str | None = None
    rw_binds: tuple[str, ...] = ()  # host directories bound read-write: the caches `down` keeps

    @property
    def running(self) -> bool:
        return self.status == "running"


def parse_timestamp(text: str | None) -> datetime | None:
    """The engine's RFC 3339 time (nanoseconds, Z) as an aware datetime; None for its "never" (0001-...)."""
    if not text or text.startswith("0001-"):
        return None
    m = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(\.\d+)?", text)
    if not m:
        return None
    frac = (m.group(2) or ".0")[:7]
    return datetime.strptime(m.group(1) + frac, "%Y-%m-%dT%H:%M:%S.%f").replace(tzinfo=timezone.utc)


def container_state(name: str, dc=None) -> ContainerState:
    """The container's state; an engine that fails to answer is a FailedError naming the container."""
    import docker.errors
    import requests.exceptions

    own = dc is None
    dc = dc or client()
    try:
        c = dc.containers.get(name)
        s = c.attrs.get("State", {})
        return ContainerState(exists=True, id=c.id, status=s.get("Status"), image_id=c.attrs.get("Image") or None,
                              exit_code=s.get("ExitCode"),
                              oom_killed=s.get("OOMKilled"), started_at=parse_timestamp(s.get("StartedAt")),
                              finished_at=parse_timestamp(s.get("FinishedAt")), error=s.get("Error") or None,
                              rw_binds=tuple(m["Source"] for m in c.attrs.get("Mounts") or ()
                                             if m.get("Type") == "bind" and m.get("RW") and m.get("Source")))
    except docker.errors.NotFound:
        return ContainerState(exists=False)
    except (docker.errors.DockerException, requests.exceptions.RequestException) as exc:
        from hostctl.errors import FailedError

        raise FailedError(f"the engine did not say how container {name} is: {exc.__class__.__name__}: {exc}",
                          fix="check the engine (`systemctl status docker`, `docker ps`) and run the command again") from exc
    finally:
        if own:
            dc.close()


class Item(Data):
    model_config = ConfigDict(defer_build=False)

    kind: str  # "event" | "log" | "log-end"
    text: str  # event action, or the log line
    at: float  # time.monotonic() when received
    attrs: dict | None = None
    time_ns: int | None = None  # the engine's own timestamp for events


class Feed:
    """Background readers of one container's engine events and logs, into one queue."""

    def __init__(self, name: str, since: float, container_id: str | None = None):
        self.name = name
        # Epoch seconds (the host's clock, which is also the engine's): events and log lines from
        # this moment on. The events API takes whole seconds, so earlier ones are dropped by their
        # nanosecond time.
        self.since = since
        self._since_ns = int(since * 1e9)
        # A container of the same name may have died a moment before (the previous run): only
        # this container's events count.
        self.container_id = container_id
        self.q: queue.Queue[Item] = queue.Queue()
        self._dc = client()
        self._events = None
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def start_events(self) -> None:
        self._events = self._dc.events(decode=True, since=int(self.since),
                                       filters={"type": "container", "container": self.name})
        t = threading.Thread(target=self._read_events, name="hostctl-events", daemon=True)
        t.start()
        self._threads.append(t)

    def start_logs(self) -> None:
        t = threading.Thread(target=self._read_logs, name="hostctl-logs", daemon=True)
        t.start()
        self._threads.append(t)

    def _read_events(self) -> None:
        try:
            for ev in self._events:
                if self._stop.is_set():
                    break
                if ev.get("Type") != "container" or ev.get("Actor", {}).get("Attributes", {}).get("name") != self.name:
                    continue
                if self.container_id and ev.get("id") != self.container_id:
                    continue
                if (ev.get("timeNano") or 0) < self._since_ns:
                    continue
                self.q.put(Item(kind="event", text=ev.get("Action") or ev.get("status") or "", at=time.monotonic(),
                                attrs=ev.get("Actor", {}).get("Attributes", {}), time_ns=ev.get("timeNano")))
        except Exception:  # the stream closes when we stop it, or when the engine goes away
            pass

    def _read_logs(self) -> None:
        buf = b""
        try:
            c = self._dc.containers.get(self.name)
            for chunk in c.logs(stream=True, follow=True, stdout=True, stderr=True, since=self.since):
                if self._stop.is_set():
                    break
                buf += chunk
                # tqdm progress bars rewrite one line with \r: treat each update as a line.
                *lines, buf = re.split(rb"\r\n|\r|\n", buf)
                for raw in lines:
                    if raw.strip():
                        self.q.put(Item(kind="log", text=raw.decode(errors="replace"), at=time.monotonic()))
        except Exception:
            pass
        if buf.strip():
            self.q.put(Item(kind="log", text=buf.decode(errors="replace"), at=time.monotonic()))
        self.q.put(Item(kind="log-end", text="", at=time.monotonic()))

    def drain(self, wait: float = 0.0) -> list[Item]:
        items: list[Item] = []
        try:
            items.append(self.q.get(timeout=wait) if wait else self.q.get_nowait())
            while True:
                items.append(self.q.get_nowait())
        except queue.Empty:
            pass
        return items

    def close(self) -> None:
        self._stop.set()
        try:
            if self._events is not None:
                self._events.close()
        except Exception:
            pass
        try:
            self._dc.close()
        except Exception:
            pass


def image_id(ref: str) -> str | None:
    """The id of the local image `ref` names; None when the engine does not have it (hostctl never pulls)."""
    import docker.errors

    dc = client()
    try:
        return dc.images.get(ref).id
    except docker.errors.ImageNotFound:
        return None
    finally:
        dc.close()


def log_tail(name: str, lines: int) -> list[str]:
    """The container's last log lines (a dead or paused one still has its log); [] when it is gone
    or the engine hiccuped: callers diagnose without it."""
    try:
        dc = client()
        try:
            raw = dc.containers.get(name).logs(tail=lines)
        finally:
            dc.close()
    except Exception:
        return []
    return [ln for ln in raw.decode(errors="replace").splitlines() if ln.strip()]


def stream_logs(name: str, follow: bool, write) -> None:
    """The container's log, whole or followed (`hostctl logs`), handed to write() as it comes."""
    import docker.errors

    from hostctl.errors import FailedError

    dc = client()
    try:
        try:
            c = dc.containers.get(name)
        except docker.errors.NotFound:
            raise FailedError(f"no runtime container {name}", fix="start it with `hostctl up`") from None
        if follow:
            for chunk in c.logs(stream=True, follow=True):
                write(chunk)
        else:
            write(c.logs())
    finally:
        dc.close()
