"""Kernel CPU lists ('0-3,8,10-11', as in /sys/devices/system/node/node*/cpulist and
cpuset.cpus): parsed into CPU numbers and written back compressed into ranges."""

from __future__ import annotations


def parse_cpulist(text: str) -> list[int]:
    """Parse a kernel CPU list ('0-3,8,10-11') into sorted CPU numbers."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.update(range(int(lo), int(hi) + 1))
        else:
            cpus.add(int(part))
    return sorted(cpus)


def format_cpulist(cpus: list[int]) -> str:
    """Inverse of parse_cpulist, compressed into ranges ('0-3,8')."""
    out: list[str] = []
    ordered = sorted(set(cpus))
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ordered[j + 1] == ordered[j] + 1:
            j += 1
        out.append(str(ordered[i]) if i == j else f"{ordered[i]}-{ordered[j]}")
        i = j + 1
    return ",".join(out)
