"""The functional tests doctor's full level runs now: a P2P all-reduce over the serving GPUs and
pinned host<->device copies, both through hostctl.gpu (child processes with hard timeouts).

Doctor only reads: a verdict measured here is reported, never stored; `provision --only gpu`
stores the one the plan uses.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import ConfigDict

from hostctl.data import Data
from hostctl.facts.records import HostFacts, P2PVerdict
from hostctl.plan.placement import serving_gpus

if TYPE_CHECKING:  # annotations only: doctor without a profile builds no plan, and the plan records cost ~10-14 ms to import
    from hostctl.plan.records import Plan


class Bandwidth(Data):
    """One GPU's pinned copy bandwidth against its link's capability."""

    model_config = ConfigDict(frozen=True)

    index: int
    h2d_gbps: float
    d2h_gbps: float
    link_gbps: float  # what the link's maximum generation and width carry, raw
    link_max: tuple[int, int]  # (generation, width) the link can run at
    link_under_load: tuple[int, int] | None = None  # (generation, width) NVML read while copying


def measure_p2p(facts: HostFacts, plan: Plan | None) -> tuple[P2PVerdict | None, str]:
    """(a verdict measured now, or None with the reason it could not be measured)."""
    from hostctl.gpu.p2p import run_ladder

    placed = plan if plan is not None and plan.placement.gpus else None  # no placement: every GPU
    ladder = run_ladder(facts, serving_gpus(facts, placed), measure=True, store=False, recheck=True)
    if ladder.verdict is not None:
        return ladder.verdict, ""
    rung = ladder.rung("functional")
    return None, rung.summary if rung else "the functional check did not run"


def measure_bandwidth(facts: HostFacts) -> tuple[list[Bandwidth], list[str]]:
    """(bandwidth per GPU that could be measured, why the others could not)."""
    from hostctl.gpu.health import link_capability_gbps, measure_copy_bandwidth

    results: list[Bandwidth] = []
    errors: list[str] = []
    for gpu in sorted(facts.gpus.devices, key=lambda g: g.index):
        bw = measure_copy_bandwidth(gpu)
        link = link_capability_gbps(gpu.pcie.gen_max, gpu.pcie.width_max)
        if bw.error or bw.h2d_gbps is None or bw.d2h_gbps is None or link is None:
            errors.append(f"GPU {gpu.index}: {bw.error or 'link generation/width unknown'}")
            continue
        results.append(Bandwidth(index=gpu.index, h2d_gbps=bw.h2d_gbps, d2h_gbps=bw.d2h_gbps, link_gbps=link, link_max=(gpu.pcie.gen_max, gpu.pcie.width_max),
                                 link_under_load=bw.link_under_load))
    return results, errors
