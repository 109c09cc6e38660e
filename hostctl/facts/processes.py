"""Process facts: whether a process still runs and the live processes of a process group
(psutil), and when a process started (with its pid, that names one process for the life of the
machine, so a reused pid is not mistaken for it)."""

from __future__ import annotations

import os
from pathlib import Path

import psutil


def alive(pid: int) -> bool:
    """Whether the process runs: a zombie has ended; its parent just has not reaped it."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22). Read here,
    not through psutil: psutil's create_time() adds the boot time as the clock now reckons it, so
    a clock step between two readings (NTP, a suspended VM) would make one process two."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[19])  # fields after "pid (comm)": starttime is the 20th
    except (OSError, ValueError, IndexError):
        return None


def in_group(pgid: int) -> list[int]:
    """The processes (not yet reaped) whose process group is pgid."""
    found = []
    for pid in psutil.pids():
        try:
            if os.getpgid(pid) == pgid:
                found.append(pid)
        except OSError:  # it ended meanwhile
            continue
    return found
