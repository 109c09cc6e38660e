#!/usr/bin/env python3
"""GPU link and facts benchmark (run on the GPU test machine; read-only).

Prints, side by side:
  - pinned host->device and device->host copy bandwidth per GPU (hostctl's own measurement,
    in a child process), as a fraction of the link's capability at its maximum and of the
    link seen under load;
  - the time of one full facts pass (hostctl.facts.collect) in a fresh interpreter, import
    included, and warm in-process; the NVML part alone; one nvidia-smi query for comparison.

    python3 benchmarks/gpu_link.py [--mib 256] [--iters 10] [--repeat 3] [--json OUT]
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

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from hostctl.facts import collect  # noqa: E402
from hostctl.facts.gpu import probe_gpus  # noqa: E402
from hostctl.gpu.health import link_capability_gbps, measure_copy_bandwidth  # noqa: E402

COLD = ("import time; t = time.perf_counter(); from hostctl.facts import collect; collect(); "
        "print(time.perf_counter() - t)")


def timed(fn, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    doc: dict = {"copies": [], "facts": {}}

    gpus = probe_gpus()
    if not gpus.available:
        print(f"no GPU: {gpus.reason}")
        return 1
    print(f"driver {gpus.driver_version}, {len(gpus.devices)} GPU(s)\n")
    print(f"{'GPU':<4} {'link max':<10} {'cap GB/s':>8} {'under load':<11} {'H2D GB/s':>9} {'H2D/cap':>8} "
          f"{'D2H GB/s':>9} {'D2H/cap':>8}")
    for gpu in gpus.devices:
        runs = [measure_copy_bandwidth(gpu, mib=a.mib, iters=a.iters) for _ in range(a.repeat)]
        errors = [r.error for r in runs if r.error]
        if errors:
            print(f"{gpu.index:<4} copy failed: {errors[0]}")
            continue
        h2d = max(r.h2d_gbps for r in runs)
        d2h = max(r.d2h_gbps for r in runs)
        cap = link_capability_gbps(gpu.pcie.gen_max, gpu.pcie.width_max)
        load = runs[-1].link_under_load
        load_txt = f"Gen{load[0]} x{load[1]}" if load else "?"
        print(f"{gpu.index:<4} {f'Gen{gpu.pcie.gen_max} x{gpu.pcie.width_max}':<10} {cap:>8.1f} {load_txt:<11} "
              f"{h2d:>9.1f} {h2d / cap:>8.1%} {d2h:>9.1f} {d2h / cap:>8.1%}")
        doc["copies"].append({"gpu": gpu.index, "name": gpu.name, "capability_gbps": cap, "h2d_gbps": h2d,
                              "d2h_gbps": d2h, "h2d_runs": [r.h2d_gbps for r in runs],
                              "d2h_runs": [r.d2h_gbps for r in runs], "link_under_load": load,
                              "mib": a.mib, "iters": a.iters})

    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent.parent) + os.pathsep
               + os.environ.get("PYTHONPATH", ""))
    cold = []
    for _ in range(a.repeat):
        res = subprocess.run([sys.executable, "-c", COLD], capture_output=True, text=True, env=env, timeout=120)
        cold.append(float(res.stdout.strip().splitlines()[-1]))
    warm = timed(collect, a.repeat)
    nvml = timed(probe_gpus, a.repeat)
    smi = timed(lambda: subprocess.run(["nvidia-smi", "--query-gpu=index,power.limit,pcie.link.gen.current",
                                        "--format=csv,noheader"], capture_output=True, timeout=30), a.repeat)
    doc["facts"] = {"cold_s": cold, "warm_s": warm, "nvml_only_s": nvml, "nvidia_smi_query_s": smi}
    print(f"\n{'facts pass':<34} {'median s':>9} {'min s':>8}")
    for label, xs in (("full, fresh interpreter (+import)", cold), ("full, warm (in-process)", warm),
                      ("NVML part only (probe_gpus)", nvml), ("one nvidia-smi query", smi)):
        print(f"{label:<34} {statistics.median(xs):>9.3f} {min(xs):>8.3f}")
    if a.json:
        a.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
