"""The supervisor's pure parts (hostctl/service/supervise.py, restarts.py, sdnotify.py): the
verdict from recorded observation sequences (tests/unit/data/supervise.yaml), the cause of an
ending, the restart-history summary `status` prints, and sd_notify over real unix sockets."""

from __future__ import annotations

import json
import os
import socket
import uuid
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from hostctl.facts import processes
from hostctl.facts.records import SupervisedEnding
from hostctl.facts.state import probe_state
from hostctl.failures import StartEvidence
from hostctl.service import restarts, sdnotify
from hostctl.service.supervise import Observation, Verdict, Watcher, death_finding

DATA = yaml.safe_load((Path(__file__).parent / "data" / "supervise.yaml").read_text())


@pytest.mark.parametrize("case", DATA["cases"], ids=[c["name"] for c in DATA["cases"]])
def test_watcher_verdict_from_recorded_sequences(case):
    w = Watcher(hang_timeout_s=DATA["hang_timeout_s"], started_at=0.0)
    verdicts, canaries = [], 0
    for o in case["observations"]:
        verdicts.append(w.feed(Observation(**o)))
        if o["kind"] == "counters" and w.canary_due(o["at"]):  # what the loop does after each reading
            w.canary_sent(o["at"])
            canaries += 1
    want = case["expect"]
    final = verdicts[-1]
    assert final.action == want["action"]
    first_end = next((i for i, v in enumerate(verdicts) if v.action != "watch"), None)
    assert first_end == want.get("at_index")
    # WATCHDOG=1 only after an answer, never once the verdict is in.
    assert sum(v.pet for v in verdicts[:first_end]) == want["pets"]
    assert canaries == want.get("canaries", canaries)
    for key in ("exit_code", "oom", "status", "evidence"):
        if key in want:
            assert getattr(final, key) == want[key]
    if final.action == "hung":
        assert final.failing_s >= DATA["hang_timeout_s"]


def test_a_verdict_is_final():
    w = Watcher(hang_timeout_s=5, started_at=0)
    assert w.feed(Observation(kind="die", at=1.0, exit_code=137)).action == "died"
    # Our own `down` after a death, or a late health answer, changes nothing.
    assert w.feed(Observation(kind="health", at=2.0, ok=True)) == Verdict(action="died", exit_code=137, oom=False)


def test_the_cause_comes_from_the_catalogue_when_a_signature_matches():
    v = Verdict(action="died", exit_code=137, oom=True)
    cause, _ = death_finding(v, StartEvidence(log="INFO serving", oom_killed=True, exit_code=137), 60)
    assert cause.id == "container-oom"
    cause, _ = death_finding(Verdict(action="died", exit_code=137), StartEvidence(log="INFO serving", exit_code=137), 60)
    assert cause.id == "runtime-died" and "exit code 137" in cause.lines[0]
    cause, _ = death_finding(Verdict(action="hung", failing_s=7.5, status="paused"), StartEvidence(log=""), 6)
    assert cause.id == "runtime-hang" and "paused" in cause.title


def _entry(ended: datetime, cause: str, restarted: bool = True, code: int | None = 137) -> SupervisedEnding:
    return SupervisedEnding(ended_at=restarts.iso(ended), kind="died", cause=cause, title=cause, exit_code=code,
                            restart_at=restarts.iso(ended + timedelta(seconds=1)) if restarted else None)


def test_restart_summary_counts_the_last_hour_and_names_each_cause():
    now = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    entries = [_entry(now - timedelta(hours=3), "runtime-died"),
               _entry(now - timedelta(minutes=40), "container-oom"),
               _entry(now - timedelta(minutes=5), "runtime-hang")]
    doc = restarts.summary(entries, now)
    assert doc["restarts_in_window"] == 2
    assert doc["text"] == ("restarted 2 times in the last hour: container-oom at 2026-12-01T11:20:00.000+00:00, "
                           "runtime-hang at 2026-12-01T11:55:00.000+00:00")
    assert doc["last"]["cause"] == "runtime-hang"


def test_restart_summary_says_when_the_last_ending_was_not_restarted():
    now = datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc)
    entries = [_entry(now - timedelta(minutes=9), "runtime-died"),
               _entry(now - timedelta(minutes=2), "container-oom", restarted=False)]
    text = restarts.summary(entries, now)["text"]
    assert text.startswith("restarted 1 time in the last hour: runtime-died at")
    assert text.endswith("; last ended: container-oom at 2026-12-01T11:58:00.000+00:00 (exit code 137), "
                         "not restarted since")
    assert restarts.summary([], now) is None


def test_history_marks_restart_and_ready_once(tmp_path, monkeypatch):
    monkeypatch.setenv("HOSTCTL_SYSROOT", str(tmp_path))
    assert restarts.mark_restart() is None  # a first start is no restart
    restarts.record_end(SupervisedEnding(ended_at="2026-12-01T11:00:00.000+00:00", kind="died", cause="runtime-died",
                                         exit_code=137))
    assert restarts.mark_restart().cause == "runtime-died"
    assert restarts.mark_restart() is None  # the next start (a manual one) is not this restart again
    restarts.mark_ready()
    (e,) = restarts.load()
    assert e.restart_at and e.ready_again_at
    facts, notes = probe_state(tmp_path / "var/lib/hostctl")
    assert not notes and facts.supervised == [e]  # the facts read the same file as the same records
    path = tmp_path / "var/lib/hostctl/restarts.json"
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "entries": doc["entries"] + [{"ended_at": 5, "kind": "died"}]}))
    assert restarts.load() == [e]  # an entry that does not validate is left out, the rest kept
    path.write_text("{not json")
    assert restarts.load() == []


def _receiver(path: str) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    s.bind("\0" + path[1:] if path.startswith("@") else path)
    s.settimeout(2)
    return s


@pytest.mark.parametrize("kind", ["path", "abstract"])
def test_sd_notify_sends_one_datagram(kind, tmp_path):
    path = str(tmp_path / "notify") if kind == "path" else f"@hostctl-test-{uuid.uuid4().hex}"
    with _receiver(path) as r:
        assert sdnotify.notify("READY=1\nSTATUS=ready", {"NOTIFY_SOCKET": path})
        assert r.recv(4096) == b"READY=1\nSTATUS=ready"


def test_sd_notify_without_a_manager_or_a_listener_is_a_quiet_false(tmp_path):
    assert not sdnotify.notify("READY=1", {})
    assert not sdnotify.notify("READY=1", {"NOTIFY_SOCKET": str(tmp_path / "nobody")})
    assert not sdnotify.notify("READY=1", {"NOTIFY_SOCKET": "relative/path"})


def test_watchdog_interval_is_ours_only():
    me = os.getpid()
    assert sdnotify.watchdog_interval_s({"WATCHDOG_USEC": "66000000", "WATCHDOG_PID": str(me)}) == 66.0
    assert sdnotify.watchdog_interval_s({"WATCHDOG_USEC": "66000000"}) == 66.0
    assert sdnotify.watchdog_interval_s({"WATCHDOG_USEC": "66000000", "WATCHDOG_PID": str(me + 1)}) is None
    assert sdnotify.watchdog_interval_s({}) is None
    assert sdnotify.watchdog_interval_s({"WATCHDOG_USEC": "x"}) is None


def _doctor(supervised: list[SupervisedEnding]):
    from hostctl import examples
    from hostctl.doctor.checks import all_checks
    from hostctl.doctor.registry import CheckContext, run_checks

    config, facts = examples.load("demo-cpu")
    facts.state.supervised = supervised
    ctx = CheckContext(facts=facts, config=config, plan=None, level="quick", facts_source="snapshot")
    check = next(c for c in all_checks() if c.id == "service.supervision")
    return run_checks(ctx, [check])[0].result


def test_doctor_shows_the_last_cause_when_the_loop_was_stopped():
    now = datetime.now(timezone.utc)
    res = _doctor([_entry(now - timedelta(minutes=3), "runtime-hang"),
                   _entry(now - timedelta(minutes=1), "container-oom", restarted=False).model_copy(
                       update={"lines": ["engine: OOMKilled=True, exit code 137"]})])
    assert res.status == "fail"
    assert "[container-oom]" in res.summary and "not restarted" in res.summary
    assert "OOMKilled=True" in res.evidence.observed and "reset-failed" in res.fix


def test_doctor_warns_on_recent_restarts_and_passes_without_any():
    now = datetime.now(timezone.utc)
    res = _doctor([_entry(now - timedelta(minutes=10), "runtime-died")])
    assert res.status == "warn" and res.summary.startswith("restarted 1 time in the last hour: runtime-died at")
    assert _doctor([_entry(now - timedelta(hours=5), "runtime-died")]).status == "pass"
    assert _doctor([]).status == "pass"


def test_facts_read_the_restart_history_back(tmp_path):
    from hostctl.facts.state import probe_state

    (tmp_path / "restarts.json").write_text('{"schema": "hostctl.restarts/v1", "entries": [{"ended_at": "t", '
                                            '"kind": "died", "cause": "runtime-died", "exit_code": 137}]}')
    state, notes = probe_state(tmp_path)
    assert notes == [] and state.supervised[0].cause == "runtime-died"
    (tmp_path / "restarts.json").write_text('{"entries": [{"kind": "died"}]}')
    state, notes = probe_state(tmp_path)
    assert state.supervised == [] and "restarts.json" in notes[0]


def test_down_stops_the_recorded_supervisor_and_only_a_hostctl(tmp_path, monkeypatch):
    import json
    import subprocess
    import sys

    from hostctl.service import supervisor

    monkeypatch.setenv("HOSTCTL_SYSROOT", str(tmp_path))
    state = tmp_path / "var/lib/hostctl"
    state.mkdir(parents=True)
    said: list[str] = []
    # A process that merely has the recorded pid (a reused pid: another start time) is left alone,
    # whatever its command line says.
    other = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "hostctl", "up", "--foreground"])
    try:
        assert processes.start_ticks(other.pid) is not None
        (state / supervisor.SUPERVISOR_FILE).write_text(
            json.dumps({"pid": other.pid, "start": processes.start_ticks(other.pid) - 1}))
        assert supervisor.running() is None
        assert not supervisor.stop_running(said.append) and other.poll() is None
    finally:
        other.kill()
        other.wait()
    sup = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)", "hostctl", "up", "--foreground"])
    (state / supervisor.SUPERVISOR_FILE).write_text(json.dumps({"pid": sup.pid, "start": processes.start_ticks(sup.pid)}))
    try:
        assert supervisor.stop_running(said.append, wait_s=10)
        # It has ended (SIGTERM); reap it so the pid is really gone.
        assert sup.wait(timeout=5) == -15
        assert said and f"pid {sup.pid}" in said[0]
    finally:
        sup.kill()
