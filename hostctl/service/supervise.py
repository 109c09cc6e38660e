"""`hostctl up --foreground`, what the systemd unit runs: the same preflight, start, watch and
smoke gate as `up`, then READY=1 to systemd (Type=notify) and supervision of the ready runtime
until it dies, hangs or is stopped (README "Supervision").

While supervising it watches the engine's events for this one container (`die`, `oom`), its
state (polled, in case the event stream hiccups), /health and the engine's counters (/metrics)
every HEALTH_EVERY_S, and sends a canary request while idle (hostctl.service.liveness). Watcher
(pure) turns that sequence into a verdict:

- a death: the cause is classified against the failure catalogue (hostctl.failures) on the
  container's log, the kernel log and its exit/OOM state, recorded (hostctl.service.restarts) and
  the command fails (exit 1) naming it, so the unit's Restart=on-failure starts it again through
  the whole gate; the unit's StartLimitBurst/StartLimitIntervalSec stop a crash loop;
- a hang: for hang_timeout_s (the recipe's) while the container lives (running or paused),
  either /health failing or no progress (requests in flight and the counters still, or idle and
  the canary not completing): the container is stopped, then it is handled as a death (cause
  `runtime-hang`, or `engine-frozen` when the API server answered while the engine did nothing);
- SIGTERM/SIGINT (`systemctl stop`, `hostctl down`): STOPPING=1, the project is taken down and
  the command exits 0, so systemd does not restart it.

WATCHDOG=1 is sent only after a /health that answered: a stuck supervisor (or a health thread
that stopped) is caught by the unit's WatchdogSec=, which is longer than hang_timeout_s so a
runtime hang is handled here first, with its diagnosis.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Protocol

import httpx

from pydantic import ConfigDict, Field

from hostctl.data import Data
from hostctl.config import Config
from hostctl.facts.kernel_log import uptime_s
from hostctl.facts.records import SupervisedEnding
from hostctl.failures import StartEvidence, Finding, classify
from hostctl.plan.records import Plan
from hostctl.service import apiclient, apipeer, liveness, restarts, sdnotify, saved, supervisor

Say = Callable[[str], None]
HEALTH_EVERY_S = 2.0
HEALTH_TIMEOUT_S = 2.0
STATE_EVERY_S = 5.0
POWER_EVERY_S = 30.0  # the GPU power limits (hostctl.provision.power_watch): a few NVML reads
POLL_S = 0.2
HANG_STOP_S = 5  # a hung runtime has nothing to finish gracefully
LOG_TAIL = 2000  # log lines read from the dead container for the diagnosis
ALIVE = ("running", "paused", "restarting", "created")


# ---------------------------------------------------------------- the pure part


class Observation(Data):
    model_config = ConfigDict(frozen=True, defer_build=False)

    kind: str  # "die" | "oom" | "health" | "counters" | "canary" | "state" | "stop"
    at: float  # monotonic seconds
    ok: bool | None = None  # health: /health answered 200
    counters: liveness.EngineCounters | None = None  # counters: None when /metrics could not be read
    outcome: str | None = None  # canary: "completed" | "refused" | "failed"
    detail: str = ""  # canary: what happened
    canary_id: int | None = None  # canary: which one (Watcher.canary_sent's id)
    exit_code: int | None = None  # die; state when not alive
    status: str | None = None  # state: the engine's status, None when the container is gone
    oom_killed: bool | None = None  # state
    signal: str | None = None  # stop


class Verdict(Data):
    model_config = ConfigDict(frozen=True)

    action: str  # "watch" | "died" | "hung" | "stopped"
    pet: bool = False  # send WATCHDOG=1: the runtime just answered
    exit_code: int | None = None
    oom: bool = False
    failing_s: float | None = None  # hung: how long /health has failed, or the engine made no progress
    evidence: str = "health"  # hung: "health" (/health failing) or "progress" (answering, but no work done)
    status: str | None = None
    signal: str | None = None
    counters: liveness.EngineCounters | None = None  # hung: the last counters read
    last_progress: str = ""  # hung on progress: what last showed the engine worked
    canary: str = ""  # hung on progress while idle: what became of the canary


class Watcher:
    """The supervisor's decision from a sequence of observations; no I/O, no clock of its own (a
    plain class: state the observations advance, not data)."""

    def __init__(self, *, hang_timeout_s: float, started_at: float) -> None:
        self.hang_timeout_s = hang_timeout_s
        self.started_at = started_at
        self.last_ok: float | None = None
        self.failing_since: float | None = None
        self.oom = False
        self.status: str | None = "running"
        self.done: Verdict | None = None
        self.progress = liveness.EngineProgress(hang_timeout_s=hang_timeout_s, started_at=started_at)

    def feed(self, obs: Observation) -> Verdict:
        if self.done is not None:
            return self.done
        v = self._decide(obs)
        if v.action != "watch":
            self.done = v
        return v

    def _decide(self, o: Observation) -> Verdict:
        if o.kind == "stop":
            return Verdict(action="stopped", signal=o.signal)
        if o.kind == "oom":
            self.oom = True  # the `die` follows
            return Verdict(action="watch")
        if o.kind == "die":
            return Verdict(action="died", exit_code=o.exit_code, oom=self.oom)
        if o.kind == "state":
            # a death only: a hang is judged on readings of the runtime, each at its own time, never
            # on this poll's clock (a supervisor that was not scheduled has read nothing meanwhile)
            self.status = o.status
            if o.status not in ALIVE:
                return Verdict(action="died", exit_code=o.exit_code, oom=self.oom or bool(o.oom_killed), status=o.status)
            return Verdict(action="watch")
        if o.kind == "health":
            if o.ok:
                # progress is judged on the counters read right after this answer, not on this one:
                # after an outage the last counters are as old as the outage
                self.last_ok, self.failing_since = o.at, None
                return Verdict(action="watch", pet=True)
            if self.failing_since is None:
                self.failing_since = o.at
            failing = o.at - self.failing_since
            if failing >= self.hang_timeout_s:
                return Verdict(action="hung", failing_s=failing, status=self.status, counters=self.progress.last)
            return Verdict(action="watch")
        if o.kind == "counters":
            self.progress.counters(o.at, o.counters)
            return self._progress_check()
        if o.kind == "canary":
            self.progress.canary(o.at, o.outcome or "failed", o.detail, o.canary_id)
            return self._progress_check()
        return Verdict(action="watch")

    def canary_due(self, now: float) -> bool:
        """A canary is due: no verdict yet, /health answering (an outage is judged on its own), and
        the engine's progress asks for one."""
        return self.done is None and self.failing_since is None and self.progress.canary_due(now)

    def canary_sent(self, now: float) -> int:
        return self.progress.canary_sent(now)

    def _progress_check(self) -> Verdict:
        if self.failing_since is not None:
            # /health failing: the runtime answers nothing at all (paused, wedged); judged on that alone
            return Verdict(action="watch")
        stalled = self.progress.stalled_s()
        if stalled is not None:
            p = self.progress
            canary = "" if p.canary_sent_at is None else (
                f"sent {p.read_at - p.canary_sent_at:.1f} s before, " + (p.canary_failure or "no answer yet"))
            return Verdict(action="hung", failing_s=stalled, evidence="progress", status=self.status,
                           counters=p.last, last_progress=p.evidence, canary=canary)
        return Verdict(action="watch")


def death_finding(verdict: Verdict, ev: StartEvidence, hang_timeout_s: float) -> tuple[Finding, list[Finding]]:
    """The cause: the catalogue's first match, else what is known (a death or a hang after ready)."""
    found = classify(ev)
    if found:
        return found[0], found[1:]
    if verdict.action == "hung" and verdict.evidence == "progress":
        c = verdict.counters
        return Finding(id="engine-frozen", title=f"the engine did no work for {verdict.failing_s:.0f} s while its API "
                       "server answered /health",
                       cause="requests were in flight and the engine's counters did not move, or the server was idle "
                       f"and a one-token canary request did not complete (hang_timeout_s {hang_timeout_s:g} s): the "
                       "engine core is frozen or wedged (a hung collective, a stuck grammar, a stopped process) "
                       "while the API server still answers",
                       fix="the container was stopped and the service restarts through the gate; if it recurs, read "
                       "`hostctl logs` around the time and the GPU's state (`hostctl doctor`)",
                       lines=[f"engine: status {verdict.status}",
                              f"counters: {c.brief() if c else 'not readable (/metrics)'}",
                              f"last progress: {verdict.last_progress}, {verdict.failing_s:.1f} s before"]
                       + ([f"canary: {verdict.canary}"] if verdict.canary else [])), []
    if verdict.action == "hung":
        return Finding(id="runtime-hang", title=f"/health failed for {verdict.failing_s:.0f} s while the container was "
                       f"{verdict.status or 'alive'}",
                       cause=f"the runtime stopped answering after it was ready (hang_timeout_s {hang_timeout_s:g} s) but "
                       "its container did not exit: a deadlock, a hung collective, a frozen (paused) container",
                       fix="the container was stopped and the service restarts through the gate; if it recurs, read "
                       "`hostctl logs` and the GPU's state (`hostctl doctor`)",
                       lines=[f"engine: status {verdict.status}", f"health: failing for {verdict.failing_s:.1f} s"]), []
    return Finding(id="runtime-died", title=f"the runtime exited with code {verdict.exit_code} after it was ready",
                   cause="the server process ended while serving and no known failure signature matched (an external "
                   "`docker kill`/`docker stop`, a crash the log below names)",
                   fix="read the log lines below and `hostctl logs`; the service restarts through the gate",
                   lines=[f"engine: die, exit code {verdict.exit_code}, OOMKilled={verdict.oom}"]), []


# ---------------------------------------------------------------- the loop


class Stop:
    """SIGTERM/SIGINT while supervising: a flag the loop reads (installed before `up` so a signal
    between the gate and the loop is not lost; `up` puts its own handlers on top while it runs)."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self.event = threading.Event()

    def _handler(self, signum, frame) -> None:
        self.signum = signum
        self.event.set()

    def install(self) -> None:
        for s in (signal.SIGTERM, signal.SIGINT):
            signal.signal(s, self._handler)


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="milliseconds")


def _health_thread(endpoint: str, out: Callable[[Observation], None], stop: threading.Event) -> threading.Thread:
    """/health, then the engine's counters (/metrics), every HEALTH_EVERY_S."""
    def run() -> None:
        # apiclient: a port another user holds is not the runtime's health (ListenerRefused, exit 3
        # elsewhere), so here it counts as unhealthy; the answer is read up to a cap.
        with apiclient.client(timeout=HEALTH_TIMEOUT_S) as c:
            while not stop.is_set():
                # each reading is stamped when it was asked (hostctl.service.liveness.EngineProgress)
                t = time.monotonic()
                try:
                    ok = apiclient.request(c, "GET", f"{endpoint}/health", cap=apiclient.SMALL_CAP,
                                           what="/health").status_code == 200
                except (httpx.HTTPError, apiclient.BadAnswer, apipeer.ListenerRefused):
                    ok = False
                out(Observation(kind="health", at=t, ok=ok))
                if ok:
                    asked = time.monotonic()
                    out(Observation(kind="counters", at=asked, counters=liveness.read_counters(c, endpoint)))
                stop.wait(max(0.0, HEALTH_EVERY_S - (time.monotonic() - t)))

    th = threading.Thread(target=run, name="hostctl-health", daemon=True)
    th.start()
    return th


def _canary_thread(canary_id: int, endpoint: str, served_name: str, api_key_env: str | None, timeout_s: float,
                   out: Callable[[Observation], None]) -> None:
    def run() -> None:
        outcome, detail = liveness.send_canary(endpoint, served_name, api_key_env, timeout_s)
        out(Observation(kind="canary", at=time.monotonic(), outcome=outcome, detail=detail, canary_id=canary_id))

    threading.Thread(target=run, name="hostctl-canary", daemon=True).start()


def _power_thread(power: PowerCheck, say: Say) -> threading.Thread:
    """The power check, beside the loop: a put-back reads the host and runs the executor (seconds),
    and NVML may block during a driver reset; the loop goes on judging the runtime meanwhile."""
    def run() -> None:
        try:
            power.check()
        except Exception as exc:  # noqa: BLE001  (a failing side check must not end a serving runtime)
            say(f"the power limit check failed: {type(exc).__name__}: {exc}")

    th = threading.Thread(target=run, name="hostctl-power", daemon=True)
    th.start()
    return th


class Ended(Data):
    verdict: Verdict
    cause: Finding | None = None
    also: list[Finding] = Field(default_factory=list)
    log_tail: list[str] = Field(default_factory=list)


class PowerCheck(Protocol):
    """What supervise() asks of the power check its caller hands it (hostctl.provision.power_watch)."""

    active: bool

    def check(self) -> list[str]: ...


def supervise(config: Config, plan: Plan, stop: Stop, say: Say, notify=sdnotify.notify,
              power: PowerCheck | None = None) -> Ended:
    """Watch the ready runtime until a verdict; take it down on stop, stop it on a hang. `power`:
    the GPU power limits' check, every POWER_EVERY_S (None, or not active: the plan sets none)."""
    import queue

    from hostctl.service import lifecycle, preflight
    from hostctl.facts.container import Feed, container_state, log_tail
    from hostctl.service.runtime_part import take_down

    name = lifecycle.container_name(plan)
    hang_s = float(config.recipe.hang_timeout_s)
    t0 = time.monotonic()
    uptime0 = uptime_s()
    st = container_state(name)
    watcher = Watcher(hang_timeout_s=hang_s, started_at=t0)
    # From just before supervision began (the watch saw what came before), and never before this
    # run's start: compose restarts an ended container in place (same id), so the death that led to
    # this restart is an earlier event of the same container.
    since = time.time() - 1
    feed = Feed(name, max(since, st.started_at.timestamp()) if st.started_at else since, st.id)
    obs: queue.Queue[Observation] = queue.Queue()
    quit_health = threading.Event()
    feed.start_events()
    endpoint = preflight.endpoint(plan)
    _health_thread(endpoint, obs.put, quit_health)
    verdict = watcher.feed(Observation(kind="state", at=t0, status=st.status if st.exists else None,
                                       exit_code=st.exit_code, oom_killed=st.oom_killed))
    next_state = t0 + STATE_EVERY_S
    next_power = t0 + POWER_EVERY_S if power is not None and power.active else None
    power_thread: threading.Thread | None = None
    wd = sdnotify.watchdog_interval_s()
    say(f"supervising {name}: engine events, /health and the engine's counters every {HEALTH_EVERY_S:g} s, "
        f"a canary request when idle, a hang after {hang_s:g} s without an answer or progress"
        + (f"; systemd watchdog {wd:g} s, fed while /health answers" if wd else "")
        + (f"; the GPU power limits every {POWER_EVERY_S:g} s" if next_power is not None else ""))
    notify(f"STATUS=supervising {name}")
    try:
        while verdict.action == "watch":
            for it in feed.drain(wait=POLL_S):
                if it.kind == "event" and it.text in ("die", "oom"):
                    code = (it.attrs or {}).get("exitCode")
                    verdict = watcher.feed(Observation(kind=it.text, at=it.at, exit_code=int(code) if code is not None else None))
            while verdict.action == "watch":
                try:
                    o = obs.get_nowait()
                except queue.Empty:
                    break
                verdict = watcher.feed(o)
                if verdict.pet:
                    notify("WATCHDOG=1")
                if o.kind == "canary" and o.outcome == "refused":
                    say(f"canary refused ({o.detail}): judging the engine by its counters only")
                # decided on the counters just read, never between a /health answer and its counters:
                # a loaded server can answer /metrics slowly, and its last reading may look idle
                if o.kind == "counters" and verdict.action == "watch" and watcher.canary_due(o.at):
                    _canary_thread(watcher.canary_sent(time.monotonic()), endpoint, config.recipe.served_name,
                                   plan.runtime.api_key_env, hang_s, obs.put)
            if stop.event.is_set() and verdict.action == "watch":
                verdict = watcher.feed(Observation(kind="stop", at=time.monotonic(),
                                                   signal=signal.Signals(stop.signum).name if stop.signum else None))
            now = time.monotonic()
            if verdict.action == "watch" and next_power is not None and now >= next_power:
                next_power = now + POWER_EVERY_S
                if power_thread is None or not power_thread.is_alive():
                    power_thread = _power_thread(power, say)  # type: ignore[arg-type]  (set only with a check)
            if verdict.action == "watch" and now >= next_state:
                next_state = now + STATE_EVERY_S
                s = container_state(name)
                verdict = watcher.feed(Observation(kind="state", at=now, status=s.status if s.exists else None,
                                                   exit_code=s.exit_code, oom_killed=s.oom_killed))
    finally:
        quit_health.set()
        feed.close()

    target = lifecycle.project_dir(config)
    if verdict.action == "stopped":
        notify("STOPPING=1")
        say(f"{verdict.signal or 'stop'}: taking the project down (no restart)")
        problem = take_down(target, plan.runtime.project, name, command="hostctl up --foreground",
                            schema=lifecycle.SCHEMA, say=say, new_session=True)
        say(f"took the project down ({problem or 'ok'})")
        return Ended(verdict=verdict)

    log = log_tail(name, LOG_TAIL)  # before a hang's stop removes the container (a paused one still has its log)
    s = container_state(name)
    if verdict.action == "hung":
        say((f"/health has failed for {verdict.failing_s:.0f} s" if verdict.evidence == "health" else
             f"the engine has done no work for {verdict.failing_s:.0f} s ({verdict.counters.brief() if verdict.counters else 'no counters'}; "
             f"last progress: {verdict.last_progress})") + f" while {name} is {verdict.status}: stopping it")
        problem = take_down(target, plan.runtime.project, name, command="hostctl up --foreground",
                            schema=lifecycle.SCHEMA, say=say, stop_timeout_s=HANG_STOP_S, new_session=True)
        say(f"stopped {name} ({problem or 'ok'})")
    else:
        say(f"{name} died (exit code {verdict.exit_code}{', OOM' if verdict.oom else ''})")
    ev = StartEvidence(log="\n".join(log), kernel_log=lifecycle._kernel_events_since(uptime0),
                  oom_killed=verdict.oom or bool(s.oom_killed),
                  exit_code=verdict.exit_code if verdict.exit_code is not None else s.exit_code)
    cause, also = death_finding(verdict, ev, hang_s)
    return Ended(verdict=verdict, cause=cause, also=also, log_tail=log[-lifecycle.LOG_SHOWN:])


def foreground(config: Config, plan: Plan, facts, *, timeout: int | None, keep_on_failure: bool, say: Say,
               hostctl_bin: str, print_endpoint: Callable[[str], None], notify=sdnotify.notify,
               power: PowerCheck | None = None) -> int:
    """`up --foreground`: the gate, READY=1, supervision. Returns 0 after a stop; raises FailedError
    (exit 1) for a failed gate or an ending that should be restarted."""
    from hostctl.service import lifecycle

    stop, began = starting(say, notify)
    outcome = lifecycle.up(config, plan, facts, timeout=timeout, keep_on_failure=keep_on_failure, say=say,
                           hostctl_bin=hostctl_bin)
    if not outcome.ready:
        raise lifecycle.failure_error(outcome)
    t = outcome.timings
    say(f"ready in {t.get('total_s', 0):.1f} s (smoke {t.get('smoke_s', 0):.1f} s)")
    return supervise_ready(config, plan, outcome.endpoint, stop, began, say, print_endpoint, notify=notify, power=power)


def starting(say: Say, notify=sdnotify.notify) -> tuple[Stop, SupervisedEnding | None]:
    """Before the gate of a supervised `up`: SIGTERM/SIGINT handling, and the restart (if this
    start follows a recorded end)."""
    stop = Stop()
    stop.install()
    began = restarts.mark_restart()
    if began:
        say(f"restart after {began.cause} (ended {began.ended_at})")
    notify("STATUS=starting: preflight, load and the smoke gate")
    return stop, began


def supervise_ready(config: Config, plan: Plan, endpoint: str, stop: Stop, began: SupervisedEnding | None, say: Say,
                    print_endpoint: Callable[[str], None], notify=sdnotify.notify,
                    power: PowerCheck | None = None) -> int:
    """After the gate passed (one host's `up`, or a cluster replica's `up` and its join): READY=1,
    then supervision until a stop (0) or a death or hang (FailedError naming the cause)."""
    from hostctl.service import lifecycle

    if began:
        restarts.mark_ready()
    print_endpoint(endpoint)
    notify("READY=1\nSTATUS=ready: " + endpoint)
    supervisor.save(lifecycle.container_name(plan), _now_iso())
    try:
        ended = supervise(config, plan, stop, say, notify=notify, power=power)
    finally:
        supervisor.clear()
    last = saved.load_service() or lifecycle._last_up(config, plan, "ready")
    if ended.verdict.action == "stopped":
        saved.save_service(last.model_copy(update={"state": "down", "down_at": lifecycle._now_iso(),
                                                   "signal": ended.verdict.signal}))
        return 0
    c = ended.cause
    assert c is not None
    ended_at = _now_iso()
    restarts.record_end(SupervisedEnding(ended_at=ended_at, kind=ended.verdict.action, cause=c.id, title=c.title,
                                         exit_code=ended.verdict.exit_code, lines=c.lines[:10]))
    saved.save_service(last.model_copy(update={"state": "failed", "failed_at": ended_at, "cause": c.id,
                                               "after_ready": True}))
    notify(f"STATUS=ended: {c.id}")
    out = lifecycle.StartOutcome(ready=False, endpoint=endpoint, cause=c, also=ended.also, log_tail=ended.log_tail)
    err = lifecycle.failure_error(out)
    err.message = f"the runtime {'hung' if ended.verdict.action == 'hung' else 'died'} after it was ready [{c.id}]: {c.title}"
    raise err
