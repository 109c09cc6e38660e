"""PCIe Access Control Services (ACS) on the bridges between GPUs: which bridges a P2P transfer
crosses (from sysfs) and whether ACS redirects peer requests upstream (from `lspci -vvv`).

With ACS request/completion redirect on, a peer write from one GPU to the other does not turn
around at the bridge: it goes up to the root complex, through the IOMMU when one translates
DMA. That is the path on which report 001's first all-reduce deadlocked (docs/field-reports.md). lspci shows the
ACS capability only to root (the extended config space); otherwise the answer is "unknown".
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from hostctl import runner

PCI_DEVICES = Path("/sys/bus/pci/devices")
# ACSCtl flags that send peer traffic upstream instead of straight across the bridge
REDIRECT_FLAGS = ("ReqRedir", "CmpltRedir", "EgressCtrl")

_BDF = re.compile(r"^(?:[0-9a-fA-F]{4,}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_HEADER = re.compile(r"^(?P<bdf>(?:[0-9a-fA-F]{4,}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<desc>.*)$")
_FLAG = re.compile(r"([A-Za-z][A-Za-z0-9_]*)([+-])")


def full_bdf(bdf: str) -> str:
    """01:00.0 -> 0000:01:00.0 (lspci leaves the domain out unless asked with -D)."""
    bdf = bdf.strip().lower()
    return bdf if bdf.count(":") == 2 else f"0000:{bdf}"


@dataclass
class PciAcs:
    bdf: str
    description: str
    bridge: bool
    access_denied: bool = False  # lspci could not read the extended capabilities (not root)
    acs_cap: dict[str, bool] | None = None  # None: no ACS capability listed
    acs_ctl: dict[str, bool] | None = None

    @property
    def redirects(self) -> list[str]:
        """The redirect flags enabled in ACSCtl."""
        return [f for f in REDIRECT_FLAGS if (self.acs_ctl or {}).get(f)]

    def ctl_text(self) -> str:
        return " ".join(f"{k}{'+' if v else '-'}" for k, v in (self.acs_ctl or {}).items())


def _flags(text: str) -> dict[str, bool]:
    return {m.group(1): m.group(2) == "+" for m in _FLAG.finditer(text)}


def parse_lspci(text: str) -> dict[str, PciAcs]:
    """Parse `lspci -vvv` (with or without -D) into {full bdf: PciAcs}. Tolerates lines wrapped
    inside a flag list (as when the output was copied from a narrow terminal)."""
    out: dict[str, PciAcs] = {}
    current: PciAcs | None = None
    pending: str | None = None  # "ACSCap" / "ACSCtl" while its flag list may continue
    for raw in text.splitlines():
        line = raw.rstrip()
        header = _HEADER.match(line) if line and not line[0].isspace() else None
        if header:
            desc = header.group("desc")
            current = PciAcs(bdf=full_bdf(header.group("bdf")), description=desc,
                             bridge=desc.startswith("PCI bridge"))
            out[current.bdf] = current
            pending = None
            continue
        if current is None:
            continue
        stripped = line.strip()
        if "<access denied>" in stripped:
            current.access_denied = True
        key, sep, rest = stripped.partition(":")
        if sep and key in ("ACSCap", "ACSCtl"):
            flags = _flags(rest)
            if key == "ACSCap":
                current.acs_cap = flags
            else:
                current.acs_ctl = flags
            pending = key
            continue
        if pending and stripped and ":" not in stripped and _flags(stripped):
            target = current.acs_cap if pending == "ACSCap" else current.acs_ctl
            target.update(_flags(stripped))  # a wrapped continuation of the flag list
            continue
        pending = None
    return out


def pci_chain(bdf: str, pci_root: Path = PCI_DEVICES) -> list[str] | None:
    """The PCI devices from the root complex down to bdf (bridges first, bdf last), read from the
    sysfs path /sys/devices/pci0000:00/0000:00:01.1/0000:01:00.0. None when sysfs lacks it."""
    try:
        real = Path(os.path.realpath(pci_root / bdf))
    except OSError:
        return None
    if not (pci_root / bdf).exists():
        return None
    chain = [part.lower() for part in real.parts if _BDF.match(part)]
    return chain if chain and chain[-1] == bdf.lower() else None


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


@dataclass
class AcsReading:
    status: str  # ok | warn | unknown
    summary: str
    evidence: list[str] = field(default_factory=list)
    redirecting: list[str] = field(default_factory=list)  # bridges with a redirect flag on


def read_lspci() -> tuple[str | None, str]:
    """(lspci -vvv -D output, why not) — the output is None when lspci cannot run."""
    res = runner.run(["lspci", "-vvv", "-D"], timeout=20)
    if not res.ok:
        return None, res.why()
    return res.stdout, ""


def judge_acs(bridges: list[str], devices: dict[str, PciAcs]) -> AcsReading:
    """Whether the given bridges redirect peer traffic, from parsed lspci output."""
    if not bridges:
        return AcsReading("unknown", "no PCI path between the GPUs could be read from sysfs")
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
        return AcsReading("warn", f"ACS redirects peer requests upstream on {', '.join(redirecting)}: P2P traffic goes "
                          "through the root complex (and the IOMMU, when it translates DMA)", evidence, redirecting)
    if unreadable:
        return AcsReading("unknown", "lspci cannot read the ACS capability of " + ", ".join(unreadable)
                          + " (extended config space needs root)", evidence)
    if missing and len(missing) == len(bridges):
        return AcsReading("unknown", "lspci does not list the bridges between the GPUs", evidence)
    return AcsReading("ok", "no bridge between the GPUs redirects peer requests", evidence)
