"""A frozen engine is a hang (README "Supervision", hostctl/service/liveness.py): on the real demo
runtime, the engine core stopped with SIGSTOP (a stand-in for a wedged collective or a stuck
grammar) while vLLM's API server goes on answering /health.

- `status` and doctor without a supervisor: not healthy (doctor's logs.runtime fails) while
  frozen, healthy again once thawed (the shared runtime, no boot of its own);
- `up --foreground` (the supervisor, outside systemd; the systemd restart is
  test_supervise_systemd.py's): a busy server is never judged hung and gets no canary, not even
  by a supervisor that was not scheduled for longer than the bound meanwhile, a freeze
  shorter than the bound is forgiven, `status` beside the supervisor says not healthy, and a
  freeze past the bound ends the supervisor non-zero naming `engine-frozen`, recorded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time

import httpx
import pytest

from conftest import needs_compose, needs_root
from runtime_fixtures import Frozen, demo_recipe

pytestmark = [pytest.mark.system, needs_root, needs_compose]

PORT = 18594
HANG_S = 6  # the supervised runtime's hang_timeout_s: a verdict between 6 and 9 s after a freeze (+ a 2 s poll)


def _status(h) -> tuple[int, dict, float]:
    rc, out, err, took = h.run("status", "--json", timeout=60)
    assert out, err
    return rc, json.loads(out), took


def test_status_says_a_frozen_engine_is_not_healthy_without_a_supervisor(shared_runtime):
    h = shared_runtime
    h.require_ready()
    rc, doc, _ = _status(h)
    assert rc == 0 and doc["healthy"] is True and doc["progress"]["working"] is True, doc
    with Frozen(h.container):
        rc, doc, took = _status(h)
        # /health still answers: only the engine's progress tells
        assert rc == 1 and doc["healthy"] is False and doc["state"] == "running", doc
        assert doc["progress"]["working"] is False and "canary" in doc["progress"]["why"], doc
        assert took < 30, f"status took {took:.1f} s to say so"
        rc, out, _, _ = h.run("status", timeout=60)
        assert "engine: NOT WORKING" in out and "health: ok" in out, out
        rc, out, err, _ = h.run("doctor", "--json", timeout=120)
        runtime = {c["id"]: c for c in json.loads(out)["checks"]}["logs.runtime"]
        assert runtime["status"] == "fail" and "its engine does not work" in runtime["summary"], runtime
    deadline = time.monotonic() + 30
    while True:  # thawed: the canary status sent meanwhile completes, and the next one at once
        rc, doc, _ = _status(h)
        if doc["healthy"] or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert rc == 0 and doc["healthy"] is True and doc["progress"]["working"] is True, doc


class Lines:
    """A process's stderr lines, read as they come (the supervisor runs for minutes)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self.thread = threading.Thread(target=self._read, args=(proc,), daemon=True)
        self.thread.start()

    def _read(self, proc) -> None:
        for line in proc.stderr:
            self.lines.append(line)

    def text(self) -> str:
        return "".join(self.lines)

    def wait_for(self, needle: str, proc: subprocess.Popen, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while needle not in self.text():
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"no {needle!r} (rc {proc.poll()}):\n{self.text()[-4000:]}")
            time.sleep(0.2)


def _load(endpoint: str, served: str, seconds: float) -> tuple[int, list[str]]:
    """Chat completions from 3 clients back to back for `seconds` (the bench's kind of load, on
    /v1/chat/completions: the canary uses /v1/completions, so the runtime's log tells them apart)."""
    done, errors = [0], []
    stop = time.monotonic() + seconds

    def client() -> None:
        with httpx.Client(timeout=60, trust_env=False) as c:
            while time.monotonic() < stop:
                try:
                    r = c.post(f"{endpoint}/v1/chat/completions", json={
                        "model": served, "messages": [{"role": "user", "content": "Count from 1 to 50."}],
                        "max_tokens": 64, "temperature": 0, "ignore_eos": True})
                except httpx.HTTPError as exc:  # the server went away: said, not a thread's traceback
                    errors.append(f"{type(exc).__name__}: {exc}")
                    return
                if r.status_code == 200:
                    done[0] += 1
                else:
                    errors.append(f"HTTP {r.status_code}: {r.text[:200]}")

    threads = [threading.Thread(target=client) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return done[0], errors


class NotScheduled:
    """SIGSTOP of a process, SIGCONT when the block ends (also after a failure)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def __enter__(self) -> NotScheduled:
        os.kill(self.pid, signal.SIGSTOP)
        return self

    def __exit__(self, *exc) -> None:
        os.kill(self.pid, signal.SIGCONT)


def _log_since(container: str, since: float) -> str:
    return subprocess.run(["docker", "logs", "--since", f"{since:.3f}", container], capture_output=True,
                          text=True).stdout + ""


def _wait_for_a_canary(container: str, timeout: float) -> None:
    """Until a canary completes in the runtime's log (the supervisor sends one about every
    hang_timeout_s / 2 + a poll while idle)."""
    since = time.time()
    deadline = time.monotonic() + timeout
    while "POST /v1/completions" not in _log_since(container, since):
        if time.monotonic() > deadline:
            pytest.fail(f"no canary in {timeout:g} s of an idle supervised runtime")
        time.sleep(0.1)


def test_the_supervisor_judges_progress_not_health(demo_image, host_factory):
    recipe = demo_recipe(hang_timeout_s=HANG_S)
    h = host_factory("frozen", PORT, recipe=recipe)
    proc = h.popen("up", "--foreground")
    out = Lines(proc)
    try:
        out.wait_for(f"supervising {h.container}", proc, 400)
        endpoint = f"http://127.0.0.1:{PORT}"

        # 1. Busy for 3x the bound: never judged hung, and no canary among the load. The load starts
        # right after an idle canary has landed: the next is due only hang_timeout_s / 2 after it, by
        # when the engine counts the load in flight. A load started at a random moment could meet a
        # canary decided on the reading just before the engine saw its first requests; that one
        # completes behind the load's prefills, seconds later on a loaded CPU (CI saw it).
        _wait_for_a_canary(h.container, HANG_S * 3)
        t_load = time.time()
        loaded: dict = {}
        loader = threading.Thread(target=lambda: loaded.update(
            zip(("served", "errors"), _load(endpoint, recipe["served_name"], 3 * HANG_S))))
        loader.start()
        # Meanwhile the supervisor itself gets no CPU for longer than the bound (SIGSTOP): a judge
        # that was not scheduled has read nothing, and convicts nothing. CI once saw the supervisor
        # stop a working engine under this load: on the 2-CPU machine a process beside the demo
        # engine got no CPU for 5-20 s, and the hang was timed to its clock, not to its readings.
        time.sleep(2)
        with NotScheduled(proc.pid):
            time.sleep(1.5 * HANG_S + 2)
        loader.join()
        served, errors = loaded["served"], loaded["errors"]
        log = _log_since(h.container, t_load)
        assert served > 0 and not errors, f"{errors[:3]}\n{out.text()[-3000:]}"
        assert proc.poll() is None, out.text()[-3000:]
        assert "POST /v1/chat/completions" in log, "the runtime logs no requests: the canary check would prove nothing\n" + out.text()[-3000:]
        assert "POST /v1/completions" not in log, "a canary was sent while requests were in flight"

        # 2. Frozen for half the bound, then thawed: forgiven.
        with Frozen(h.container):
            time.sleep(HANG_S / 2)
        time.sleep(HANG_S * 1.5 + 2)
        assert proc.poll() is None, "a freeze shorter than hang_timeout_s was called a hang:\n" + out.text()[-3000:]

        # 3. Frozen past the bound: status (beside the supervisor) and the supervisor both say so.
        with Frozen(h.container):
            t_freeze = time.monotonic()
            rc, doc, _ = _status(h)
            assert rc == 1 and doc["healthy"] is False and doc["progress"]["working"] is False, doc
            try:
                proc.wait(timeout=1.5 * HANG_S + 2 + 60)  # the bound, a poll, and the container's stop
            except subprocess.TimeoutExpired:
                pytest.fail("the supervisor did not end on a frozen engine:\n" + out.text()[-3000:])
            t_end = time.monotonic()
        out.thread.join(timeout=10)
        text = out.text()
        assert proc.returncode == 1, text[-3000:]
        assert "the runtime hung after it was ready [engine-frozen]" in text, text[-3000:]
        assert "the engine has done no work for" in text, text[-3000:]
        verdict_line = next(line for line in out.lines if "the engine has done no work for" in line)
        # the judged span is measured from the last progress, which may precede the freeze by a poll
        assert int(verdict_line.split("no work for ")[1].split(" s")[0]) >= HANG_S, verdict_line
        assert t_end - t_freeze < 1.5 * HANG_S + 2 + 60
        (entry,) = json.loads((h.state / "restarts.json").read_text())["entries"]
        assert entry["kind"] == "hung" and entry["cause"] == "engine-frozen", entry
        assert any(line.startswith("counters: running") for line in entry["lines"]), entry
        assert not h.container_exists(), "the frozen runtime was not stopped"
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
