"""The P2P ladder: from what the hardware claims to what it does, each rung reported.

  1. topology   - where each GPU pair meets (NVLink, PIX, PXB, PHB, NODE, SYS), from NVML
  2. driver     - the driver's P2P read/write status per pair (a capability, not proof)
  3. iommu      - whether DMA between devices is translated (off, passthrough, translated)
  4. acs        - whether the PCIe bridges between the GPUs redirect peer requests (lspci)
  5. functional - an all-reduce in child processes with a hard timeout, as configured and with
                  NCCL_P2P_DISABLE=1 as a control, the sums checked -> the verdict

The verdict is stored (state_dir()/p2p.json) with the driver, kernel command line and GPUs it
was measured under; plan/nccl.py turns P2P on only with a fresh "ok". Report 001's GPUs (docs/field-reports.md)
passed rungs 1-2 and deadlocked in the first collective until IOMMU was turned off: only rung
5 tells. Any recommendation to turn the IOMMU off states what that costs.
"""

from __future__ import annotations

import itertools
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import Field

from hostctl.data import Data
from hostctl import paths
from hostctl.safefs import write_file
from hostctl.facts.acs import PCI_DEVICES, probe_acs
from hostctl.facts.records import TOPOLOGY_ORDER, AcsFacts, Gpu, HostFacts, P2PVerdict
from hostctl.facts.state import P2P_FILE
from hostctl.gpu import acs as acs_mod
from hostctl.gpu.harness import Fault, FunctionalCheck, TorchPython, find_torch_python, functional_check
from hostctl.plan.nccl import IOMMU_COST, NCCL_DEFAULT_P2P_REACH, verdict_stale

Status = Literal["ok", "warn", "fail", "unknown", "skip"]
TOPOLOGY_WORDS = {
    "NVLINK": "NVLink",
    "PIX": "one PCIe switch",
    "PXB": "several PCIe switches",
    "PHB": "the CPU's host bridge",
    "NODE": "host bridges of one NUMA node",
    "SYS": "the inter-socket link",
}
DEFAULT_TIMEOUT_S = 120.0


class Rung(Data):
    name: str
    status: Status
    summary: str
    evidence: list[str] = Field(default_factory=list)
    fix: str | None = None

    def to_dict(self) -> dict:
        return {"name": self.name, "status": self.status, "summary": self.summary, "evidence": self.evidence,
                "fix": self.fix}


class P2PLadder(Data):
    gpus: list[str]  # "index:uuid" in rank order
    rungs: list[Rung] = Field(default_factory=list)
    functional: FunctionalCheck | None = None
    verdict: P2PVerdict | None = None  # a fresh verdict (measured now, or the stored one that still applies)
    stored_at: str | None = None  # the file the verdict was written to, when written now
    recommendations: list[str] = Field(default_factory=list)

    def rung(self, name: str) -> Rung | None:
        return next((r for r in self.rungs if r.name == name), None)

    def to_dict(self) -> dict:
        return {"gpus": self.gpus, "rungs": [r.to_dict() for r in self.rungs],
                "functional": self.functional.to_dict() if self.functional else None,
                "verdict": self.verdict.model_dump() if self.verdict else None, "stored_at": self.stored_at,
                "recommendations": self.recommendations}


def _pairs(gpus: list[Gpu]):
    return list(itertools.combinations(gpus, 2))


def worst_topology(facts: HostFacts, gpus: list[Gpu]) -> str | None:
    worst = None
    for a, b in _pairs(gpus):
        pair = facts.gpus.pair(a.index, b.index)
        level = pair.topology if pair else None
        if level is None:
            return None
        if worst is None or TOPOLOGY_ORDER.index(level) > TOPOLOGY_ORDER.index(worst):
            worst = level
    return worst


def configured_env(facts: HostFacts, gpus: list[Gpu]) -> dict[str, str]:
    """The NCCL settings the runtime would get with P2P on: NCCL stops at PXB by itself, so at
    PHB and beyond the level must be raised or the "P2P" run would quietly use host memory."""
    env = {"NCCL_P2P_DISABLE": "0"}
    worst = worst_topology(facts, gpus)
    if worst and worst != "NVLINK" and TOPOLOGY_ORDER.index(worst) > TOPOLOGY_ORDER.index(NCCL_DEFAULT_P2P_REACH):
        env["NCCL_P2P_LEVEL"] = worst
    return env


# ---------------------------------------------------------------- rungs 1-4 (read only)


def topology_rung(facts: HostFacts, gpus: list[Gpu]) -> Rung:
    evidence, unknown = [], []
    for a, b in _pairs(gpus):
        pair = facts.gpus.pair(a.index, b.index)
        if pair is None or pair.topology is None:
            unknown.append(f"{a.index}<->{b.index}")
            evidence.append(f"GPU {a.index}<->{b.index}: NVML could not tell")
        else:
            evidence.append(f"GPU {a.index}<->{b.index}: {pair.topology} ({TOPOLOGY_WORDS.get(pair.topology, '?')})")
    if unknown:
        return Rung(name="topology", status="unknown", summary="topology unknown for GPU pair(s) " + ", ".join(unknown), evidence=evidence)
    worst = worst_topology(facts, gpus)
    summary = f"worst path {worst} ({TOPOLOGY_WORDS.get(worst, '?')})"
    if worst and worst != "NVLINK" and TOPOLOGY_ORDER.index(worst) > TOPOLOGY_ORDER.index(NCCL_DEFAULT_P2P_REACH):
        summary += f"; NCCL uses P2P that far only with NCCL_P2P_LEVEL={worst}"
    return Rung(name="topology", status="ok", summary=summary, evidence=evidence)


def driver_rung(facts: HostFacts, gpus: list[Gpu]) -> Rung:
    evidence, refused = [], []
    for a, b in _pairs(gpus):
        pair = facts.gpus.pair(a.index, b.index)
        read = pair.p2p_read if pair else None
        write = pair.p2p_write if pair else None
        evidence.append(f"GPU {a.index}<->{b.index}: read {read or 'unknown'}, write {write or 'unknown'}")
        if read != "ok" or write != "ok":
            refused.append(f"{a.index}<->{b.index}")
    if refused:
        rung = Rung(name="driver", status="fail", summary="the driver refuses P2P for GPU pair(s) " + ", ".join(refused)
                    + ": NCCL goes through host memory", evidence=evidence)
        if facts.kernel.virtualization:
            rung.evidence.append(f"read inside a VM ({facts.kernel.virtualization}): P2P status may describe the "
                                 "hypervisor, not the hardware")
        if facts.iommu.enabled:
            rung.fix = ("with the IOMMU translating DMA the driver often refuses P2P on PCIe-only hosts; turning it off "
                        "may enable P2P - at a cost: " + IOMMU_COST)
        return rung
    return Rung(name="driver", status="ok", summary="the driver reports P2P read and write for every pair (a capability, not proof)",
                evidence=evidence)


def iommu_rung(facts: HostFacts) -> Rung:
    io = facts.iommu
    evidence = [f"/sys/class/iommu: {', '.join(io.class_entries) or 'empty'}",
                f"IOMMU groups: {io.group_count}",
                f"default domain type: {io.default_domain_type or 'unknown'}"]
    if io.cmdline_flags:
        evidence.append("kernel command line: " + " ".join(f"{k}={v}" if v else k for k, v in io.cmdline_flags.items()))
    if not io.enabled:
        return Rung(name="iommu", status="ok", summary="IOMMU off: device DMA is not translated", evidence=evidence)
    if io.default_domain_type == "identity":
        return Rung(name="iommu", status="ok", summary="IOMMU on in passthrough (identity): device DMA is not translated by default",
                    evidence=evidence)
    return Rung(name="iommu", status="warn",
                summary=f"IOMMU on and translating DMA ({io.default_domain_type or 'domain type unknown'}): peer traffic that "
                "ACS sends upstream passes through it - the setting under which two PRO 6000s behind one host bridge deadlocked (docs/field-reports.md, 001)",
                evidence=evidence, fix="let the functional check decide; if it fails, " + IOMMU_COST)


def acs_rung(acs: AcsFacts, gpus: list[Gpu]) -> Rung:
    """The ACS rung from the facts (hostctl/facts/acs.py reads lspci and sysfs)."""
    if not acs.available:
        return Rung(name="acs", status="unknown", summary=acs.reason or "cannot read ACS", fix="install pciutils and run as root")
    reading = acs_mod.judge_paths(acs, gpus)
    if reading.status == "warn":
        return Rung(name="acs", status="warn", summary=reading.summary, evidence=reading.evidence,
                    fix="the functional check decides; firmware options for ACS/IOMMU change this - " + IOMMU_COST)
    if reading.status == "unknown":
        return Rung(name="acs", status="unknown", summary=reading.summary, evidence=reading.evidence,
                    fix="run as root (lspci reads ACS from the extended config space)")
    return Rung(name="acs", status="ok", summary=reading.summary, evidence=reading.evidence)


# ---------------------------------------------------------------- the stored verdict


def verdict_applies(verdict: P2PVerdict | None, facts: HostFacts, uuids: list[str]) -> bool:
    """A stored verdict still describes this host: same driver, kernel command line and GPUs."""
    return verdict is not None and not verdict_stale(verdict, facts, uuids)


def store_verdict(verdict: P2PVerdict, state_dir: Path | None = None) -> Path:
    """Write state_dir()/p2p.json atomically."""
    return write_file((state_dir or paths.state_dir()) / P2P_FILE, json.dumps(verdict.model_dump(), indent=2) + "\n")


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


# ---------------------------------------------------------------- the whole ladder


def run_ladder(
    facts: HostFacts,
    gpus: list[Gpu],
    *,
    measure: bool = True,
    dry_run: bool = False,
    store: bool = True,
    recheck: bool = False,
    lspci: tuple[str | None, str] | None = None,
    pci_root: Path = PCI_DEVICES,
    torch_python: TorchPython | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    backend: str = "nccl",
    device: str = "cuda",
    size_bytes: int = 64 * 2**20,
    iters: int = 20,
    ports: tuple[int, int] | None = None,
    faults: dict[str, Fault] | None = None,
    state_dir: Path | None = None,
) -> P2PLadder:
    """Every rung for these GPUs (rank order). measure=False stops before the functional check
    (doctor's quick level); dry_run says what the check would run; a stored verdict measured under
    the same driver, command line and GPUs is reused unless recheck."""
    gpus = list(gpus)
    ladder = P2PLadder(gpus=[f"{g.index}:{g.uuid}" for g in gpus])
    uuids = [g.uuid for g in gpus]
    if len(gpus) < 2:
        ladder.rungs.append(Rung(name="functional", status="skip", summary=f"not applicable: {len(gpus)} GPU, no peer to talk to"))
        ladder.verdict = P2PVerdict(verdict="not_applicable", measured_at=_now(),
                                    driver_version=facts.gpus.driver_version, kernel_cmdline=facts.kernel.cmdline,
                                    gpu_uuids=uuids, detail=f"{len(gpus)} GPU: no collectives run")
        if measure and store and not dry_run:
            ladder.stored_at = str(store_verdict(ladder.verdict, state_dir))
        return ladder

    ladder.rungs.append(topology_rung(facts, gpus))
    driver = driver_rung(facts, gpus)
    ladder.rungs.append(driver)
    ladder.rungs.append(iommu_rung(facts))
    # the facts' ACS reading when they carry one; else (an older snapshot, or a test's lspci text) read now
    acs = facts.acs if lspci is None and facts.acs is not None else \
        probe_acs([g.pci_bus_id for g in gpus], lspci=lspci, pci_root=pci_root)
    ladder.rungs.append(acs_rung(acs, gpus))
    if not measure:
        return ladder
    if driver.status == "fail":
        ladder.rungs.append(Rung(name="functional", status="skip", summary="not run: the driver refuses P2P, so NCCL cannot use it and "
                                 "the plan keeps it off (NCCL_P2P_DISABLE=1)", fix=driver.fix))
        if driver.fix:
            ladder.recommendations.append(driver.fix)
        return ladder
    stored = facts.state.p2p
    if not recheck and verdict_applies(stored, facts, uuids) and stored.verdict != "not_applicable":
        ladder.verdict = stored
        ladder.rungs.append(Rung(name="functional", status="ok" if stored.verdict == "ok" else "fail",
                                 summary=f"stored verdict {stored.verdict} from {stored.measured_at} still applies (same driver, "
                                 "kernel command line and GPUs); not measured again", evidence=[stored.detail or ""]))
        _recommend(ladder, facts)
        return ladder
    env = configured_env(facts, gpus)
    if dry_run:
        ladder.rungs.append(Rung(name="functional", status="skip",
                                 summary=f"would run an all-reduce on GPUs {', '.join(str(g.index) for g in gpus)} with "
                                 f"{' '.join(f'{k}={v}' for k, v in env.items())}, then with NCCL_P2P_DISABLE=1, each "
                                 f"killed after {timeout_s:g} s, and write {(state_dir or paths.state_dir()) / P2P_FILE}"))
        return ladder
    tp = torch_python or find_torch_python()
    if tp.python is None:
        ladder.rungs.append(Rung(name="functional", status="unknown", summary=f"cannot run the functional check: {tp.why}",
                                 fix="install PyTorch for the host's Python, or set HOSTCTL_TORCH_PYTHON, then re-run "
                                 "`hostctl provision --only gpu`; P2P stays off until then"))
        return ladder
    base_env = {"CUDA_VISIBLE_DEVICES": ",".join(uuids)} if device == "cuda" else {}
    check = functional_check(len(gpus), python=tp.python, configured_env=env, timeout_s=timeout_s, backend=backend,
                             device=device, size_bytes=size_bytes, iters=iters, ports=ports, base_env=base_env,
                             faults=faults)
    ladder.functional = check
    ladder.verdict = P2PVerdict(
        verdict=check.verdict, measured_at=_now(), driver_version=facts.gpus.driver_version,
        kernel_cmdline=facts.kernel.cmdline,
        busbw_gbps=check.configured.busbw_gbps if check.configured else None,
        control_busbw_gbps=check.control.busbw_gbps if check.control else None,
        gpu_uuids=uuids, detail=check.reason,
    )
    status: Status = "ok" if check.verdict == "ok" else "fail"
    evidence = [f"{r.label} ({' '.join(f'{k}={v}' for k, v in r.env.items())}): {r.outcome} in {r.seconds:g} s - {r.detail}"
                for r in (check.configured, check.control) if r]
    evidence.append(f"python: {tp.python} ({tp.why})")
    ladder.rungs.append(Rung(name="functional", status=status, summary=f"verdict {check.verdict}: {check.reason}", evidence=evidence))
    if store:
        ladder.stored_at = str(store_verdict(ladder.verdict, state_dir))
    _recommend(ladder, facts)
    return ladder


def recommendations(verdict: P2PVerdict | None, facts: HostFacts) -> list[str]:
    """What to do about a verdict (empty for ok and not applicable)."""
    ladder = P2PLadder(gpus=[], verdict=verdict)
    _recommend(ladder, facts)
    return ladder.recommendations


def _recommend(ladder: P2PLadder, facts: HostFacts) -> None:
    v = ladder.verdict
    if v is None or v.verdict in ("ok", "not_applicable"):
        return
    if v.verdict == "inconclusive":
        ladder.recommendations.append("collectives fail with and without P2P: check the driver (nvidia-smi), the "
                                      "PyTorch/NCCL install and dmesg for Xid errors before serving on several GPUs")
        return
    off = "NCCL_P2P_DISABLE=1 with --disable-custom-all-reduce (the plan does this by itself)"
    bw = f" (measured without P2P: {v.control_busbw_gbps:g} GB/s bus bandwidth)" if v.control_busbw_gbps else ""
    ladder.recommendations.append(f"serve with P2P off: {off}{bw}")
    if facts.iommu.enabled and facts.iommu.default_domain_type != "identity":
        ladder.recommendations.append("or restore P2P as the two-GPU desktop of docs/field-reports.md (001) did, by turning the IOMMU off in firmware "
                                      "(or on the kernel command line) and re-running `hostctl provision --only gpu` - "
                                      "at a cost: " + IOMMU_COST)
