"""Memory facts: RAM and swap totals (psutil), active swap areas (/proc/swaps: psutil gives
totals only), the swap sysctls, this process's memlock limit and the size of /dev/shm."""

from __future__ import annotations

import os
import resource
from pathlib import Path

from hostctl.facts.records import MemoryFacts, SwapDevice
from hostctl.facts.mounts import unescape

SWAPS = Path("/proc/swaps")
SYSCTL_VM = Path("/proc/sys/vm")
SHM = "/dev/shm"


def parse_swaps(text: str) -> list[SwapDevice]:
    swaps: list[SwapDevice] = []
    for line in text.splitlines()[1:]:  # the first line is the header
        fields = line.rsplit(None, 4)  # the path may contain spaces (written as \040)
        if len(fields) != 5:
            continue
        path, kind, size, used, prio = fields
        try:
            swaps.append(
                SwapDevice(
                    path=unescape(path.strip()),
                    kind=kind,
                    size_bytes=int(size) * 1024,
                    used_bytes=int(used) * 1024,
                    priority=int(prio),
                )
            )
        except ValueError:
            continue
    return swaps


def read_swaps() -> list[SwapDevice]:
    try:
        return parse_swaps(SWAPS.read_text())
    except OSError:
        return []


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def probe_memory(swaps: list[SwapDevice] | None = None) -> MemoryFacts:
    import psutil

    ram, swap = psutil.virtual_memory(), psutil.swap_memory()
    soft, _hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)
    try:
        st = os.statvfs(SHM)
        shm: int | None = st.f_blocks * st.f_frsize
    except OSError:
        shm = None
    return MemoryFacts(
        mem_total_bytes=ram.total,
        mem_available_bytes=ram.available,
        swap_total_bytes=swap.total,
        swap_free_bytes=swap.free,
        swaps=read_swaps() if swaps is None else swaps,
        swappiness=_read_int(SYSCTL_VM / "swappiness"),
        page_cluster=_read_int(SYSCTL_VM / "page-cluster"),
        memlock_limit_bytes=None if soft == resource.RLIM_INFINITY else soft,
        shm_total_bytes=shm,
    )
