"""ACS facts: the PCI path of each GPU from the root complex (sysfs) and the Access Control
Services state of every device on those paths (`lspci -vvv -D`).

lspci shows the ACS capability only to root (it lives in the extended config space); as another
user every device reads `<access denied>`, which the facts keep, so the judgement (in
hostctl/gpu/acs.py) can say "unknown" instead of guessing. Parsing tolerates flag lists wrapped
over two lines, as text copied from a narrow terminal is.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from hostctl import runner
from hostctl.facts.records import AcsFacts, PciBridgeAcs

PCI_DEVICES = Path("/sys/bus/pci/devices")

_BDF = re.compile(r"^(?:[0-9a-fA-F]{4,}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7]$")
_HEADER = re.compile(r"^(?P<bdf>(?:[0-9a-fA-F]{4,}:)?[0-9a-fA-F]{2}:[0-9a-fA-F]{2}\.[0-7])\s+(?P<desc>.*)$")
_FLAG = re.compile(r"([A-Za-z][A-Za-z0-9_]*)([+-])")


def full_bdf(bdf: str) -> str:
    """01:00.0 -> 0000:01:00.0 (lspci leaves the domain out unless asked with -D)."""
    bdf = bdf.strip().lower()
    return bdf if bdf.count(":") == 2 else f"0000:{bdf}"


def _flags(text: str) -> dict[str, bool]:
    return {m.group(1): m.group(2) == "+" for m in _FLAG.finditer(text)}


def parse_lspci(text: str) -> dict[str, PciBridgeAcs]:
    """Parse `lspci -vvv` (with or without -D) into {full bdf: PciBridgeAcs}."""
    out: dict[str, PciBridgeAcs] = {}
    current: PciBridgeAcs | None = None
    pending: str | None = None  # "ACSCap" / "ACSCtl" while its flag list may continue
    for raw in text.splitlines():
        line = raw.rstrip()
        header = _HEADER.match(line) if line and not line[0].isspace() else None
        if header:
            desc = header.group("desc")
            current = PciBridgeAcs(bdf=full_bdf(header.group("bdf")), description=desc,
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
            if key == "ACSCap":
                current.acs_cap = _flags(rest)
            else:
                current.acs_ctl = _flags(rest)
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
    if not (pci_root / bdf).exists():
        return None
    try:
        real = Path(os.path.realpath(pci_root / bdf))
    except OSError:
        return None
    chain = [part.lower() for part in real.parts if _BDF.match(part)]
    return chain if chain and chain[-1] == bdf.lower() else None


def read_lspci() -> tuple[str | None, str]:
    """(lspci -vvv -D output, why not) - the output is None when lspci cannot run."""
    res = runner.run(["lspci", "-vvv", "-D"], timeout=20)
    if not res.ok:
        return None, res.why()
    return res.stdout, ""


def probe_acs(bus_ids: Sequence[str], *, lspci: tuple[str | None, str] | None = None,
              pci_root: Path = PCI_DEVICES) -> AcsFacts:
    """The ACS facts for the paths between these GPUs (their PCI bus ids). lspci: (text, why
    not) read elsewhere (a test's fixture, or an earlier read this round); None runs lspci."""
    ids = [full_bdf(b) for b in bus_ids]
    if len(ids) < 2:
        return AcsFacts(available=False, reason=f"not read: {len(ids)} GPU, no path between GPUs")
    paths = {b: chain for b in ids if (chain := pci_chain(b, pci_root)) is not None}
    text, why = lspci if lspci is not None else read_lspci()
    if text is None:
        return AcsFacts(available=False, reason=f"cannot read ACS: {why or 'lspci did not run'}", gpu_paths=paths)
    listed = parse_lspci(text)
    on_paths = sorted({bdf for chain in paths.values() for bdf in chain[:-1]})
    return AcsFacts(gpu_paths=paths, devices=[listed[b] for b in on_paths if b in listed])
