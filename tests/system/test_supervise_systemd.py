"""Supervision under a real systemd (README "Supervision"): the rendered hostctl-runtime.service
runs `hostctl up --foreground` in a box whose PID 1 is systemd (tests/system/sdbox.py), against
the host's engine and the real demo runtime.

One scenario, because each runtime boot costs ~40 s: start (READY=1 only after the smoke gate)
-> the engine frozen (SIGSTOP of VLLM::EngineCore: /health still answers) -> `engine-frozen` within
the bound, restarted through the gate, ready again, the restart recorded -> `docker pause` (the
container lives, /health hangs) -> a hang after hang_timeout_s, stopped and restarted ->
`docker kill` -> a death, and StartLimitBurst=3 stops the loop; `status` shows the last cause
-> started again by hand -> `hostctl down` ends the supervisor cleanly (exit 0, no restart).
The test's drop-in shortens only StartLimitIntervalSec and hang_timeout_s; Burst, Restart= and
RestartSec= are the rendered unit's own. It boots its own runtime, so it runs after the tests
that share one (tests/system/runtime_fixtures.py).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import needs_compose, needs_root
from runtime_fixtures import ROOT, Frozen, Host, demo_recipe
from sdbox import SystemdBox, python_mounts

pytestmark = [pytest.mark.system, needs_root, needs_compose]

PORT = 18592
HANG_S = 6
UNIT = "hostctl-runtime.service"
BOX = "hc5-systemd-box"
PROFILE_IN_BOX = "/etc/hostctl/hostctl.toml"  # the rendered unit's --config, as installed


def _wait(what: str, cond, timeout: float, box: SystemdBox, every: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(every)
    state = box.show(UNIT, "ActiveState", "SubState", "NRestarts", "Result")
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}; unit {state}\n"
                f"journal tail:\n{box.journal(UNIT)[-6000:]}")


@pytest.fixture(scope="module")
def supervised(demo_image, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("supervised")
    h = Host(tmp, "supervised", PORT, recipe=demo_recipe(hang_timeout_s=HANG_S))
    hostctl_bin = Path(sys.prefix) / "bin" / "hostctl"
    assert hostctl_bin.exists(), f"{hostctl_bin}: the test venv has no hostctl entry point"
    rc, out, err, _ = h.run("render", "--out", str(tmp / "units"), "--hostctl-bin", str(hostctl_bin))
    assert rc == 0, err
    unit = (tmp / "units" / UNIT).read_text()
    assert "Type=notify" in unit and "up --foreground" in unit and f"--config {PROFILE_IN_BOX}" in unit
    box = SystemdBox(BOX, [ROOT, tmp, *python_mounts()])
    try:
        box.start()
        box.write(PROFILE_IN_BOX, h.profile.read_text())
        box.write("/etc/hostctl/recipe.yaml", (tmp / "recipe.yaml").read_text())
        box.write(f"/etc/systemd/system/{UNIT}", unit)
        box.write(f"/etc/systemd/system/{UNIT}.d/test.conf",
                  f"[Unit]\nStartLimitIntervalSec=20min\n[Service]\nEnvironment=HOSTCTL_SYSROOT={h.sysroot}\n")
        box.exec("systemctl", "daemon-reload", check=True)
        yield h, box, str(hostctl_bin)
    finally:
        box.exec("systemctl", "stop", UNIT, timeout=240)
        box.remove()
        h.cleanup()


def _history(h: Host) -> list[dict]:
    path = h.state / "restarts.json"
    return json.loads(path.read_text())["entries"] if path.exists() else []


def _ready_again(box: SystemdBox, restarts: int):
    def cond():
        s = box.show(UNIT, "ActiveState", "SubState", "NRestarts", "Result")
        if int(s.get("NRestarts") or 0) > restarts:  # a restart that failed too: waiting longer cannot help
            pytest.fail(f"expected {restarts} restart(s), the unit shows {s}\n"
                        f"journal tail:\n{box.journal(UNIT)[-6000:]}")
        return s if s.get("NRestarts") == str(restarts) and s.get("ActiveState") == "active" else None
    return cond


def test_supervised_runtime_restarts_through_the_gate_and_the_start_limit_stops_a_loop(supervised):
    h, box, hostctl_bin = supervised

    # Start: `systemctl start` of a Type=notify unit returns at READY=1, which comes after the gate.
    res = box.exec("systemctl", "start", UNIT, timeout=400)
    assert res.returncode == 0, res.stderr + box.journal(UNIT)[-3000:]
    s = box.show(UNIT, "ActiveState", "SubState", "Type", "WatchdogUSec", "NRestarts")
    assert s["ActiveState"] == "active" and s["SubState"] == "running" and s["Type"] == "notify", s
    assert s["WatchdogUSec"] not in ("0", "infinity", ""), s
    smoke = json.loads((h.state / "last-smoke.json").read_text())
    assert smoke["ok"], smoke
    journal = box.journal(UNIT)
    assert journal.index("ok   arithmetic") < journal.index(f"supervising {h.container}"), journal[-3000:]

    # 1. A frozen engine after ready (its API server still answers /health): judged within the
    # bound, stopped, restarted through the whole gate, ready again, recorded.
    t_freeze = time.time()
    with Frozen(h.container):
        _wait("the first restart to be ready", _ready_again(box, 1), 300, box)
    (entry,) = _history(h)
    assert entry["kind"] == "hung" and entry["cause"] == "engine-frozen", entry
    assert entry["restart_at"] and entry["ready_again_at"], entry
    assert any(line.startswith("counters: ") for line in entry["lines"]), entry
    journal = box.journal(UNIT)
    assert "the runtime hung after it was ready [engine-frozen]" in journal
    assert journal.count("ok   arithmetic") >= 2, "the restart did not pass the smoke gate again"
    assert json.loads((h.state / "last-smoke.json").read_text())["started_at"] > smoke["started_at"]
    from datetime import datetime

    ended = datetime.fromisoformat(entry["ended_at"]).timestamp()
    restart_at = datetime.fromisoformat(entry["restart_at"]).timestamp()
    # judged between hang_timeout_s and 1.5x it after the freeze (a canary goes out at half the
    # bound), plus a 2 s poll and the container's stop
    assert ended - t_freeze < 1.5 * HANG_S + 2 + 30, f"the ending was recorded {ended - t_freeze:.1f} s after the freeze"
    assert restart_at - ended < 10, f"the restart began {restart_at - ended:.1f} s after the ending"

    # 2. A hang: the container lives (paused) but /health does not answer: stopped, then restarted.
    t_pause = time.monotonic()
    subprocess.run(["docker", "pause", h.container], check=True, capture_output=True)
    _wait("the restart after the hang to be ready", _ready_again(box, 2), 300, box)
    hang = _history(h)[-1]
    assert hang["kind"] == "hung" and hang["cause"] == "runtime-hang", hang
    assert any("status paused" in line for line in hang["lines"]), hang
    ended = datetime.fromisoformat(hang["ended_at"]).timestamp()
    assert ended - (time.time() - (time.monotonic() - t_pause)) >= HANG_S, "called a hang before hang_timeout_s"
    assert "the runtime hung after it was ready [runtime-hang]" in box.journal(UNIT)

    # 3. A death, the third ending within StartLimitIntervalSec: StartLimitBurst=3 refuses the fourth start.
    subprocess.run(["docker", "kill", h.container], check=True, capture_output=True)
    s = _wait("the start limit to stop the loop", lambda: (lambda s: s if s.get("ActiveState") == "failed" else None)(
        box.show(UNIT, "ActiveState", "Result", "NRestarts")), 60, box)
    # systemd 252 keeps the last run's Result (exit-code) and says why it did not start again.
    assert s["Result"] in ("exit-code", "start-limit-hit"), s
    assert "Start request repeated too quickly" in box.journal(UNIT), box.journal(UNIT)[-2000:]
    time.sleep(3)  # RestartSec=1: nothing starts it again
    assert box.show(UNIT, "ActiveState")["ActiveState"] == "failed"
    assert len(_history(h)) == 3 and not _history(h)[-1].get("restart_at")
    died = _history(h)[-1]
    assert died["kind"] == "died" and died["cause"] == "runtime-died" and died["exit_code"] == 137, died
    assert any("exit code 137" in line for line in died["lines"]), died
    assert "the runtime died after it was ready [runtime-died]" in box.journal(UNIT)
    rc, out, err, _ = h.run("status", timeout=60)
    assert "supervision: restarted 2 times in the last hour: engine-frozen at" in out, out + err
    assert "runtime-hang at" in out and "last ended: runtime-died" in out and "not restarted since" in out, out
    assert "last up: failed" in out and "(runtime-died)" in out, out
    rc, out, err, _ = h.run("status", "--json", timeout=60)
    doc = json.loads(out)
    assert doc["supervision"]["last"]["cause"] == "runtime-died" and doc["supervision"]["restarts_in_window"] == 2
    assert doc["state"] == "exited" and doc["exit_code"] == 137, doc

    # 4. Started again by hand, then `hostctl down`: the supervisor takes the runtime down and exits 0.
    box.exec("systemctl", "reset-failed", UNIT)
    res = box.exec("systemctl", "start", UNIT, timeout=400)
    assert res.returncode == 0, res.stderr + box.journal(UNIT)[-3000:]
    res = box.exec("env", f"HOSTCTL_SYSROOT={h.sysroot}", hostctl_bin, "--config", PROFILE_IN_BOX, "down", timeout=240)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "stopping the supervisor" in res.stderr, res.stderr
    time.sleep(3)  # RestartSec=1: a restart would have begun by now
    s = box.show(UNIT, "ActiveState", "Result", "ExecMainStatus")
    assert s["ActiveState"] == "inactive" and s["Result"] == "success" and s["ExecMainStatus"] == "0", s
    assert not h.container_exists()
    assert "SIGTERM: taking the project down (no restart)" in box.journal(UNIT)
