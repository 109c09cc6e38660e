"""Is the engine making progress, not just answering (README "Supervision"): the runtime's own
counters from vLLM's /metrics, and a canary request when nothing else moves them.

Why /health is not enough: vLLM's API server answers /health and /v1/models from its own process;
an engine core that is frozen (a wedged collective, a stuck grammar, a core process stopped)
leaves both answering 200 in a millisecond while every completion hangs. What only a working
engine does is advance its counters: tokens generated and prompt tokens computed, requests
finished, and engine steps (`vllm:iteration_tokens_total`, one observation per step). Any of
them moving is progress.

When requests are in flight (running or waiting), the counters must move; hostctl sends nothing
then, so a busy server is never disturbed. When nothing is in flight the counters stay still by
design, so hostctl asks the engine itself: one canary completion of one token (max_tokens=1, the
prompt ".", temperature 0) on the loopback, with the API key, once the last evidence is half
hang_timeout_s old; a canary not answered within hang_timeout_s is a hang.

A canary the server refuses (a key hostctl lacks, a name it does not serve: REFUSED) is not
evidence of a hang: the canary is given up, the reason said, and only the counters are judged.
"""

from __future__ import annotations

from pydantic import ConfigDict

from hostctl.data import Data
from hostctl.service import runtime_metrics
from hostctl.service.runtime_metrics import RuntimeSample

CANARY_BODY = {"prompt": ".", "max_tokens": 1, "temperature": 0}
CANARY_ID = "hostctl-canary"  # the X-Request-Id it carries: the runtime's log names it
# What the server says to a canary it will never accept: a key hostctl lacks (401, 403), a name it
# does not serve (404), a body it rejects (400, 422). A 408 or 429 is the engine busy, not a no.
REFUSED = frozenset({400, 401, 403, 404, 422})


class EngineCounters(Data):
    model_config = ConfigDict(frozen=True)

    running: float = 0.0
    waiting: float = 0.0
    work: float = 0.0  # tokens generated and computed, requests finished, engine steps: it only grows while the engine works

    @property
    def in_flight(self) -> bool:
        return self.running + self.waiting > 0

    def brief(self) -> str:
        return f"running {self.running:g}, waiting {self.waiting:g}, work counter {self.work:g}"


def counters_of(sample: RuntimeSample | None) -> EngineCounters | None:
    """The progress view of a /metrics sample: any of tokens generated or computed, requests
    finished and engine steps growing is work done."""
    if sample is None:
        return None
    work = (sample.generation_tokens, sample.prompt_tokens, sample.requests_finished, sample.engine_steps)
    return EngineCounters(running=sample.running or 0.0, waiting=sample.waiting or 0.0,
                          work=sum(v for v in work if v is not None))


def parse_metrics(text: str) -> EngineCounters | None:
    """The engine's counters from a Prometheus exposition, or None when it holds none of vLLM's."""
    return counters_of(runtime_metrics.parse(text))


class EngineProgress:
    """When the engine last showed it works, from counter readings and canary results (pure: the
    caller's clock; a plain class, state the readings advance).

    Stalled means: requests in flight and the counters still for hang_timeout_s, or idle and a
    canary out for hang_timeout_s without completing. A canary is sent once the last evidence is
    half the bound old, so a freeze is judged between hang_timeout_s and 1.5x it after it began.

    The span is judged at the last reading (counters read, a canary's outcome), never at the
    caller's clock: time that passed with no reading is no evidence either way. A /metrics that
    does not answer on a loaded server, or a judge that was not scheduled (CI measured a process
    beside the 2-CPU demo engine under load getting no CPU for 5-20 s), said nothing about the
    engine; the next reading does. A reading counts from when it was asked: its answer is newer."""

    def __init__(self, *, hang_timeout_s: float, started_at: float) -> None:
        self.hang_timeout_s = hang_timeout_s
        self.last_progress = started_at  # supervision starts right after the smoke gate passed
        self.read_at = started_at  # the last reading of the engine: when it was asked
        self.last: EngineCounters | None = None  # the last reading that could be read
        self.canary_id = 0  # the canary out (or the last one sent)
        self.canary_sent_at: float | None = None  # a canary is out since then
        self.canary_given_up: str | None = None
        self.canary_failure = ""  # how the canary out failed
        self.evidence = "the smoke gate"

    def counters(self, now: float, c: EngineCounters | None) -> None:
        """A reading of /metrics asked at `now`; None when it could not be read: no reading, so the
        last one is kept and the judged span does not grow (a slow /metrics on a loaded server is
        not an idle engine)."""
        if c is None:
            return
        self.read_at = max(self.read_at, now)
        if self.last is not None and c.work > self.last.work:
            self.last_progress, self.evidence = now, "the engine's counters moved"
            self.canary_sent_at, self.canary_failure = None, ""  # progress answers for an unanswered canary
        self.last = c

    def canary_sent(self, now: float) -> int:
        """A canary goes out: its id, which its outcome carries back."""
        self.canary_id += 1
        self.canary_sent_at, self.canary_failure = now, ""
        return self.canary_id

    def canary(self, now: float, outcome: str, detail: str = "", canary_id: int | None = None) -> None:
        """outcome: "completed", "refused" (the server said no: a 4xx that retrying cannot change) or
        "failed" (no answer in time, a 5xx). A failed canary stays out: the clock runs from when it
        was sent, and no other is sent. A completion is progress whichever canary it was; a late
        failure or refusal of an earlier one changes nothing."""
        self.read_at = max(self.read_at, now)
        if outcome == "completed":
            self.last_progress, self.evidence = now, "a canary request completed"
            if canary_id is None or canary_id == self.canary_id:
                self.canary_sent_at, self.canary_failure = None, ""
            return
        if canary_id is not None and canary_id != self.canary_id:
            return
        if outcome == "failed":
            self.canary_failure = detail
            return
        self.canary_sent_at = None
        self.canary_given_up = detail or "the server refused the canary"

    def busy(self) -> bool:
        return self.last is not None and self.last.in_flight

    def canary_due(self, now: float) -> bool:
        """Idle (nothing in flight, or no counters to tell), no canary out, and no evidence for half the bound."""
        return (self.canary_sent_at is None and self.canary_given_up is None and not self.busy()
                and now - self.last_progress >= self.hang_timeout_s / 2)

    def stalled_s(self) -> float | None:
        """Seconds from the last progress to the last reading once the engine counts as stalled, else None."""
        at = self.read_at
        if self.busy():
            stalled = at - self.last_progress >= self.hang_timeout_s
        else:
            stalled = self.canary_sent_at is not None and at - self.canary_sent_at >= self.hang_timeout_s
        return at - self.last_progress if stalled else None


# ---------------------------------------------------------------- asking the runtime


def read_counters(client, endpoint: str) -> EngineCounters | None:
    """GET {endpoint}/metrics through the supervisor's checked client; None when it cannot be read."""
    return counters_of(runtime_metrics.read(client, endpoint))


def send_canary(endpoint: str, served_name: str, api_key_env: str | None, timeout_s: float) -> tuple[str, str]:
    """One canary completion: ("completed" | "refused" | "failed", what happened)."""
    import time

    import httpx

    from hostctl.service import apiclient, apipeer

    headers = {"X-Request-Id": CANARY_ID, **apiclient.key_headers(api_key_env)}
    t = time.monotonic()
    try:
        with apiclient.client(timeout=timeout_s, headers=headers) as c:
            answer = apiclient.request(c, "POST", endpoint.rstrip("/") + "/v1/completions",
                                       cap=apiclient.completion_cap(1), what="canary completion",
                                       json={"model": served_name, **CANARY_BODY})
    except apipeer.ListenerRefused as exc:
        return "refused", exc.message
    except (httpx.HTTPError, apiclient.BadAnswer) as exc:
        return "failed", f"no answer in {time.monotonic() - t:.1f} s ({type(exc).__name__})"
    took = f"{(time.monotonic() - t) * 1000:.0f} ms"
    if answer.status_code == 200:
        return "completed", took
    if answer.status_code in REFUSED:
        return "refused", f"HTTP {answer.status_code} in {took}: {answer.text[:200]}"
    return "failed", f"HTTP {answer.status_code} in {took}"


# How long `hostctl status` (no supervisor needed) looks: the counters of a busy server for up to
# WATCH_S (it stops at the first move: most steps take well under a second; 8 s is the longest
# step the field reports imply, README "Supervision"), or one canary of an idle one for up to
# CANARY_S; each at most half hang_timeout_s.
STATUS_WATCH_S = 8.0
STATUS_CANARY_S = 5.0
STATUS_POLL_S = 0.25


class ProgressCheck(Data):
    """What `status` found when it asked the engine once."""

    working: bool | None  # None: it could not be judged (why says it)
    evidence: str
    why: str = ""
    seconds: float = 0.0  # how long the check took
    counters: EngineCounters | None = None


def check_once(endpoint: str, served_name: str, api_key_env: str | None, hang_timeout_s: float) -> ProgressCheck:
    """Does the engine work right now: while requests are in flight, do its counters move within
    STATUS_WATCH_S; while idle, does one canary complete within STATUS_CANARY_S."""
    import time

    from hostctl.service import apiclient

    t0 = time.monotonic()
    watch_s = min(STATUS_WATCH_S, hang_timeout_s / 2)
    with apiclient.client(timeout=watch_s) as c:
        first = read_counters(c, endpoint)
        if first is not None and first.in_flight:
            still: EngineCounters | None = None  # the last reading that showed no move
            while time.monotonic() - t0 < watch_s:
                time.sleep(STATUS_POLL_S)
                now = read_counters(c, endpoint)
                if now is not None and now.work > first.work:
                    return ProgressCheck(working=True, evidence="the engine's counters moved", counters=now,
                                         seconds=round(time.monotonic() - t0, 3))
                still = now or still
            if still is None:  # no reading after the first: nothing is known about the span
                return ProgressCheck(working=None, evidence="the engine's counters",
                                     why=f"requests in flight and /metrics not read again in {watch_s:g} s",
                                     counters=first, seconds=round(time.monotonic() - t0, 3))
            return ProgressCheck(working=False, evidence="the engine's counters",
                                 why=f"requests in flight and the engine's counters did not move in {watch_s:g} s",
                                 counters=still, seconds=round(time.monotonic() - t0, 3))
    outcome, detail = send_canary(endpoint, served_name, api_key_env, min(STATUS_CANARY_S, hang_timeout_s / 2))
    seconds = round(time.monotonic() - t0, 3)
    if outcome == "completed":
        return ProgressCheck(working=True, evidence=f"a canary request completed ({detail})", counters=first,
                             seconds=seconds)
    if outcome == "refused":
        return ProgressCheck(working=None, evidence="a canary request", why=f"the canary was refused: {detail}",
                             counters=first, seconds=seconds)
    return ProgressCheck(working=False, evidence="a canary request", why=f"the canary did not complete: {detail}",
                         counters=first, seconds=seconds)
