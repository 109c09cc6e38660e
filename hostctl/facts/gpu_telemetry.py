"""Live GPU readings through NVML: power draw, the limit set and the one enforced, temperature,
utilisation, memory in use and why the clocks are held down, read each time `status --watch`
refreshes and each time `hostctl metrics` is collected. hostctl.facts.gpu reads what a GPU *is*
(once per command); this reads what it is doing now, through the same NvmlAdapter.

One NVML session (`GpuWatch`) serves many readings: init costs ~11 ms on an H100
(benchmarks/results/doctor_quick-h100-early-gpus.txt), a refresh once a second should not pay it.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from hostctl.data import Data
from hostctl.facts.gpu import NvmlAdapter, NvmlUnavailable, Prober

# nvmlClocksEventReason* bits, in nvidia-smi's words (its "Clocks Event Reasons" section)
CLOCKS_EVENT_REASONS = {
    0x1: "idle",
    0x2: "applications clocks setting",
    0x4: "SW power cap",
    0x8: "HW slowdown",
    0x10: "sync boost",
    0x20: "SW thermal slowdown",
    0x40: "HW thermal slowdown",
    0x80: "HW power brake",
    0x100: "display clock setting",
}


def reason_names(mask: int) -> list[str]:
    """The named bits of a clocks event reasons mask, lowest first; an unknown bit by its value."""
    names = [name for bit, name in CLOCKS_EVENT_REASONS.items() if mask & bit]
    unknown = mask & ~sum(CLOCKS_EVENT_REASONS)
    return names + ([f"0x{unknown:x}"] if unknown else [])


class GpuReading(Data):
    """One GPU now; None where NVML has no answer for this GPU (NotSupported, a VM)."""

    model_config = ConfigDict(frozen=True)

    index: int
    uuid: str
    name: str
    power_draw_w: float | None = None
    power_limit_w: float | None = None  # the limit set on the GPU (what provision sets)
    power_enforced_w: float | None = None  # the limit in force: the lowest of the set one and every other limiter
    temperature_c: int | None = None
    utilization_percent: int | None = None
    memory_used_bytes: int | None = None
    memory_total_bytes: int | None = None
    clocks_event_reasons: list[str] | None = None  # empty: the clocks are not held down


class GpuTelemetry(Data):
    available: bool = True
    reason: str | None = None  # why nothing could be read
    gpus: list[GpuReading] = Field(default_factory=list)


class GpuWatch:
    """An open NVML session for repeated readings; `with GpuWatch() as w: w.read()`. A getter NVML
    cannot answer leaves its one field None, as in hostctl.facts.gpu (its Prober)."""

    def __init__(self, adapter: NvmlAdapter | None = None) -> None:
        self.nv = adapter or NvmlAdapter()
        self.p = Prober(self.nv)
        self.reason: str | None = None  # why NVML cannot be used at all

    def __enter__(self) -> GpuWatch:
        try:
            self.nv.init()
        except NvmlUnavailable as exc:
            self.reason = str(exc)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.reason is None:
            try:
                self.nv.shutdown()
            except self.nv.errors:
                pass

    def read(self) -> GpuTelemetry:
        if self.reason is not None:
            return GpuTelemetry(available=False, reason=self.reason)
        nv, p, out = self.nv, self.p, []
        try:
            count = nv.device_count()
        except nv.errors as exc:
            return GpuTelemetry(available=False, reason=f"NVML cannot count the GPUs: {exc}")
        for i in range(count):
            try:
                h = nv.handle(i)
                uuid = nv.uuid(h)
            except nv.errors:
                continue  # a GPU NVML cannot open (fallen off the bus): doctor says why
            reasons = p.get(nv.clocks_event_reasons, h)
            out.append(GpuReading(
                index=i, uuid=uuid, name=p.get(nv.name, h) or "unknown",
                power_draw_w=p.watts(nv.power_usage_mw, h),
                power_limit_w=p.watts(nv.power_limit_mw, h),
                power_enforced_w=p.watts(nv.power_enforced_mw, h),
                temperature_c=p.get(nv.temperature_c, h),
                utilization_percent=p.get(nv.utilization_percent, h),
                memory_used_bytes=p.get(nv.memory_used, h),
                memory_total_bytes=p.get(nv.memory_total, h),
                clocks_event_reasons=None if reasons is None else reason_names(reasons),
            ))
        return GpuTelemetry(gpus=out)


def read_telemetry(adapter: NvmlAdapter | None = None) -> GpuTelemetry:
    """One reading, in a session of its own."""
    with GpuWatch(adapter) as watch:
        return watch.read()


def read_power_limits_w(adapter: NvmlAdapter, indices: list[int]) -> dict[int, float | None]:
    """Each GPU's configured power limit in watts (None: NVML has no answer for it, or no driver):
    the supervisor's check for limits lost to a driver reload (provision/power_watch.py)."""
    with GpuWatch(adapter) as watch:
        out: dict[int, float | None] = {}
        for i in indices:
            h = None if watch.reason is not None else watch.p.get(adapter.handle, i)
            out[i] = None if h is None else watch.p.watts(adapter.power_limit_mw, h)
        return out
