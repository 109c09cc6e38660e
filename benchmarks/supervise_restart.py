"""How fast a supervised runtime comes back (README "Supervision"), side by side in one run on
the CPU demo under a real systemd (the box of tests/system/sdbox.py: this machine's PID 1 is
not systemd):

  cold start   `systemctl start hostctl-runtime.service`: hostctl starts -> READY=1
  restart      `docker kill` of the ready runtime: the container's death (the engine's
               State.FinishedAt) -> the new `hostctl up --foreground` starting (systemd's
               ExecMainStartTimestamp; goal < 2 s, RestartSec=1 included) -> READY=1 again
  freeze       SIGSTOP of the ready runtime's engine core (its API server still answers
               /health): the freeze -> the supervisor's verdict (its journal line; goal < 30 s)
               -> READY=1 again (goal: within 2x the death's)

Times are on one clock: systemd's monotonic timestamps and this process's monotonic clock are
the same kernel clock; the engine's realtime FinishedAt is converted with the offset measured
here. Run as root with Docker and the demo image:
    python3 benchmarks/supervise_restart.py [--runs N]
Port 18593; Compose project hc5-benchsup; everything started is removed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))  # tests/need.py, which the system fixtures import
sys.path.insert(0, str(ROOT / "tests" / "system"))

from runtime_fixtures import Frozen, Host, build_demo_image, demo_recipe  # noqa: E402
from sdbox import SystemdBox, python_mounts  # noqa: E402

UNIT = "hostctl-runtime.service"
PORT = 18593


def mono_us(box: SystemdBox, prop: str) -> float:
    return int(box.show(UNIT, prop)[prop]) / 1e6


def wait(cond, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = cond()
        if got:
            return got
        time.sleep(0.1)
    raise SystemExit(f"timed out after {timeout} s")


def finished_mono(container: str) -> float:
    text = subprocess.check_output(["docker", "inspect", "-f", "{{.State.FinishedAt}}", container], text=True).strip()
    whole, _, frac = text.rstrip("Z").partition(".")
    t = datetime.fromisoformat(whole + "+00:00").timestamp() + float("0." + (frac or "0"))
    return t - (time.time() - time.monotonic())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=2, help="kills and freezes to time (each one restart; default 2)")
    args = ap.parse_args()
    build_demo_image()
    tmp = Path(tempfile.mkdtemp(prefix="hostctl-benchsup-"))
    h = Host(tmp, "benchsup", PORT, recipe=demo_recipe())
    hostctl_bin = str(Path(sys.prefix) / "bin" / "hostctl")
    subprocess.run(h.argv("render", "--out", str(tmp / "units"), "--hostctl-bin", hostctl_bin), env=h.env(),
                   check=True, capture_output=True)
    box = SystemdBox("hc5-benchsup-box", [ROOT, tmp, *python_mounts()])
    cold, to_restart, to_ready, to_verdict, frozen_to_ready = [], [], [], [], []
    try:
        box.start()
        box.write("/etc/hostctl/hostctl.toml", h.profile.read_text())
        box.write("/etc/hostctl/recipe.yaml", (tmp / "recipe.yaml").read_text())
        box.write(f"/etc/systemd/system/{UNIT}", (tmp / "units" / UNIT).read_text())
        box.write(f"/etc/systemd/system/{UNIT}.d/bench.conf",
                  f"[Unit]\nStartLimitBurst={2 * args.runs + 5}\n[Service]\nEnvironment=HOSTCTL_SYSROOT={h.sysroot}\n")
        box.exec("systemctl", "daemon-reload", check=True)
        for i in range(args.runs):
            res = box.exec("systemctl", "start", UNIT, timeout=400)
            if res.returncode != 0:
                raise SystemExit(f"start failed:\n{box.journal(UNIT)[-3000:]}")
            cold.append(mono_us(box, "ActiveEnterTimestampMonotonic") - mono_us(box, "ExecMainStartTimestampMonotonic"))
            n = int(box.show(UNIT, "NRestarts")["NRestarts"])
            subprocess.run(["docker", "kill", h.container], check=True, capture_output=True)
            wait(lambda: box.show(UNIT, "NRestarts")["NRestarts"] == str(n + 1)
                 and box.show(UNIT, "ActiveState")["ActiveState"] == "active", 300)
            died = finished_mono(h.container)
            began = mono_us(box, "ExecMainStartTimestampMonotonic")
            ready = mono_us(box, "ActiveEnterTimestampMonotonic")
            to_restart.append(began - died)
            to_ready.append(ready - died)
            t_freeze = time.time()
            mono_freeze = time.monotonic()
            with Frozen(h.container):
                wait(lambda: box.show(UNIT, "NRestarts")["NRestarts"] == str(n + 2)
                     and box.show(UNIT, "ActiveState")["ActiveState"] == "active", 300)
            entry = json.loads((h.state / "restarts.json").read_text())["entries"][-1]
            if entry["cause"] != "engine-frozen":
                raise SystemExit(f"the freeze ended as {entry['cause']}, not engine-frozen: {entry}")
            journal = box.exec("journalctl", "--no-pager", "-o", "short-unix", "-u", UNIT).stdout
            verdict = [line for line in journal.splitlines() if "the engine has done no work for" in line][-1]
            to_verdict.append(float(verdict.split()[0]) - t_freeze)
            frozen_to_ready.append(mono_us(box, "ActiveEnterTimestampMonotonic") - mono_freeze)
            print(f"run {i + 1}: cold start {cold[-1]:.1f} s; death -> restart began {to_restart[-1]:.2f} s, "
                  f"-> ready again {to_ready[-1]:.1f} s; freeze -> verdict {to_verdict[-1]:.1f} s, "
                  f"-> ready again {frozen_to_ready[-1]:.1f} s", file=sys.stderr)
            box.exec("systemctl", "stop", UNIT, timeout=240)
    finally:
        box.exec("systemctl", "stop", UNIT, timeout=240)
        box.remove()
        h.cleanup()
    med = statistics.median
    print(f"cold start (systemctl start -> READY=1):     median {med(cold):6.1f} s  ({', '.join(f'{x:.1f}' for x in cold)})")
    print(f"death -> restart began (goal < 2 s):         median {med(to_restart):6.2f} s  "
          f"({', '.join(f'{x:.2f}' for x in to_restart)})")
    print(f"death -> ready again (through the gate):     median {med(to_ready):6.1f} s  ({', '.join(f'{x:.1f}' for x in to_ready)})")
    print(f"ready again / cold start:                    {med(to_ready) / med(cold):.2f}")
    print(f"freeze -> verdict (goal < 30 s):             median {med(to_verdict):6.1f} s  "
          f"({', '.join(f'{x:.1f}' for x in to_verdict)})")
    print(f"freeze -> ready again:                       median {med(frozen_to_ready):6.1f} s  "
          f"({', '.join(f'{x:.1f}' for x in frozen_to_ready)})")
    print(f"freeze -> ready / death -> ready (goal <= 2): {med(frozen_to_ready) / med(to_ready):.2f}")
    ok = med(to_restart) < 2.0 and med(to_verdict) < 30 and med(frozen_to_ready) <= 2 * med(to_ready)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
