"""Start-up progress read from the runtime's log: named phases (shards loaded, KV cache size,
graph capture, converted layer N/M, API server up), the KV capacity the runtime reports, and
the no-progress watchdog's clock.

Progress is what moves a start forward: a phase line whose counter advances (a first-start
conversion printing "converted layer 17/43" is progressing however long it takes, and must
never be killed while it does), or a log line unlike any seen before. A line that repeats
with only its numbers changed (a timestamp, a heartbeat) is not progress: a deadlocked
runtime can print forever while doing nothing.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from pydantic import ConfigDict

from hostctl.data import Data
from hostctl import loglines

if TYPE_CHECKING:
    from hostctl.facts.records import KvAtReady

# Numbers are bounded: a runtime (or a model's code) printing a 5,000-digit "count" would make int()
# raise, and a match of unbounded digits costs the line's length; a real count has at most a dozen digits.
_NUM = r"(\d[\d,]{0,24})"


def _int(text: str) -> int:
    return int(text.replace(",", ""))


class Phase(Data):
    model_config = ConfigDict(frozen=True)

    id: str
    pattern: re.Pattern
    label: str  # format string over the match groups
    counter: bool = False  # groups (done, total): progress whenever `done` grows


PHASES: tuple[Phase, ...] = (
    Phase(id="server", pattern=re.compile(r"(?:vLLM API server version|\u2588\s+version) (\d[\w.+-]{0,63})"), label="vLLM {0} starting"),
    Phase(id="engine", pattern=re.compile(r"Initializing a V\d LLM engine"), label="engine initialising"),
    Phase(id="shards", pattern=re.compile(r"Loading (?:safetensors|pt) checkpoint shards:\s{1,16}\d{1,3}% Completed \|\s{0,16}(\d{1,9})/(\d{1,9})"),
          label="loading shards {0}/{1}", counter=True),
    Phase(id="weights", pattern=re.compile(r"(?:Loading weights took|Model loading took) (\d{1,12}(?:\.\d{1,12})? \w{1,16})"), label="weights loaded ({0})"),
    Phase(id="convert", pattern=re.compile(r"converted layer (\d{1,9})\s{0,4}/\s{0,4}(\d{1,9})"), label="converted layer {0}/{1}", counter=True),
    Phase(id="w2-tier", pattern=re.compile(r"moe_w2 delta tier"), label="moe_w2 delta tier built"),
    Phase(id="kv-cache", pattern=re.compile(r"KV cache size: " + _NUM + r" tokens"), label="KV cache {0} tokens"),
    Phase(id="concurrency", pattern=re.compile(r"Maximum concurrency for " + _NUM + r" tokens per request: (\d{1,12}(?:\.\d{1,12})?)x"),
          label="max concurrency {1}x at {0} tokens"),
    Phase(id="graphs", pattern=re.compile(r"Capturing CUDA graphs?|Graph capturing finished in (\d{1,12}(?:\.\d{1,12})?) sec"), label="graph capture"),
    Phase(id="init", pattern=re.compile(r"init engine \(profile, create kv cache, warmup model\) took (\d{1,12}(?:\.\d{1,12})?) s"),
          label="engine ready ({0} s: profile, KV cache, warm-up)"),
    Phase(id="api", pattern=re.compile(r"Starting vLLM (?:API )?server|Application startup complete"), label="API server listening"),
)

_SHAPE = re.compile(r"\d+")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def shape(line: str) -> str:
    """A line with its numbers masked: two lines of one shape differ only in counters or times."""
    return _SHAPE.sub("#", _ANSI.sub("", line)).strip()


class KvCapacity(Data):
    tokens: int | None = None
    concurrency: float | None = None  # full-context requests at once, as the runtime reports it
    per_request_tokens: int | None = None

    def full_context_requests(self, context: int) -> int | None:
        if self.concurrency is not None and self.per_request_tokens == context:
            return int(self.concurrency)
        if self.tokens is not None:
            return self.tokens // context
        return None

    def describe(self, context: int) -> str:
        if self.tokens is None and self.concurrency is None:
            return "KV capacity: not reported by the runtime"
        n = self.full_context_requests(context)
        tokens = f"{self.tokens:,} tokens" if self.tokens is not None else "size not reported"
        fits = f"fits {n} full-context ({context:,}-token) request{'s' if n != 1 else ''} at once" if n is not None else ""
        return f"KV cache: {tokens}; {fits}".rstrip("; ")

    def at_ready(self, context: int) -> KvAtReady:
        """What `up` records (service.json, tune's boot) for the recipe's context."""
        from hostctl.facts.records import KvAtReady

        return KvAtReady(tokens=self.tokens, max_concurrency=self.concurrency, per_request_tokens=self.per_request_tokens,
                         full_context_requests=self.full_context_requests(context), context=context)


class Tracker:
    """Feed it log lines as they arrive; it names the phases and keeps the watchdog's clock (a
    plain class: state a loop feeds, not data)."""

    def __init__(self, *, started: float) -> None:
        self.started = started
        self.last_progress = started
        self.last_phase: str | None = None
        self.lines = 0
        self.kv = KvCapacity()
        self._shapes: set[str] = set()
        self._counters: dict[str, int] = {}
        self._seen_phases: set[str] = set()

    def feed(self, line: str, now: float) -> str | None:
        """Returns a progress message when the line starts or advances a phase (one line may
        carry several: vLLM prints the KV cache size and the concurrency together)."""
        self.lines += 1
        line = loglines.bounded(line)  # the runtime's log is outside input: a line costs a constant
        messages = []
        matched = False
        for phase in PHASES:
            m = phase.pattern.search(line)
            if not m:
                continue
            matched = True
            groups = [g if g is not None else "" for g in m.groups()]
            self._record(phase, groups)
            if phase.counter:
                done = int(groups[0])
                if done > self._counters.get(phase.id, -1):
                    self._counters[phase.id] = done
                    messages.append(phase.label.format(*groups))
            elif phase.id not in self._seen_phases:
                messages.append(phase.label.format(*groups))
            self._seen_phases.add(phase.id)
        if messages:
            self.last_progress = now
            self.last_phase = messages[-1]
            return "; ".join(messages)
        if matched:
            return None
        s = shape(line)
        if s and s not in self._shapes:
            self._shapes.add(s)
            self.last_progress = now
        return None

    def _record(self, phase: Phase, groups: list[str]) -> None:
        if phase.id == "kv-cache":
            self.kv.tokens = _int(groups[0])
        elif phase.id == "concurrency":
            self.kv.per_request_tokens, self.kv.concurrency = _int(groups[0]), float(groups[1])

    def stalled_for(self, now: float) -> float:
        return now - self.last_progress
