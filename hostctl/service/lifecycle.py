"""The runtime's lifecycle: `up` (preflight -> render -> compose up -> watch -> smoke gate),
`down`, `logs` and `smoke` (`status` reads: hostctl.service.status).

`up` declares the service ready only when /health answers, /v1/models lists the served name
with max_model_len equal to the recipe's context, and every smoke test returns the right
answer. Until then it watches three things at once: the engine's events for the container
(an `oom` event, a `die` with its exit code), the log (named phases shown as progress; the
no-progress watchdog), and the clock (the load timeout). Any failure is classified against
the failure catalogue (hostctl.failures), printed with its cause, fix and log lines, and
the project is taken down (unless --keep-on-failure), so nothing is left half-running.
"""

from __future__ import annotations

import re
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime, timezone
from typing import TYPE_CHECKING
from pathlib import Path

import httpx

from pydantic import Field

from hostctl.data import Data
from hostctl import loglines, paths
from hostctl.config import Config
from hostctl.failures import StartEvidence, Finding, classify
from hostctl.errors import FailedError
from hostctl.facts.kernel_log import uptime_s
from hostctl.facts.records import KvAtReady, LastUp
from hostctl.plan.records import Plan

if TYPE_CHECKING:
    from hostctl.act.report import Report
from hostctl.service import apiclient, apipeer, identity, preflight, saved
from hostctl.service.runtime_part import RuntimePart, take_down
from hostctl.act.inline import run_inline
from hostctl.facts.container import Feed, container_state
from hostctl.act.lock import HostLock
from hostctl.service.progress import Tracker
from hostctl.service.smoke import check_models, run_suite
from hostctl.service.smoke_report import SmokeReport

Say = Callable[[str], None]
LOG_KEEP = 5000  # log lines kept for the diagnosis
LOG_SHOWN = 15  # last log lines printed on failure
POLL_S = 0.25
HEALTH_EVERY_S = 1.0
STATE_EVERY_S = 2.0
FAILED_STOP_S = 5
SCHEMA = "hostctl.up/v1"


def _kernel_events_since(uptime_at_start: float | None) -> str:
    """The kernel's OOM-kill and Xid lines logged since this `up` began: a host OOM that killed a
    rank is what sits behind a TCPStore broken pipe (report 001, docs/field-reports.md); older ones are not ours."""
    from hostctl.facts.kernel_log import probe_kernel_log

    kernel = probe_kernel_log()
    if not kernel.available:
        return ""
    return "\n".join(e.line for e in kernel.events
                     if uptime_at_start is None or e.time_s is None or e.time_s >= uptime_at_start)


def _now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def project_dir(config: Config) -> Path:
    return paths.system_path(config.profile.runtime.project_dir)


def container_name(plan: Plan) -> str:
    return identity.container_name(plan.runtime.project, plan.runtime.service)


def watchdog_s(config: Config) -> int:
    r = config.recipe
    if r.watchdog_s is not None:
        return r.watchdog_s
    # A converting start is watched per converted layer; otherwise ten silent minutes is stuck.
    return min(r.load_timeout_s, 600)


class StartOutcome(Data):
    ready: bool
    endpoint: str
    cause: Finding | None = None
    also: list[Finding] = Field(default_factory=list)
    smoke: SmokeReport | None = None
    kv: KvAtReady | None = None
    log_tail: list[str] = Field(default_factory=list)
    died_ns: int | None = None  # the engine's timestamp of the container's death
    timings: dict[str, float] = Field(default_factory=dict)


def _finding(id_: str, title: str, cause: str, fix: str, lines: list[str] | None = None) -> Finding:
    return Finding(id=id_, title=title, cause=cause, fix=fix, lines=lines or [])


# ---------------------------------------------------------------- up


def up(config: Config, plan: Plan, facts, *, timeout: int | None, keep_on_failure: bool, say: Say,
       hostctl_bin: str = "/usr/local/bin/hostctl") -> StartOutcome:
    from hostctl.interrupt import Interrupted, Interruptible

    with HostLock("up"), Interruptible() as guard:
        started: list[bool] = [False]  # set just before `docker compose up`: from then on there is something to stop
        try:
            return _up(config, plan, facts, timeout=timeout, keep_on_failure=keep_on_failure, say=say,
                       hostctl_bin=hostctl_bin, started=started)
        except Interrupted as exc:
            if started[0]:
                interrupted(config, plan, exc, guard, keep_on_failure=keep_on_failure, say=say)
            else:
                say(f"interrupted by {exc.name} before anything was started: nothing to take down")
            raise


def interrupted(config: Config, plan: Plan, exc, guard, *, keep_on_failure: bool, say: Say) -> None:
    """After SIGINT/SIGTERM during `up`: record the state as interrupted, then take the project
    down (gracefully, FAILED_STOP_S; at a second signal at once) unless --keep-on-failure."""
    from hostctl.interrupt import Hurry

    name, target = container_name(plan), project_dir(config)
    last = _last_up(config, plan, "interrupted", interrupted_at=_now_iso(), signal=exc.name, kept=keep_on_failure)
    with guard.cleaning_up():
        try:
            saved.save_service(last)
        except OSError as err:
            say(f"warning: could not record the interruption: {err}")
        if keep_on_failure:
            say(f"interrupted by {exc.name}; --keep-on-failure: {name} left as it is (remove it with `hostctl down`)")
            return
        say(f"interrupted by {exc.name}: taking the project down (press Ctrl-C again to skip the wait)")
        try:
            problem = _take_down(target, plan, name, say, new_session=True)
        except Hurry:
            say("second signal: removing the container without waiting for it to stop")
            problem = _take_down(target, plan, name, say, stop_timeout_s=0, new_session=True)
        try:
            saved.save_service(last.model_copy(update={"taken_down": problem is None}))
        except OSError:
            pass
        _say_taken_down(problem, name, say)


def _last_up(config: Config, plan: Plan, state: str, **more) -> LastUp:
    return LastUp(state=state, profile=config.profile.name, recipe=config.recipe.id, endpoint=preflight.endpoint(plan),
                  container=container_name(plan), project=plan.runtime.project,
                  project_dir=str(project_dir(config)), **more)


def _take_down(target: Path, plan: Plan, name: str, say: Say, *, stop_timeout_s: int = FAILED_STOP_S,
               new_session: bool = False) -> str | None:
    """After a failed or interrupted start: nothing to finish gracefully, and a stuck runtime may
    ignore SIGTERM, so FAILED_STOP_S; None when nothing is left, else why."""
    return take_down(target, plan.runtime.project, name, command="hostctl up", schema=SCHEMA, say=say,
                     stop_timeout_s=stop_timeout_s, new_session=new_session)


def _say_taken_down(problem: str | None, name: str, say: Say) -> None:
    say(f"took the project down ({problem or 'ok'})"
        + (f"; remove what is left with `docker rm -f {name}`" if problem else ": nothing left running"))


def _up(config: Config, plan: Plan, facts, *, timeout: int | None, keep_on_failure: bool, say: Say,
        hostctl_bin: str, started: list[bool]) -> StartOutcome:
    from hostctl.service.project_part import render_project
    from hostctl.service.render import compose_checked, render_files

    t_start = time.monotonic()
    name = container_name(plan)
    ep = preflight.endpoint(plan)
    failures = preflight.check_engine(facts)
    if not failures:
        failures += preflight.check_plan(plan)
        image_checks = preflight.check_image(plan.runtime.image)
        for f in image_checks:
            if f.id.endswith("-warning"):
                say(f"warning: {f.message} ({f.fix})")
            else:
                failures.append(f)
        failures += preflight.check_dirs(config, plan)
        failures += preflight.check_model(config, say)
        own = container_state(name)
        if not own.running:
            failures += preflight.check_port(plan)
        if not failures:
            failures += preflight.check_gpus_in_image(plan)
    if failures:
        first = failures[0]
        details = first.details + [f"also: {f.message} (fix: {f.fix})" for f in failures[1:]]
        raise FailedError(f"preflight: {first.message}", details=details + ["nothing was started"], fix=first.fix)
    for p in plan.problems:
        if p.severity == "warn":
            say(f"warning: [{p.area}] {p.message}" + (f" (fix: {p.fix})" if p.fix else ""))
    say(f"preflight ok: {plan.runtime.image}, API {ep}, {len(plan.runtime.volumes)} bind mount(s) checked")

    target = project_dir(config)
    try:
        render_project(render_files(plan, hostctl_bin=hostctl_bin, config_path=str(Path(config.source).resolve())),
                       target, check=compose_checked, say=say, command="hostctl up", schema=SCHEMA)
    except FailedError as exc:
        exc.details.append("nothing was started")
        raise

    since = time.time()  # this run's events and log lines only (facts.container.Feed)
    started[0] = True
    run_inline([RuntimePart("start", project_dir=target, project=plan.runtime.project, container=name,
                            new_session=True)], command="hostctl up", schema=SCHEMA, say=say)
    t_compose = time.monotonic()
    say(f"started {name} ({t_compose - t_start:.1f} s); waiting for it to load "
        f"(timeout {timeout or config.recipe.load_timeout_s} s, watchdog {watchdog_s(config)} s without progress)")
    try:
        outcome = _watch(config, plan, name, since, timeout or config.recipe.load_timeout_s, say)
    except apipeer.ListenerRefused:
        # Another program holds the API port (nothing was sent to it): the start failed, and the
        # container, which cannot bind that port, is taken down as after any failed start.
        saved.save_service(_last_up(config, plan, "failed", failed_at=_now_iso(), cause="api-port-not-runtime",
                                    kept=keep_on_failure))
        if not keep_on_failure:
            _say_taken_down(_take_down(target, plan, name, say), name, say)
        raise
    outcome.timings["preflight_render_s"] = t_compose - t_start
    outcome.timings["total_s"] = time.monotonic() - t_start

    if outcome.ready:
        _record_cache_use(config, plan, outcome.log_tail, say)
        saved.save_service(_last_up(config, plan, "ready", ready_at=_now_iso(), kv=outcome.kv,
                                    timings=outcome.timings))
        return outcome

    saved.save_service(_last_up(config, plan, "failed", failed_at=_now_iso(),
                                cause=outcome.cause.id if outcome.cause else None, kept=keep_on_failure))
    if keep_on_failure:
        say(f"--keep-on-failure: {name} left as it is (inspect with `hostctl logs`, remove with `hostctl down`)")
    else:
        _say_taken_down(_take_down(target, plan, name, say), name, say)
    return outcome


def preview(config: Config, plan: Plan, *, say: Say, hostctl_bin: str = "/usr/local/bin/hostctl") -> Report:
    """`up --dry-run`: the project's files and the compose up as the executor would run them
    (diffs, commands), decided once; nothing is written or started, no preflight is run."""
    from hostctl.service.project_part import ProjectPart
    from hostctl.service.render import compose_checked, render_files

    failures = preflight.check_plan(plan)
    if failures:
        raise FailedError(f"preflight: {failures[0].message}", details=failures[0].details + ["nothing was rendered"],
                          fix=failures[0].fix)
    files = render_files(plan, hostctl_bin=hostctl_bin, config_path=str(Path(config.source).resolve()))
    target = project_dir(config)
    return run_inline([ProjectPart(files, target, check=compose_checked),
                       RuntimePart("start", project_dir=target, project=plan.runtime.project,
                                   container=container_name(plan))],
                      command="hostctl up", schema=SCHEMA, say=say, dry_run=True, profile=config.profile.name)


def _record_cache_use(config: Config, plan: Plan, log: list[str], say: Say) -> None:
    """Remember which cache generations this ready service uses; never fails the start."""
    try:
        from hostctl.cache.act import record_ready

        record_ready(config, plan, log)
    except Exception as exc:  # a bookkeeping failure must not turn a ready service into a failed start
        say(f"warning: cache use not recorded: {exc.__class__.__name__}: {exc}")


def _watch(config: Config, plan: Plan, name: str, since: float, timeout: int, say: Say) -> StartOutcome:
    recipe = config.recipe
    ep = preflight.endpoint(plan)
    t0 = time.monotonic()
    uptime_at_start = uptime_s()
    deadline = t0 + timeout
    limit = watchdog_s(config)
    tracker = Tracker(started=t0)
    log: deque[str] = deque(maxlen=LOG_KEEP)
    st = container_state(name)
    if st.running and st.started_at is not None and st.started_at.timestamp() < since:
        since = st.started_at.timestamp()  # compose left it running (nothing changed): its run is this one
    feed = Feed(name, since, st.id)
    oom = False
    died: tuple[int | None, int | None] | None = None  # (exit code, engine time ns)
    healthy_at = None
    next_health = next_state = t0
    feed.start_events()
    feed.start_logs()
    outcome = StartOutcome(ready=False, endpoint=ep)
    # With an API key the runtime answers /v1/models only with it (401 without). apiclient: the key
    # goes only to a listener proved to be root's (the runtime), never to whoever binds the port first.
    client = apiclient.client(timeout=3.0, headers=apiclient.key_headers(plan.runtime.api_key_env))

    log_ended = False

    def collect(items) -> None:
        nonlocal oom, died, log_ended
        for it in items:
            if it.kind == "log-end":
                log_ended = True
            elif it.kind == "log":
                log.append(it.text)
                msg = tracker.feed(it.text, it.at)
                if msg:
                    say(f"  [{it.at - t0:5.1f} s] {msg}")
            elif it.kind == "event":
                if it.text == "oom":
                    if not oom:
                        say(f"  [{it.at - t0:5.1f} s] engine event: oom (the container hit its memory cap)")
                    oom = True
                elif it.text == "die" and died is None:
                    code = it.attrs.get("exitCode") if it.attrs else None
                    died = (int(code) if code is not None else None, it.time_ns)
                    say(f"  [{it.at - t0:5.1f} s] engine event: die, exit code {died[0]}")

    try:
        while True:
            collect(feed.drain(wait=POLL_S))
            now = time.monotonic()
            if died is None and now >= next_state:
                next_state = now + STATE_EVERY_S
                st = container_state(name)
                if not st.exists or (st.status not in ("running", "created", "restarting")):
                    # The event may still be in flight: give it a moment before trusting the poll.
                    collect(feed.drain(wait=0.5))
                    if died is None:
                        died = (st.exit_code, None)
                        oom = oom or bool(st.oom_killed)
            if died is not None:
                # Let the log reader deliver the last lines, then decide.
                end = time.monotonic() + 2.0
                while not log_ended and time.monotonic() < end:
                    collect(feed.drain(wait=0.1))
                st = container_state(name)
                oom = oom or bool(st.oom_killed)
                outcome.died_ns = died[1]
                ev = StartEvidence(log="\n".join(log), kernel_log=_kernel_events_since(uptime_at_start),
                              oom_killed=oom, exit_code=died[0])
                phase = tracker.last_phase or "before any phase"
                fallback = _finding(
                    "exit-during-load", f"the runtime exited with code {died[0]} before it was ready",
                    f"the server process ended during start-up (last phase: {phase}); the log lines below say why "
                    "(a bad argument, a missing model file, an import error)",
                    "fix what the log names in the recipe, image or profile; `hostctl up --keep-on-failure` keeps "
                    "the container to inspect", [f"engine: die, exit code {died[0]}, OOMKilled={oom}"])
                return _fail(outcome, ev, fallback, log)
            if healthy_at is None and now >= next_health:
                next_health = now + HEALTH_EVERY_S
                try:
                    if apiclient.request(client, "GET", f"{ep}/health", cap=apiclient.SMALL_CAP,
                                         what="/health").status_code == 200:
                        healthy_at = now
                        outcome.timings["health_s"] = now - t0
                        say(f"  [{now - t0:5.1f} s] /health ok")
                except (httpx.HTTPError, apiclient.BadAnswer):
                    pass
            if healthy_at is not None:
                try:
                    ok, expected, got = check_models(client, ep, recipe.served_name, recipe.context)
                except (httpx.HTTPError, apiclient.BadAnswer) as exc:
                    ok, expected, got = False, f"{recipe.served_name} with max_model_len {recipe.context}", str(exc)
                if not ok:
                    return _fail(outcome, StartEvidence(log="\n".join(log)), _finding(
                        "models-mismatch", "/v1/models does not list the recipe's model as configured",
                        f"expected {expected}; the runtime lists {got}",
                        "the served name and context come from the recipe (served_name, context): check that the "
                        "image serves this recipe and that nothing else answers on this port"), log)
                say(f"  [{time.monotonic() - t0:5.1f} s] /v1/models: {recipe.served_name}, max_model_len {recipe.context}")
                outcome.kv = tracker.kv.at_ready(recipe.context)
                say("  " + tracker.kv.describe(recipe.context))
                t_smoke = time.monotonic()
                report = run_suite(ep, recipe, api_key_env=plan.runtime.api_key_env)
                outcome.timings["smoke_s"] = time.monotonic() - t_smoke
                outcome.timings["ready_s"] = time.monotonic() - t0
                saved.save_smoke(report)
                outcome.smoke = report
                for line in report.text().splitlines()[1:]:
                    say(line)
                collect(feed.drain())
                st = container_state(name)
                if not st.running:
                    died = (st.exit_code, None)
                    oom = oom or bool(st.oom_killed)
                    continue  # diagnosed as a death above, not as wrong answers
                if not report.ok:
                    bad = report.failures
                    return _fail(outcome, StartEvidence(log="\n".join(log)), _finding(
                        "smoke-failed", f"the smoke gate failed: {len(bad)} of {len(report.results)} test(s) wrong",
                        "the runtime loaded and answers, but not correctly: "
                        + "; ".join(f"{r.name}: expected {r.expected}, got {r.got}" for r in bad),
                        "check the recipe's model (right checkpoint, complete caches), its chat template and "
                        "--tool-call-parser; `hostctl smoke` re-runs the suite against a kept runtime",
                        [r.line() for r in bad]), log)
                outcome.ready = True
                outcome.log_tail = list(log)  # what `cache list` learns from (hostctl/cache/usage.py)
                return outcome
            stalled = tracker.stalled_for(now)
            if stalled > limit:
                ev = StartEvidence(log="\n".join(log), stalled_s=stalled)
                return _fail(outcome, ev, _finding(
                    "no-progress", f"no progress for {stalled:.0f} s while the container was alive",
                    f"the last phase was {tracker.last_phase or 'none'}; nothing new appeared in the log since "
                    "(a runtime that is alive but stuck: a deadlock, a hung collective, a blocked read)",
                    "look at the last phase and the log below; if this step legitimately runs silent for longer, "
                    "raise watchdog_s in the recipe"), log)
            if now > deadline:
                return _fail(outcome, StartEvidence(log="\n".join(log)), _finding(
                    "load-timeout", f"not ready after {timeout} s (the load timeout)",
                    f"it was still making progress (last phase: {tracker.last_phase or 'none'}) but did not become "
                    "ready in time", "raise load_timeout_s in the recipe or `hostctl up --timeout S`"), log)
    finally:
        client.close()
        feed.close()


# An exception line: at the start of the line or of a log record's message ("...[core.py:12] ValueError: ..."),
# not an exception named in passing inside a warning.
# Bounded like hostctl.failures.ROOT_ERROR: the log is outside input, an exception name is short.
ERROR_LINE = re.compile(r"(?:^|\] )\s{0,16}([A-Z][A-Za-z0-9_.]{0,200}(?:Error|Exception|Exit)):? ")


def root_errors(log, limit: int = 3) -> list[str]:
    """The first distinct exception lines: in a multi-process runtime the last traceback is
    usually the parent reporting that a child failed; the child's own error comes first."""
    seen: list[str] = []
    for line in log:
        line = loglines.bounded(line)
        m = ERROR_LINE.search(line)
        if m:
            text = line[m.start(1):].strip()
            if text not in seen:
                seen.append(text)
        if len(seen) >= limit:
            break
    return seen


def _fail(outcome: StartOutcome, ev: StartEvidence, fallback: Finding, log) -> StartOutcome:
    found = classify(ev)
    if not found:
        errors = root_errors(log)
        if errors:
            fallback = Finding(id=fallback.id, title=fallback.title, cause=fallback.cause, fix=fallback.fix,
                               lines=fallback.lines + [f"log error: {e}" for e in errors])
    outcome.cause = found[0] if found else fallback
    outcome.also = found[1:] if found else []
    outcome.log_tail = list(log)[-LOG_SHOWN:]
    return outcome


def failure_error(outcome: StartOutcome) -> FailedError:
    """The failure as the user sees it; log lines are redacted (by pattern and by value)."""
    from hostctl.secrets import redact

    c = outcome.cause
    assert c is not None
    details = [f"cause: {c.cause}"]
    details += [f"evidence: {redact(line)}" for line in c.lines]
    details += [f"also matched: {f.title} (fix: {f.fix})" for f in outcome.also]
    if outcome.log_tail:
        details.append("last log lines:")
        details += [f"  | {redact(line)}" for line in outcome.log_tail]
    return FailedError(f"hostctl up failed [{c.id}]: {c.title}", details=details, fix=c.fix)


# ---------------------------------------------------------------- down, logs (status: hostctl.service.status)


def down(config: Config, say: Say) -> str:
    """Take the profile's project down; the profile alone names it (no facts, no plan)."""
    from hostctl.service import supervisor

    supervisor.stop_running(say)  # a supervising `up --foreground` ends first, or it would restart nothing but see a death
    rt = identity.of_config(config)
    with HostLock("down"):
        part = RuntimePart("stop", project_dir=rt.project_dir, project=rt.project, container=rt.container)
        run_inline([part], command="hostctl down", schema=SCHEMA, say=say)
        last = saved.load_service()
        if last is not None and last.container == rt.container:
            saved.save_service(last.model_copy(update={"state": "down", "down_at": _now_iso()}))
        before = part.before
        if before is not None and before.exists:
            say(f"caches kept: {', '.join(before.rw_binds) or 'none bound'}")
            return f"stopped and removed {rt.container}"
        return f"{rt.container} was not running"
