"""Judging PCIe Access Control Services (ACS) on the bridges between GPUs, from the facts
(hostctl/facts/acs.py reads sysfs and `lspci -vvv`): which bridges a P2P transfer crosses and
whether ACS redirects peer requests upstream there.

With ACS request/completion redirect on, a peer write from one GPU to the other does not turn
around at the bridge: it goes up to the root complex, through the IOMMU when one translates
DMA - where a P2P all-reduce can hang (README "GPU host settings", the P2P ladder). Pure
functions: nothing here reads the host.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from hostctl.data import Data
from hostctl.facts.records import AcsFacts, Gpu, PciBridgeAcs


def bridges_between(chain_a: list[str], chain_b: list[str]) -> list[str]:
    """The bridges a peer transfer between the two endpoints crosses: every bridge below the
    point where their paths meet, and the bridge they meet at (a switch port) if there is one."""
    common = 0
    for x, y in zip(chain_a[:-1], chain_b[:-1]):
        if x != y:
            break
        common += 1
    meet = chain_a[common - 1: common] if common else []
    below = chain_a[common:-1] + chain_b[common:-1]
    return sorted(dict.fromkeys(meet + below))


class AcsReading(Data):
    status: str  # ok | warn | unknown
    summary: str
    evidence: list[str] = Field(default_factory=list)
    redirecting: list[str] = Field(default_factory=list)  # bridges with a redirect flag on


def judge_acs(bridges: list[str], devices: dict[str, PciBridgeAcs]) -> AcsReading:
    """Whether the given bridges redirect peer traffic, from the devices lspci listed."""
    if not bridges:
        return AcsReading(status="unknown", summary="no PCI path between the GPUs could be read from sysfs")
    evidence, redirecting, unreadable, missing = [], [], [], []
    for bdf in bridges:
        dev = devices.get(bdf)
        if dev is None:
            missing.append(bdf)
            continue
        if dev.acs_ctl is None:
            if dev.access_denied:
                unreadable.append(bdf)
                evidence.append(f"{bdf}: capabilities <access denied>")
            else:
                evidence.append(f"{bdf} ({dev.description}): no ACS capability")
            continue
        evidence.append(f"{bdf} ({dev.description}): ACSCtl {dev.ctl_text()}")
        if dev.redirects:
            redirecting.append(bdf)
    if missing:
        evidence.append("not in lspci output: " + ", ".join(missing))
    if redirecting:
        return AcsReading(status="warn", summary=f"ACS redirects peer requests upstream on {', '.join(redirecting)}: P2P traffic goes "
                          "through the root complex (and the IOMMU, when it translates DMA)", evidence=evidence, redirecting=redirecting)
    if unreadable:
        return AcsReading(status="unknown", summary="lspci cannot read the ACS capability of " + ", ".join(unreadable)
                          + " (extended config space needs root)", evidence=evidence)
    if missing and len(missing) == len(bridges):
        return AcsReading(status="unknown", summary="lspci does not list the bridges between the GPUs", evidence=evidence)
    return AcsReading(status="ok", summary="no bridge between the GPUs redirects peer requests", evidence=evidence)


def judge_paths(acs: AcsFacts, gpus: Sequence[Gpu]) -> AcsReading:
    """The ACS verdict over every pair of these GPUs: warn when any bridge between two of them
    redirects, unknown when some path could not be read, ok otherwise."""
    if not acs.available:
        return AcsReading(status="unknown", summary=acs.reason or "ACS was not read")
    devices = {d.bdf: d for d in acs.devices}
    evidence: list[str] = []
    statuses: list[str] = []
    redirecting: list[str] = []
    gpus = list(gpus)
    for i, a in enumerate(gpus):
        for b in gpus[i + 1:]:
            ca, cb = acs.gpu_paths.get(a.pci_bus_id.lower()), acs.gpu_paths.get(b.pci_bus_id.lower())
            if ca is None or cb is None:
                evidence.append(f"GPU {a.index}<->{b.index}: no sysfs path for "
                                f"{a.pci_bus_id if ca is None else b.pci_bus_id}")
                statuses.append("unknown")
                continue
            bridges = bridges_between(ca, cb)
            reading = judge_acs(bridges, devices)
            evidence.append(f"GPU {a.index}<->{b.index} crosses {', '.join(bridges) or 'no bridge'}: {reading.summary}")
            evidence += [f"  {e}" for e in reading.evidence]
            statuses.append(reading.status)
            redirecting += [x for x in reading.redirecting if x not in redirecting]
    if redirecting:
        return AcsReading(status="warn", summary="ACS redirects peer requests upstream on " + ", ".join(redirecting)
                          + ": P2P goes through the root complex (and the IOMMU when it translates)", evidence=evidence, redirecting=redirecting)
    if "unknown" in statuses:
        return AcsReading(status="unknown", summary="ACS could not be read on every path between the GPUs", evidence=evidence)
    return AcsReading(status="ok", summary="no bridge between the GPUs redirects peer requests", evidence=evidence)
