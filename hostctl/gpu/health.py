"""PCIe link and driver health, as small functions that doctor calls: each returns a Check (a
status, a one-line summary, the evidence and the fix). All are pure over facts except
measure_copy_bandwidth, which runs PyTorch in a child process.

  pcie_link_check(gpu, under_load=None)      current vs maximum link generation and width
  copy_bandwidth_check(gpu, bandwidth)       pinned host<->device copies vs the link's capability
  measure_copy_bandwidth(gpu, ...)           runs the copies (child process, hard timeout)
  driver_version_check(gpus)                 the driver, CUDA and NVML versions
  kernel_module_check(gpus)                  open vs proprietary kernel module
  persistence_check(gpus)                    persistence mode on every GPU
  driver_checks(gpus)                        the three above

GPUs train their links down when idle (a Gen5 card may show Gen1 at rest), so a generation
below the maximum is judged only from a reading taken under load; a narrower width is a
warning at any time.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from typing import Literal

from hostctl.facts.model import Gpu, GpuFacts
from hostctl.gpu.harness import TorchPython, find_torch_python, run_group

Status = Literal["ok", "warn", "fail", "unknown"]
CHILD_COPYBW = os.path.join(os.path.dirname(__file__), "child_copybw.py")

# Raw data rate per lane in GB/s after line encoding: Gen1/2 8b/10b, Gen3-5 128b/130b, Gen6 FLIT.
LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}
# Pinned copies typically reach 80-90% of the raw rate (TLP headers, flow control); below this
# fraction of the link's capability the copy path is worth a look.
COPY_FRACTION_WARN = 0.6


@dataclass
class Check:
    id: str
    status: Status
    summary: str
    evidence: list[str] = field(default_factory=list)
    fix: str | None = None
    values: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


def link_capability_gbps(gen: int | None, width: int | None) -> float | None:
    """One direction's raw bandwidth of a PCIe link in GB/s (Gen5 x16: 63.0)."""
    if not gen or not width or gen not in LANE_GBPS:
        return None
    return round(LANE_GBPS[gen] * width, 1)


def _gbps(gen: int | None, width: int | None) -> str:
    cap = link_capability_gbps(gen, width)
    return "?" if cap is None else f"{cap:g}"


def _gpu_label(gpu: Gpu) -> str:
    return f"GPU {gpu.index} ({gpu.pci_bus_id})"


def pcie_link_check(gpu: Gpu, *, under_load: tuple[int, int] | None = None) -> Check:
    """Current vs maximum link. under_load: (gen, width) read while the link was busy (from
    measure_copy_bandwidth); without it a lower generation is not judged."""
    link = gpu.pcie
    cid = f"gpu{gpu.index}.pcie_link"
    values = {"gen_current": link.gen_current, "gen_max": link.gen_max, "width_current": link.width_current,
              "width_max": link.width_max, "under_load": list(under_load) if under_load else None}
    if link.gen_max is None or link.width_max is None:
        return Check(cid, "unknown", f"{_gpu_label(gpu)}: NVML does not report the link's maximum", values=values)
    gen, width = under_load if under_load else (link.gen_current, link.width_current)
    when = "under load" if under_load else "now (possibly idle)"
    evidence = [f"{when}: Gen{gen} x{width}; maximum Gen{link.gen_max} x{link.width_max}",
                f"capability: {_gbps(link.gen_max, link.width_max)} GB/s per direction at the maximum"]
    if width is not None and width < link.width_max:
        return Check(cid, "warn", f"{_gpu_label(gpu)}: link degraded to x{width} of x{link.width_max} "
                     f"({_gbps(gen, width)} of {_gbps(link.gen_max, link.width_max)} GB/s)",
                     evidence, fix="expected where the board splits x16 into x8/x8 for two cards; otherwise reseat "
                     "the card or move it to a slot wired for the full width (M.2 and second slots often share "
                     "lanes)", values=values)
    if gen is not None and gen < link.gen_max:
        if not under_load:
            return Check(cid, "unknown", f"{_gpu_label(gpu)}: Gen{gen} of Gen{link.gen_max} at rest - GPUs lower "
                         "the link generation when idle; judge it under load (doctor --level full copies data)",
                         evidence, values=values)
        return Check(cid, "warn", f"{_gpu_label(gpu)}: link at Gen{gen} of Gen{link.gen_max} under load "
                     f"({_gbps(gen, width)} of {_gbps(link.gen_max, link.width_max)} GB/s)",
                     evidence, fix="check the slot's PCIe generation setting in firmware, risers and retimers",
                     values=values)
    return Check(cid, "ok", f"{_gpu_label(gpu)}: Gen{gen} x{width}, the link's maximum" + ("" if under_load else
                 " (read at rest)"), evidence, values=values)


@dataclass
class CopyBandwidth:
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


def copy_bandwidth_check(gpu: Gpu, bw: CopyBandwidth) -> Check:
    """Measured pinned copy bandwidth as a fraction of the link's capability at its maximum."""
    cid = f"gpu{gpu.index}.copy_bandwidth"
    if bw.error:
        return Check(cid, "unknown", f"{_gpu_label(gpu)}: copy bandwidth not measured: {bw.error}")
    cap = link_capability_gbps(gpu.pcie.gen_max, gpu.pcie.width_max)
    values = {"h2d_gbps": bw.h2d_gbps, "d2h_gbps": bw.d2h_gbps, "capability_gbps": cap}
    evidence = [f"pinned host->device {bw.h2d_gbps:g} GB/s, device->host {bw.d2h_gbps:g} GB/s "
                f"({bw.bytes // 2**20} MiB copies)"]
    if cap is None:
        return Check(cid, "unknown", f"{_gpu_label(gpu)}: measured, but the link's maximum is unknown", evidence,
                     values=values)
    h2d, d2h = bw.h2d_gbps / cap, bw.d2h_gbps / cap
    values.update(h2d_fraction=round(h2d, 3), d2h_fraction=round(d2h, 3))
    evidence.append(f"link capability Gen{gpu.pcie.gen_max} x{gpu.pcie.width_max}: {cap:g} GB/s per direction; "
                    f"host->device {h2d:.0%}, device->host {d2h:.0%}")
    if bw.link_under_load:
        evidence.append(f"link under load: Gen{bw.link_under_load[0]} x{bw.link_under_load[1]}")
    summary = (f"{_gpu_label(gpu)}: host->device {bw.h2d_gbps:g} GB/s ({h2d:.0%} of {cap:g}), "
               f"device->host {bw.d2h_gbps:g} GB/s ({d2h:.0%})")
    if min(h2d, d2h) < COPY_FRACTION_WARN:
        return Check(cid, "warn", summary + f": below {COPY_FRACTION_WARN:.0%} of the link's capability", evidence,
                     fix="check the link under load (pcie_link), the CPU socket the copy ran on (NUMA), "
                     "and IOMMU translation", values=values)
    return Check(cid, "ok", summary, evidence, values=values)


# ---------------------------------------------------------------- driver


def driver_version_check(gpus: GpuFacts) -> Check:
    if not gpus.available or not gpus.driver_version:
        return Check("driver.version", "unknown" if not gpus.available else "warn",
                     f"no NVIDIA driver: {gpus.reason}" if not gpus.available else "NVML reports no driver version")
    return Check("driver.version", "ok", f"driver {gpus.driver_version} (CUDA {gpus.cuda_driver_version or '?'})",
                 [f"NVML {gpus.nvml_version}"],
                 values={"driver": gpus.driver_version, "cuda": gpus.cuda_driver_version, "nvml": gpus.nvml_version})


def kernel_module_check(gpus: GpuFacts) -> Check:
    if not gpus.available:
        return Check("driver.kernel_module", "unknown", "no NVIDIA driver loaded")
    flavour = gpus.kernel_module
    evidence = ["/proc/driver/nvidia/version: " + ("NVIDIA UNIX Open Kernel Module" if flavour == "open"
                                                   else "NVIDIA UNIX Kernel Module" if flavour else "unreadable")]
    if flavour is None:
        return Check("driver.kernel_module", "unknown", "cannot tell the open from the proprietary kernel module",
                     evidence)
    blackwell = [g for g in gpus.devices if "blackwell" in g.name.lower()]
    if flavour == "proprietary" and blackwell:
        return Check("driver.kernel_module", "fail",
                     f"proprietary kernel module with Blackwell GPU(s) {', '.join(str(g.index) for g in blackwell)}: "
                     "Blackwell needs the open kernel module", evidence,
                     fix="install the driver's open kernel module flavour (e.g. nvidia-open / nvidia-driver-*-open)",
                     values={"module": flavour})
    return Check("driver.kernel_module", "ok", f"{flavour} kernel module", evidence, values={"module": flavour})


def persistence_check(gpus: GpuFacts) -> Check:
    if not gpus.available:
        return Check("driver.persistence", "unknown", "no NVIDIA driver loaded")
    off = [g.index for g in gpus.devices if g.persistence_mode is False]
    unknown = [g.index for g in gpus.devices if g.persistence_mode is None]
    evidence = [f"GPU {g.index}: persistence {'on' if g.persistence_mode else 'off' if g.persistence_mode is False else '?'}"
                for g in gpus.devices]
    if off:
        return Check("driver.persistence", "warn", f"persistence mode off on GPU(s) {', '.join(map(str, off))}: the "
                     "driver tears the GPU down between clients (slow starts) and may drop settings such as power "
                     "limits", evidence, fix="enable nvidia-persistenced (systemctl enable --now nvidia-persistenced)",
                     values={"off": off})
    if unknown:
        return Check("driver.persistence", "unknown", "persistence mode unreadable on GPU(s) "
                     + ", ".join(map(str, unknown)), evidence)
    return Check("driver.persistence", "ok", "persistence mode on for every GPU", evidence)


def driver_checks(gpus: GpuFacts) -> list[Check]:
    return [driver_version_check(gpus), kernel_module_check(gpus), persistence_check(gpus)]
