"""Benchmark: `hostctl doctor --level quick` wall time next to the same facts gathered by a shell
script of nvidia-smi, lsblk, findmnt and swapon calls (benchmarks/doctor_quick_facts.sh).

Run from the repository root:  python3 benchmarks/doctor_quick.py [--runs N] [--config PROFILE]

It prints, per measurement, the median and the fastest of N runs (interleaved, so drift on a
busy machine hits every row alike):
  python start-up      `python3 -c pass`: the interpreter and site alone
  import hostctl.cli   what every hostctl command pays before it does anything
  doctor quick         `python3 -m hostctl doctor --json`, the whole process
    in-process         facts + plan + checks, from the document's own timings
  shell script         the hand-gathered facts
and the ratio doctor / shell script. The doctor judges more than the script reads (Docker,
kernel log, /dev/shm, ports, NUMA, IOMMU); the script is the floor of "just reading".
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "doctor_quick_facts.sh"


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.perf_counter() - start
    if done.returncode not in (0, 1):  # doctor exits 1 when a check fails: still a complete run
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-500:]}")
    return wall, done.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--config", help="host profile for doctor (default: none, as on a fresh machine)")
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    doctor = [sys.executable, "-m", "hostctl", "doctor", "--json"] + (["--config", args.config] if args.config else [])
    rows: dict[str, list[float]] = {k: [] for k in ("python start-up", "import hostctl.cli", "doctor quick",
                                                     "  in-process (facts+plan+checks)", "    facts", "    checks",
                                                     "shell script")}
    summary = None
    for _ in range(args.runs):
        rows["python start-up"].append(timed([sys.executable, "-c", "pass"], env)[0])
        rows["import hostctl.cli"].append(timed([sys.executable, "-c", "import hostctl.cli"], env)[0])
        wall, out = timed(doctor, env)
        doc = json.loads(out)
        t = doc["timings_s"]
        rows["doctor quick"].append(wall)
        rows["  in-process (facts+plan+checks)"].append(t["total"])
        rows["    facts"].append(t["facts"])
        rows["    checks"].append(t["checks"])
        summary = doc["summary"]
        rows["shell script"].append(timed(["sh", str(SCRIPT)], env)[0])

    host = os.uname().nodename
    print(f"doctor quick level vs shell script on {host} ({os.cpu_count()} CPUs), {args.runs} runs, "
          f"profile: {args.config or 'none'}; doctor said {summary}")
    print(f"{'':34} {'median':>9} {'fastest':>9}")
    for name, values in rows.items():
        print(f"{name:34} {statistics.median(values) * 1000:7.1f}ms {min(values) * 1000:7.1f}ms")
    d, s = statistics.median(rows["doctor quick"]), statistics.median(rows["shell script"])
    ip = statistics.median(rows["  in-process (facts+plan+checks)"])
    print(f"ratio doctor/shell (median wall): {d / s:.1f}x; in-process part alone: {ip / s:.1f}x; "
          f"goal: doctor quick < 500 ms -> {'met' if d < 0.5 else 'NOT met'} ({d * 1000:.0f} ms)")


if __name__ == "__main__":
    main()
