"""`hostctl metrics`: a HostReading as Prometheus metrics, through prometheus_client (imported
here only): written for node_exporter's textfile collector, atomically, or served on a scrape
endpoint of its own that reads the host at each scrape.

Names follow Prometheus' conventions: the `hostctl_` prefix, base units in the name (_watts,
_bytes, _celsius, _seconds, _ratio), 1/0 gauges for yes/no. A series whose value hostctl does
not know is left out, never exported as 0. No secret is a label or a value: only paths, GPU
indices and UUIDs, role and part names. The alerting rules in prometheus/hostctl-alerts.yml use
these names (tests/unit/test_alert_rules.py keeps the two in step).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from hostctl.facts.records import StateFacts
from hostctl.metrics.reading import HostReading
from hostctl.service import restarts

TEXTFILE_NAME = "hostctl.prom"

# name -> (help, label names): every metric hostctl exports, all gauges
METRICS: dict[str, tuple[str, tuple[str, ...]]] = {
    "hostctl_metrics_generated_timestamp_seconds": ("When hostctl read the host for these metrics (unix time).", ()),
    "hostctl_gpu_power_draw_watts": ("GPU power draw now (NVML).", ("gpu", "uuid")),
    "hostctl_gpu_power_limit_watts": ("GPU power limit set on the GPU now (NVML's power management limit).",
                                      ("gpu", "uuid")),
    "hostctl_gpu_power_limit_enforced_watts": ("GPU power limit in force: the lowest of the set limit and every "
                                               "other limiter (NVML).", ("gpu", "uuid")),
    "hostctl_gpu_power_limit_planned_watts": ("GPU power limit the host profile sets (absent: it sets none).",
                                              ("gpu", "uuid")),
    "hostctl_gpu_temperature_celsius": ("GPU core temperature (NVML).", ("gpu", "uuid")),
    "hostctl_gpu_utilization_ratio": ("Share of the last sample period a kernel ran on the GPU (NVML), 0-1.",
                                      ("gpu", "uuid")),
    "hostctl_gpu_memory_used_bytes": ("GPU memory in use (NVML).", ("gpu", "uuid")),
    "hostctl_gpu_memory_total_bytes": ("GPU memory in all (NVML).", ("gpu", "uuid")),
    "hostctl_p2p_ok": ("1 when the stored P2P verdict (provision --only gpu) is ok, else 0.", ()),
    "hostctl_qualify_passed": ("1 when the stored qualify verdict (bench --suite qualify) passed, else 0.", ()),
    "hostctl_qualify_current": ("1 when the stored qualify verdict was measured on the service running now.", ()),
    "hostctl_provisioned": ("1 for each provision part recorded as converged on this host.", ("part",)),
    "hostctl_runtime_expected": ("1 when the runtime is meant to serve: `hostctl up` passed its gate or failed "
                                 "(the supervisor too), and no `hostctl down` since.", ()),
    "hostctl_runtime_up": ("1 when the runtime container is running.", ()),
    "hostctl_runtime_healthy": ("1 when the runtime answers /health and its engine works (moving counters or a "
                                "completed canary), else 0; absent while it is not running.", ()),
    "hostctl_runtime_loading": ("1 while the running runtime does not answer /health yet and started less than "
                                "the recipe's load_timeout_s ago: loading the model, not hung.", ()),
    "hostctl_runtime_restarts_last_hour": ("Restarts after a supervised ending (a death or a hang) in the last "
                                           "hour, as `hostctl status` counts them.", ()),
    "hostctl_runtime_last_restart_timestamp_seconds": ("When the supervisor last ended on a death or a hang "
                                                       "(unix time).", ()),
    "hostctl_runtime_kv_cache_usage_ratio": ("Share of the runtime's KV cache in use (vLLM), 0-1.", ()),
    "hostctl_runtime_requests_running": ("Requests the runtime's engine is running (vLLM).", ()),
    "hostctl_runtime_requests_waiting": ("Requests waiting for the runtime's engine (vLLM).", ()),
    "hostctl_cache_free_bytes": ("Room left on the filesystem of each storage role.", ("role", "path")),
    "hostctl_cache_size_bytes": ("Size of the filesystem of each storage role.", ("role", "path")),
    "hostctl_last_smoke_passed": ("1 when the last smoke suite passed, else 0.", ()),
    "hostctl_last_smoke_timestamp_seconds": ("When the last smoke suite ran (unix time).", ()),
}


def _unix(iso: str | None) -> float | None:
    if not iso:
        return None
    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def runtime_expected(st: StateFacts) -> bool:
    """The runtime is meant to serve: the last `up` passed its gate, or it (or the supervisor on a
    death or hang) failed and no `hostctl down` or Ctrl-C took it down since. A runtime that died
    and that systemd stopped restarting is down while expected: the alert that matters."""
    return st.service is not None and st.service.state in ("ready", "failed")


def loading(doc: dict, load_timeout_s: int | None) -> bool:
    """The running container does not answer /health yet and started less than load_timeout_s ago:
    a start or restart loading the model (up to 40 min in the big recipes), not a hang; past the
    bound, `up`'s gate and the supervisor call it stuck themselves."""
    if doc.get("health") is not False or load_timeout_s is None:
        return False
    uptime = doc.get("uptime_s")
    return uptime is not None and uptime <= load_timeout_s


def samples(r: HostReading) -> Iterator[tuple[str, dict[str, str], float]]:
    """(metric, labels, value) for everything the reading knows (pure)."""
    yield "hostctl_metrics_generated_timestamp_seconds", {}, r.read_at
    for g in r.gpus.gpus:
        at = {"gpu": str(g.index), "uuid": g.uuid}
        for name, value in (("hostctl_gpu_power_draw_watts", g.power_draw_w),
                            ("hostctl_gpu_power_limit_watts", g.power_limit_w),
                            ("hostctl_gpu_power_limit_enforced_watts", g.power_enforced_w),
                            ("hostctl_gpu_power_limit_planned_watts", r.planned_limits_w.get(g.index)),
                            ("hostctl_gpu_temperature_celsius", g.temperature_c),
                            ("hostctl_gpu_utilization_ratio",
                             None if g.utilization_percent is None else g.utilization_percent / 100),
                            ("hostctl_gpu_memory_used_bytes", g.memory_used_bytes),
                            ("hostctl_gpu_memory_total_bytes", g.memory_total_bytes)):
            if value is not None:
                yield name, at, float(value)
    st = r.state
    if st.p2p is not None:
        yield "hostctl_p2p_ok", {}, float(st.p2p.verdict == "ok")
    for part in sorted(st.provisioned):
        yield "hostctl_provisioned", {"part": part}, 1.0
    yield "hostctl_runtime_expected", {}, float(runtime_expected(st))
    history = restarts.summary(st.supervised, datetime.fromtimestamp(r.read_at, timezone.utc))
    yield "hostctl_runtime_restarts_last_hour", {}, float(history["restarts_in_window"] if history else 0)
    ended = [t for t in (_unix(e.ended_at) for e in st.supervised) if t is not None]
    if ended:
        yield "hostctl_runtime_last_restart_timestamp_seconds", {}, max(ended)
    for rp in r.roles:
        # a folder that does not exist reads its nearest parent's filesystem (an unmounted drive's
        # folder reads the root disk): its room would be another drive's
        if rp.room.exists and rp.room.free_bytes is not None and rp.room.total_bytes:
            at = {"role": rp.role, "path": rp.room.path}
            yield "hostctl_cache_free_bytes", at, float(rp.room.free_bytes)
            yield "hostctl_cache_size_bytes", at, float(rp.room.total_bytes)
    yield from _runtime(r)


def _runtime(r: HostReading) -> Iterator[tuple[str, dict[str, str], float]]:
    doc = r.runtime
    if doc is None:
        return
    qualify = doc.get("qualify")
    if qualify:
        yield "hostctl_qualify_passed", {}, float(bool(qualify["passed"]))
        yield "hostctl_qualify_current", {}, float(bool(qualify["this_service"]))
    if doc.get("state") != "unknown":  # the engine could not be asked: the container's state is not known
        yield "hostctl_runtime_up", {}, float(doc.get("state") == "running")
    if doc.get("state") == "running":
        yield "hostctl_runtime_loading", {}, float(loading(doc, r.load_timeout_s))
    if doc.get("healthy") is not None:
        yield "hostctl_runtime_healthy", {}, float(bool(doc["healthy"]))
    s = r.sample
    if s is not None:
        for name, value in (("hostctl_runtime_kv_cache_usage_ratio", s.kv_cache_usage),
                            ("hostctl_runtime_requests_running", s.running),
                            ("hostctl_runtime_requests_waiting", s.waiting)):
            if value is not None:
                yield name, {}, value
    smoke = doc.get("last_smoke")
    if smoke:
        yield "hostctl_last_smoke_passed", {}, float(bool(smoke["ok"]))
        at = _unix(smoke.get("at"))
        if at is not None:
            yield "hostctl_last_smoke_timestamp_seconds", {}, at


class ReadingCollector:
    """A prometheus_client collector over a function that reads the host: each collect() (each
    scrape, each textfile write) reads anew."""

    def __init__(self, read: Callable[[], HostReading]) -> None:
        self.read = read
        self.lock = threading.Lock()  # one reading at a time: a second scrape waits, not a second canary

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        with self.lock:
            reading = self.read()
        families: dict[str, Any] = {}
        for name, labels, value in samples(reading):
            help_text, label_names = METRICS[name]
            if name not in families:
                families[name] = GaugeMetricFamily(name, help_text, labels=list(label_names))
            families[name].add_metric([labels[k] for k in label_names], value)
        yield from families.values()


def registry(read: Callable[[], HostReading]) -> Any:
    from prometheus_client import CollectorRegistry

    reg = CollectorRegistry(auto_describe=False)
    reg.register(ReadingCollector(read))
    return reg


def exposition(read: Callable[[], HostReading]) -> bytes:
    """The text format node_exporter's textfile collector reads."""
    from prometheus_client import generate_latest

    return generate_latest(registry(read))


def write_textfile(folder: Path, data: bytes) -> Path:
    """folder/hostctl.prom replaced atomically (node_exporter never reads half a file). The folder
    is node_exporter's: hostctl.safefs.open_drop_dir walks to it without following a link and
    writes only into a folder root owns that no one else can write (Debian's, below the prometheus
    user's /var/lib/prometheus). It is not created: a missing one means a wrong path."""
    import os

    from hostctl import safefs
    from hostctl.errors import InputError

    try:
        fd = safefs.open_drop_dir(folder)
    except (FileNotFoundError, NotADirectoryError):
        raise InputError(f"--textfile-dir {folder}: no such folder",
                         fix="install node_exporter's textfile collector (Debian: prometheus-node-exporter) or "
                             "name its --collector.textfile.directory") from None
    try:
        safefs.write_in(fd, TEXTFILE_NAME, data, mode=0o644)  # 0644: node_exporter reads it as its own user
    finally:
        os.close(fd)
    return folder / TEXTFILE_NAME


def serve(host: str, port: int, read: Callable[[], HostReading], stop: threading.Event) -> None:
    """Answer scrapes on host:port until `stop` is set (Ctrl-C, SIGTERM)."""
    from prometheus_client import start_http_server

    from hostctl.errors import FailedError

    try:
        server, thread = start_http_server(port, addr=host, registry=registry(read))
    except OSError as exc:  # the port taken, an address this host does not have
        raise FailedError(f"--listen {host}:{port}: cannot listen there: {exc.strerror or exc}",
                          fix="choose a free port, or an address of this host") from None
    try:
        while not stop.wait(1.0):
            pass
    finally:
        server.shutdown()
        thread.join(timeout=5)


def parse_listen(text: str) -> tuple[str, int]:
    """--listen's HOST:PORT ([::1]:PORT for IPv6): an address literal, not a name to resolve."""
    import ipaddress

    from hostctl.errors import InputError

    host, sep, port_text = text.rpartition(":")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(host)
        port = int(port_text)
        if not (sep and 0 < port < 65536):
            raise ValueError
    except ValueError:
        raise InputError(f"--listen: expected ADDRESS:PORT with an IP address and a port 1-65535, got {text!r}",
                         fix="e.g. --listen 127.0.0.1:9835") from None
    return host, port
