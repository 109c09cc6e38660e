"""NCCL plan: P2P on or off, the P2P level, and custom all-reduce, from the P2P facts.

The driver's P2P status is a capability, not proof: report 001's GPUs (docs/field-reports.md) reported P2P
and still deadlocked in the first collective until IOMMU was turned off. So P2P is turned
on only with a stored functional verdict measured under the current driver and kernel
command line; otherwise it stays off and the plan says how to measure it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostctl.facts.records import TOPOLOGY_ORDER, HostFacts, P2PVerdict
from hostctl.plan import codes

if TYPE_CHECKING:  # annotations only: doctor's checks import these modules without a profile
    from hostctl.plan.records import NcclPlan, PlacementPlan
    from hostctl.config import Config

# NCCL uses P2P by itself only up to PXB (a shared PCIe switch); PHB and beyond need NCCL_P2P_LEVEL.
NCCL_DEFAULT_P2P_REACH = "PXB"
IOMMU_COST = (
    "turning IOMMU off (firmware, or intel_iommu=off / amd_iommu=off) removes DMA isolation between "
    "devices and breaks VFIO device passthrough to VMs; iommu=pt keeps passthrough for most devices"
)


def verdict_stale(verdict: P2PVerdict, facts: HostFacts, uuids: list[str] | None = None) -> list[str]:
    """Why a stored functional P2P verdict no longer describes this host (empty: it still does).
    It holds only for the driver and kernel command line (IOMMU flags) it was measured under, and,
    given the serving GPUs' UUIDs in rank order, for the GPUs it was measured on."""
    why = []
    if verdict.driver_version != facts.gpus.driver_version:
        why.append(f"driver {verdict.driver_version} (now {facts.gpus.driver_version})")
    if verdict.kernel_cmdline != facts.kernel.cmdline:
        why.append("another kernel command line")
    if uuids is not None and verdict.gpu_uuids and verdict.gpu_uuids != uuids:
        why.append("other GPUs than the ones that serve now")
    return why


def _worse(a: str | None, b: str | None) -> str | None:
    if a is None or b is None:
        return a or b
    return max(a, b, key=TOPOLOGY_ORDER.index)


def plan_nccl(config: Config, facts: HostFacts, placement: PlacementPlan) -> NcclPlan:
    from hostctl.plan.records import NcclPlan  # here: doctor without a profile imports this module

    plan = NcclPlan()
    ranks = placement.gpus
    if len(ranks) < 2:
        plan.decide("NCCL", "not used", "fewer than two GPUs serve: no collectives run")
        return plan
    plan.applies = True

    pairs = []
    for i, a in enumerate(ranks):
        for b in ranks[i + 1:]:
            pair = facts.gpus.pair(a.index, b.index)
            pairs.append((a.index, b.index, pair))
    all_nvlink = all(p is not None and p.nvlink for _, _, p in pairs)
    worst = None
    for _, _, p in pairs:
        worst = _worse(worst, p.topology if p else None)

    plan.custom_all_reduce = all_nvlink
    if all_nvlink:
        plan.decide("custom all-reduce", "on", "every GPU pair has NVLink")
    else:
        plan.serve_flags.append("--disable-custom-all-reduce")
        plan.env["VLLM_ENABLE_PCIE_ALLREDUCE"] = "0"
        plan.decide("custom all-reduce", "off",
                    f"GPUs talk over PCIe only (worst path {worst or 'unknown'}): vLLM's custom all-reduce "
                    "is unreliable there; NCCL does the collectives")

    refused = [
        f"GPU {a}<->{b}: read {p.p2p_read if p else 'unknown'}, write {p.p2p_write if p else 'unknown'}"
        for a, b, p in pairs
        if p is None or p.p2p_read != "ok" or p.p2p_write != "ok"
    ]
    verdict = facts.state.p2p
    stale = verdict_stale(verdict, facts, [g.uuid for g in ranks]) if verdict is not None else []
    if stale:
        plan.decide("stored P2P verdict", "stale",
                    f"measured under {'; '.join(stale)}: it no longer describes this host")
        verdict = None
    in_vm = facts.kernel.virtualization

    if refused:
        plan.p2p = False
        plan.decide("NCCL P2P", "off", "the driver refuses P2P: " + "; ".join(refused))
        if facts.iommu.enabled:
            plan.problem(codes.NCCL_P2P_REFUSED_IOMMU, "warn", "P2P is refused while the IOMMU is on; NCCL falls back to host memory (slower)",
                         fix="if this host needs no DMA isolation: " + IOMMU_COST)
        if in_vm:
            plan.problem(codes.NCCL_IN_VM, "warn", f"these readings come from inside a VM ({in_vm}): P2P and topology may not "
                         "describe the hardware", fix="read the facts on the host itself")
    elif verdict is None:
        plan.p2p = False
        plan.decide("NCCL P2P", "off",
                    "the driver reports P2P, but that is capability, not function, and no functional check "
                    "has passed on this driver and kernel command line")
        plan.problem(codes.NCCL_P2P_UNVERIFIED, "warn", "P2P stays off until a functional all-reduce check passes",
                     fix="run `hostctl provision --only gpu` to measure P2P (a hang is killed, not waited on)")
    elif verdict.verdict == "ok":
        plan.p2p = True
        bw = f" ({verdict.busbw_gbps:g} GB/s vs {verdict.control_busbw_gbps:g} without P2P)" if (
            verdict.busbw_gbps and verdict.control_busbw_gbps) else ""
        plan.decide("NCCL P2P", "on", f"the driver reports P2P and the functional check passed{bw}")
    else:
        plan.p2p = False
        plan.decide("NCCL P2P", "off", f"the functional check said {verdict.verdict.replace('_', ' ')}")
        plan.problem(codes.NCCL_P2P_FAILED, "warn", f"P2P failed its functional check ({verdict.verdict}); NCCL uses host memory",
                     fix=("with IOMMU on, this is the deadlock two PRO 6000s behind one host bridge hit (docs/field-reports.md, 001): " + IOMMU_COST)
                     if facts.iommu.enabled else "re-run `hostctl provision --only gpu` after a driver update")

    plan.env["NCCL_P2P_DISABLE"] = "0" if plan.p2p else "1"
    if plan.p2p and worst and TOPOLOGY_ORDER.index(worst) > TOPOLOGY_ORDER.index(NCCL_DEFAULT_P2P_REACH):
        plan.p2p_level = worst
        plan.env["NCCL_P2P_LEVEL"] = worst
        plan.decide("NCCL P2P level", worst,
                    f"the GPUs meet at {worst}; NCCL would stop at {NCCL_DEFAULT_P2P_REACH} and fall back to "
                    "shared memory (~10% slower)")
    return plan
