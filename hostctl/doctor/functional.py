"""Functional tests the full doctor level runs but other parts of hostctl own.

The P2P functional all-reduce (child process, hard timeout, control run, value check) and the
pinned host<->device bandwidth measurement belong to the GPU settings work (`provision --only
gpu`). That code registers its functions here; until it does, the full-level checks say
"skip" with that reason instead of pretending to have measured anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from hostctl.facts.model import HostFacts, P2PVerdict
from hostctl.plan.model import Plan


@dataclass(frozen=True)
class Bandwidth:
    """One GPU's pinned copy bandwidth against its link's capability."""

    index: int
    h2d_gbps: float
    d2h_gbps: float
    link_gbps: float  # what the current PCIe generation and width carry, raw


# (facts, plan or None) -> the verdict of a functional all-reduce over the serving GPUs, measured now.
P2PFunctional = Callable[[HostFacts, "Plan | None"], P2PVerdict]
# (facts) -> bandwidth per GPU, measured now.
PcieBandwidth = Callable[[HostFacts], list[Bandwidth]]

_p2p: P2PFunctional | None = None
_bandwidth: PcieBandwidth | None = None

NOT_PROVIDED = ("is not part of this hostctl build yet (the GPU settings work provides it through "
                "hostctl.doctor.functional.provide_{name})")


def provide_p2p_functional(fn: P2PFunctional | None) -> None:
    global _p2p
    _p2p = fn


def provide_pcie_bandwidth(fn: PcieBandwidth | None) -> None:
    global _bandwidth
    _bandwidth = fn


def p2p_functional() -> P2PFunctional | None:
    return _p2p


def pcie_bandwidth() -> PcieBandwidth | None:
    return _bandwidth
