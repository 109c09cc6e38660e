"""Run every case of the hostile-input generator (tests/hostile_inputs.py) in-process through
hostctl's main(argv) and report, per class, how many were refused, accepted or crashed.

    python3 benchmarks/hostile_inputs.py [--show N]

Exit 0 when there are 0 internal errors, 0 accepted harmful values, 0 refused benign inputs and
every refusal names its field; 1 otherwise (the problems are printed). Everything is written under
a temporary directory (HOSTCTL_SYSROOT too): nothing on this host is touched.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--show", type=int, default=20, help="problems to print (default 20)")
    ap.add_argument("--only", help="run only classes starting with this")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="hostctl-hostile-") as tmp:
        os.environ["HOSTCTL_SYSROOT"] = str(Path(tmp) / "sysroot")
        import hostile_inputs as h

        t0 = time.perf_counter()
        cases = [c for c in h.generate() if not args.only or c.cls.startswith(args.only)]
        t_gen = time.perf_counter() - t0
        by_class: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        problems = []
        t1 = time.perf_counter()
        for i, case in enumerate(cases):
            r = h.run_case(case, Path(tmp) / f"c{i}")
            by_class[case.cls]["cases"] += 1
            by_class[case.cls][f"exit {r.code}"] += 1
            if r.problem:
                by_class[case.cls]["problems"] += 1
                problems.append((case, r))
        elapsed = time.perf_counter() - t1
    width = max(len(c) for c in by_class)
    for cls in sorted(by_class):
        counts = by_class[cls]
        exits = ", ".join(f"{k} x{v}" for k, v in sorted(counts.items()) if k.startswith("exit"))
        print(f"{cls:<{width}}  {counts['cases']:5d} cases  {exits}" + (f"  PROBLEMS {counts['problems']}" if counts["problems"] else ""))
    n = len(cases)
    crashes = sum(1 for _, r in problems if r.crashed or r.code == 70 or "Traceback" in r.stderr)
    harmful = sum(1 for c, r in problems if not (r.crashed or r.code == 70) and c.expect == h.REFUSED and r.code != 2)
    print(f"\n{n} cases in {elapsed:.1f} s ({elapsed / max(n, 1) * 1000:.1f} ms each; generated in {t_gen:.2f} s): "
          f"{crashes} internal errors, {harmful} harmful values accepted, {len(problems)} problems in all")
    for case, r in problems[:args.show]:
        print(f"  {case.label()[:160]}\n      {r.problem[:400]}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
