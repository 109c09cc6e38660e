"""Benchmark: the read-only commands of two hostctl trees side by side, in one run, interleaved
(A, B, A, B, ...), so that drift on a busy or shared machine hits both alike: `--help`, `doctor`
at the quick level, `facts`, `plan` and `status`, each a fresh process, with the median and
fastest wall time, the median CPU time, and B/A.

  git archive OLD hostctl runtime templates systemd compose | tar -x -C /tmp/old
  python3 benchmarks/doctor_quick_ab.py --a /tmp/old [--a-path EXTRA] [--b-path EXTRA] [--runs 21]

A is the tree at --a, B this checkout; --a-path/--b-path put more folders first on each side's
PYTHONPATH (another typer, say). Each side keeps its own cache folder (XDG_CACHE_HOME), so a
tree that caches anything there is measured with it warm, as a user runs it. Only the standard
library is imported here. benchmarks/doctor_quick.py is the one-tree benchmark with the floor rows.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROFILE = ROOT / "runtime" / "hosts" / "demo-cpu.toml"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--a", required=True, type=Path, help="the other tree (its hostctl/ is imported)")
    ap.add_argument("--a-path", default="", help="folders before A's tree on its PYTHONPATH")
    ap.add_argument("--b-path", default="", help="folders before this checkout on B's PYTHONPATH")
    ap.add_argument("--runs", type=int, default=21)
    args = ap.parse_args()
    cmds = {"--help": ["--help"], "doctor quick": ["doctor", "--json"], "facts": ["facts"],
            "plan": ["plan", "--config", str(PROFILE)], "status": ["status", "--config", str(PROFILE)]}
    caches = Path(tempfile.mkdtemp(prefix="hostctl-ab-"))
    envs = {}
    for side, tree, extra in (("A", args.a.resolve(), args.a_path), ("B", ROOT, args.b_path)):
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [extra, str(tree)]))
        env["XDG_CACHE_HOME"] = str(caches / side)
        envs[side] = env
    cwd = caches  # no ./hostctl.toml is picked up
    for name, argv in cmds.items():  # untimed: bytecode, page cache, each side's caches
        for side, env in envs.items():
            done = subprocess.run([sys.executable, "-m", "hostctl", *argv], capture_output=True, env=env, cwd=cwd)
            if done.returncode not in (0, 1):
                raise SystemExit(f"{side} {name} exited {done.returncode}: {done.stderr.decode()[-400:]}")
    rows: dict[tuple[str, str], list[tuple[float, float]]] = {(c, s): [] for c in cmds for s in envs}
    for _ in range(args.runs):
        for name, argv in cmds.items():
            for side, env in envs.items():
                start = time.perf_counter()
                proc = subprocess.Popen([sys.executable, "-m", "hostctl", *argv], stdout=subprocess.DEVNULL,
                                        stderr=subprocess.DEVNULL, env=env, cwd=cwd)
                _, _, usage = os.wait4(proc.pid, 0)
                rows[(name, side)].append((time.perf_counter() - start, usage.ru_utime + usage.ru_stime))
    print(f"A: {args.a} {args.a_path}\nB: {ROOT} {args.b_path}\n{os.uname().nodename}, {os.cpu_count()} CPUs, Python "
          f"{sys.version.split()[0]}; {args.runs} runs each, interleaved; median wall (fastest) / median CPU, ms")
    for name in cmds:
        cells, medians = [], []
        for side in envs:
            walls = [w for w, _ in rows[(name, side)]]
            medians.append(statistics.median(walls))
            cells.append(f"{side}: {medians[-1] * 1e3:5.0f} ({min(walls) * 1e3:4.0f}) / "
                         f"{statistics.median(c for _, c in rows[(name, side)]) * 1e3:4.0f}")
        print(f"{name:13s}", "   ".join(cells), f"   B/A {medians[1] / medians[0]:.2f}")


if __name__ == "__main__":
    main()
