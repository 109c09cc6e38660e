"""`hostctl status --watch`: a live view of the runtime and the GPUs, redrawn about once a second
with rich's Live until Ctrl-C.

Each frame reads: the container as the engine sees it, /health, the runtime's /metrics (requests,
KV cache, and tokens per second, prefix-cache hits and speculative-decoding acceptance from the
counters' change since the last frame), the GPUs through one NVML session, and the restart
history and last smoke hostctl recorded. It only reads: no canary is sent, so watching adds no
request to the runtime. The engine is judged on its counters alone (hostctl.service.liveness):
requests in flight with the counters still for hang_timeout_s (timed from the last frame with
nothing in flight, or the last move) is NOT WORKING; an idle engine is shown as idle (`hostctl
status` asks an idle one with a canary).

frame() is pure: a WatchFrame in, a rich renderable out, so the layout is tested on recorded data.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import Field

from hostctl.data import Data
from hostctl.facts.gpu_telemetry import GpuTelemetry
from hostctl.service.runtime_metrics import RuntimeRates, RuntimeSample

if TYPE_CHECKING:
    from hostctl.facts.gpu_telemetry import GpuWatch
    from hostctl.service.identity import RuntimeIdentity

GIB = 1024**3


class WatchFrame(Data):
    """What one frame shows."""

    at: str  # local time, HH:MM:SS
    container: str
    endpoint: str
    interval_s: float
    state: str  # running | exited | down | unknown ...
    state_detail: str = ""  # uptime, exit code, or why the engine could not be asked
    health: bool | None = None  # /health answered; None: not asked (not running)
    engine: str = ""  # the judgment on the counters
    sample: RuntimeSample | None = None
    rates: RuntimeRates | None = None
    gpus: GpuTelemetry = Field(default_factory=GpuTelemetry)
    restarts: str = "none recorded"
    last_smoke: str = "none recorded"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _num(value: float | None, fmt: str = "{:,.0f}") -> str:
    return "-" if value is None else fmt.format(value)


def frame(f: WatchFrame, *, live: bool = True) -> Any:
    """The frame as a rich renderable (a Group of lines and a GPU table); live: it is redrawn."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    every = f"every {f.interval_s:g} s, Ctrl-C quits" if live else "one view (not a terminal)"
    head = Text.assemble((f"{f.container}", "bold"), f"  {f.endpoint}  {every}  ", (f.at, "dim"))
    state_style = "green" if f.state == "running" and f.health else "red" if f.state != "running" or f.health is False \
        else "yellow"
    runtime = Text.assemble("runtime: ", (f.state, state_style), f" ({f.state_detail})" if f.state_detail else "")
    if f.health is not None:
        runtime.append("  health: ").append(*(("ok", "green") if f.health else ("not answering", "red")))
    if f.engine:
        runtime.append("  engine: ").append(f.engine, "red" if f.engine.startswith("NOT") else None)
    lines: list[Any] = [head, runtime]
    s, r = f.sample, f.rates or RuntimeRates()
    if s is not None:
        lines.append(Text(f"requests: {_num(s.running)} running, {_num(s.waiting)} waiting   "
                          f"KV cache: {_pct(s.kv_cache_usage)}"))
        tokens = (f"tokens/s: prompt {_num(r.prompt_tokens_per_s, '{:,.1f}')}, "
                  f"generation {_num(r.generation_tokens_per_s, '{:,.1f}')}   "
                  f"prefix-cache hits: {_pct(r.prefix_cache_hit_rate)}")
        if s.spec_draft_tokens is not None:  # only a recipe with speculative decoding exports it
            tokens += f"   spec-decode acceptance: {_pct(r.spec_acceptance_rate)}"
        lines.append(Text(tokens))
    elif f.state == "running":
        lines.append(Text("runtime metrics: /metrics could not be read", style="yellow"))
    if f.gpus.available and f.gpus.gpus:
        table = Table(box=None, pad_edge=False, show_edge=False, header_style="bold")
        for col, right in (("GPU", False), ("power / limit", True), ("temp", True), ("util", True),
                           ("memory", True), ("clocks held by", False)):
            table.add_column(col, justify="right" if right else "left")
        for g in f.gpus.gpus:
            power = f"{_num(g.power_draw_w)} / {_num(g.power_enforced_w)} W"
            memory = (f"{_num(None if g.memory_used_bytes is None else g.memory_used_bytes / GIB, '{:.1f}')} / "
                      f"{_num(None if g.memory_total_bytes is None else g.memory_total_bytes / GIB, '{:.1f}')} GiB")
            held = "-" if g.clocks_event_reasons is None else ", ".join(g.clocks_event_reasons) or "nothing"
            table.add_row(f"{g.index} {g.name}", power, f"{_num(g.temperature_c)} C",
                          f"{_num(g.utilization_percent)} %", memory, held)
        lines.append(table)
    else:
        lines.append(Text(f"GPUs: none readable ({f.gpus.reason or 'no GPU'})", style="dim"))
    lines.append(Text(f"restarts: {f.restarts}"))
    lines.append(Text(f"last smoke: {f.last_smoke}"))
    return Group(*lines)


def frame_text(f: WatchFrame, width: int = 120) -> str:
    """The frame as plain text (no terminal: one frame is printed and the watch ends)."""
    from rich.console import Console

    console = Console(width=width, record=True, color_system=None, force_terminal=False, file=_Null())
    console.print(frame(f, live=False))
    return console.export_text()


class _Null:
    def write(self, _text: str) -> int:
        return 0

    def flush(self) -> None:
        pass


class FrameReader:
    """Reads frames for one runtime (a plain class: the previous sample, the NVML session and the
    engine's progress carry from frame to frame)."""

    def __init__(self, rt: RuntimeIdentity, gpus: GpuWatch, interval_s: float) -> None:
        from hostctl.service.liveness import EngineProgress

        self.rt, self.gpus, self.interval_s = rt, gpus, interval_s
        self.previous: tuple[float, RuntimeSample] | None = None
        self.progress = EngineProgress(hang_timeout_s=rt.hang_timeout_s, started_at=time.monotonic())

    def read(self) -> WatchFrame:
        from hostctl.service import apiclient, liveness, runtime_metrics
        from hostctl.service.status import container_part, health_of

        part, _ = container_part(self.rt)
        state = part["state"]
        detail = part.get("reason", "")
        health = sample = rates = None
        engine = ""
        if state == "running":
            if "uptime_s" in part:
                up = part["uptime_s"]
                detail = f"up {up // 60} min {up % 60} s"
            health, _refused = health_of(self.rt.endpoint)
            asked = time.monotonic()
            with apiclient.client(timeout=min(3.0, self.interval_s * 2)) as c:
                sample = runtime_metrics.read(c, self.rt.endpoint)
            now = time.monotonic()
            if sample is not None:
                if self.previous is not None:
                    rates = runtime_metrics.rates(self.previous[1], sample, now - self.previous[0])
                self.previous = (now, sample)
            engine = self._judge(asked, liveness.counters_of(sample))
        elif "exit_code" in part:
            detail = f"exit code {part['exit_code']}" + (", OOM-killed" if part["oom_killed"] else "")
        return WatchFrame(at=datetime.now().strftime("%H:%M:%S"), container=self.rt.container,
                          endpoint=self.rt.endpoint, interval_s=self.interval_s, state=state, state_detail=detail,
                          health=health, engine=engine, sample=sample, rates=rates, gpus=self.gpus.read(),
                          restarts=_restarts(), last_smoke=_last_smoke())

    def _judge(self, asked: float, counters: Any) -> str:
        """The engine's line from a reading of /metrics asked at `asked` (None: none was read, which
        judges nothing: hostctl.service.liveness.EngineProgress)."""
        p = self.progress
        if counters is None:
            return "not judged (no counters in /metrics)"
        p.counters(asked, counters)
        if not counters.in_flight:
            # idle is not evidence of a freeze; without canaries, a stall is timed from when work
            # was last seen arriving, not from the last progress before an idle spell
            p.last_progress = asked
        stalled = p.stalled_s()
        if stalled is not None:
            return f"NOT WORKING: requests in flight and the counters still for {stalled:.0f} s"
        if p.busy():
            return f"working (counters moved {asked - p.last_progress:.0f} s ago)"
        return "idle"


def _restarts() -> str:
    from hostctl.service import restarts

    part = restarts.status_part()
    return part["text"] if part else "none recorded"


def _last_smoke() -> str:
    from hostctl.service import saved

    smoke = saved.load_smoke()
    return "none recorded" if smoke is None else f"{'passed' if smoke.ok else 'FAILED'} at {smoke.started_at}"


def run(rt: RuntimeIdentity, interval_s: float, *, interactive: bool) -> WatchFrame | None:
    """Redraw until Ctrl-C (interactive), or print one frame (output not a terminal); the last frame."""
    import sys

    from hostctl.facts.gpu_telemetry import GpuWatch
    from hostctl.interrupt import Interrupted

    with GpuWatch() as gpus:
        reader = FrameReader(rt, gpus, interval_s)
        if not interactive:
            last = reader.read()
            sys.stdout.write(frame_text(last))
            return last
        from rich.console import Console
        from rich.live import Live

        last = None
        try:
            last = reader.read()  # the first reading may take seconds (a busy engine, Docker): Ctrl-C ends it too
            with Live(frame(last), console=Console(), auto_refresh=False, transient=False) as live:
                while True:
                    time.sleep(interval_s)
                    last = reader.read()
                    live.update(frame(last), refresh=True)
        except (KeyboardInterrupt, Interrupted):
            pass  # Ctrl-C is how a watch is meant to end
    return last
