"""The pinned host<->device copy-bandwidth measurement doctor's full level runs (a child process
with a hard timeout) and a PCIe link's raw capability. The judgement of the link, the copies,
the driver and the kernel module is doctor's alone (hostctl/doctor/checks/gpu.py): one
implementation of each rule.
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING

from hostctl.data import Data
from hostctl.facts.records import Gpu

if TYPE_CHECKING:
    from hostctl.gpu.harness import TorchPython

CHILD_COPYBW = os.path.join(os.path.dirname(__file__), "child_copybw.py")

# Raw data rate per lane in GB/s after line encoding: Gen1/2 8b/10b, Gen3-5 128b/130b, Gen6 FLIT.
LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
# A healthy link moves pinned copies at ~88% of its raw rate: the H200 test machine's Gen5 x16
# measured 55.4 GB/s host->device and 55.3 device->host of 63.0 (benchmarks/results/gpu_link-h200.txt).
# Below 60% the link trained down (Gen4 x16 is 50% of Gen5's rate) or the copy crosses the socket.
COPY_FRACTION_WARN = 0.6


def link_capability_gbps(gen: int | None, width: int | None) -> float | None:
    """One direction's raw bandwidth of a PCIe link in GB/s (Gen5 x16: 63.0)."""
    if not gen or not width or gen not in LANE_GBPS:
        return None
    return round(LANE_GBPS[gen] * width, 1)


class CopyBandwidth(Data):
    gpu_index: int
    h2d_gbps: float | None = None
    d2h_gbps: float | None = None
    link_under_load: tuple[int, int] | None = None  # (gen, width) seen while copying
    bytes: int = 0
    error: str | None = None
    python: str | None = None


def measure_copy_bandwidth(gpu: Gpu, *, mib: int = 256, iters: int = 10, timeout_s: float = 120.0,
                           torch_python: TorchPython | None = None) -> CopyBandwidth:
    """Pinned host->device and device->host copies on one GPU, in a child process."""
    from hostctl.gpu.harness import find_torch_python, run_group  # the child-process harness: only when measuring

    tp = torch_python or find_torch_python()
    result = CopyBandwidth(gpu_index=gpu.index, python=tp.python)
    if tp.python is None:
        result.error = tp.why
        return result
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=gpu.uuid, PYTHONUNBUFFERED="1")
    argv = [tp.python, CHILD_COPYBW, "--device", "0", "--nvml-index", str(gpu.index), "--mib", str(mib),
            "--iters", str(iters)]
    group = run_group([argv], env=env, timeout_s=timeout_s)
    report = None
    for line in reversed(group.stdouts[0].strip().splitlines()):
        try:
            report = json.loads(line)
            break
        except json.JSONDecodeError:
            continue
    if group.timed_out:
        result.error = f"the copy did not finish within {timeout_s:g} s (killed)"
    elif not isinstance(report, dict):
        tail = " | ".join(group.stderrs[0].strip().splitlines()[-3:])
        result.error = f"the child exited {group.returncodes[0]} without a result: {tail}"
    elif report.get("error"):
        result.error = report["error"]
    else:
        result.h2d_gbps = round(report["h2d_gbps"], 2)
        result.d2h_gbps = round(report["d2h_gbps"], 2)
        result.bytes = report.get("bytes", 0)
        seen = report.get("link_under_load") or {}
        if seen.get("gen") and seen.get("width"):
            result.link_under_load = (seen["gen"], seen["width"])
    return result
