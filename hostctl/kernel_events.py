"""OOM kills and GPU Xid errors in a kernel log: the events the kernel-log facts record
(hostctl.facts.kernel_log) and the failure catalogue (hostctl.failures) reads.

Apart from the catalogue so that reading the facts of a host whose log holds an OOM kill (most
hosts this tool is for, sooner or later) compiles these three patterns, not the catalogue's ~40
(~8 ms on the 2-CPU machine).
"""

from __future__ import annotations

import re

from pydantic import ConfigDict

from hostctl.data import Data
from hostctl import loglines

XID = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]{1,32})\): (\d{1,10})")

# What an Xid number means and how bad it is: "hardware" ones point at the GPU, its power or its
# link and need a person; "application" ones are a process's own fault (the GPU survives).
XID_MEANINGS: dict[int, tuple[str, str]] = {
    13: ("graphics engine exception", "application"),
    31: ("GPU memory page fault", "application"),
    43: ("GPU stopped processing", "application"),
    45: ("preemptive cleanup after an earlier fault", "application"),
    48: ("double-bit ECC error", "hardware"),
    61: ("internal micro-controller breakpoint", "hardware"),
    62: ("internal micro-controller halt", "hardware"),
    63: ("ECC page retirement or row remap recorded", "contained"),
    64: ("ECC page retirement or row remap failed", "hardware"),
    74: ("NVLink error", "hardware"),
    79: ("GPU has fallen off the bus", "hardware"),
    92: ("high single-bit ECC error rate", "hardware"),
    94: ("contained ECC error", "contained"),
    95: ("uncontained ECC error", "hardware"),
    119: ("GSP RPC timeout", "hardware"),
    120: ("GSP error", "hardware"),
}
# Bounded repetition only: a kernel log can come from a snapshot anyone wrote, and `[^)]*` or `.*?`
# retried from every repeated "Killed process 1 (" costs the line's length squared. The kernel's
# own fields are short (a comm is 15 characters, a pid 7 digits, the whole line under 1 KiB).
KILLED = re.compile(r"(?P<memcg>Memory cgroup out of memory: )?(?:Out of memory: )?Killed process (?P<pid>\d{1,10}) "
                    r"\((?P<comm>[^)]{0,64})\)")
OOM_CONSTRAINT = re.compile(r"oom-kill:constraint=(?P<constraint>\w{1,64}).{0,1024}?(?:task_memcg=(?P<memcg>[^,\s]{0,1024}))?"
                            r",task=(?P<comm>[^,]{0,64}),pid=(?P<pid>\d{1,10})")
_KERNEL_TIME = re.compile(r"^\s*\[\s*(?P<t>\d{1,12}\.\d{1,9})\]")


class KernelLogMatch(Data):
    """One OOM kill or Xid error in a kernel log."""

    model_config = ConfigDict(frozen=True, defer_build=False)

    kind: str  # "host_oom", "memcg_oom" or "xid"
    line: str
    time_s: float | None = None  # seconds since boot, when the line carries it
    process: str | None = None  # OOM: the killed task (name and pid)
    cgroup: str | None = None  # OOM: the killed task's memory cgroup (a container's scope)
    xid: int | None = None
    pci_bus_id: str | None = None
    severity: str | None = None  # Xid: hardware, contained or application


def kernel_events(text: str) -> list[KernelLogMatch]:
    """Every OOM kill (host-wide vs a memory cgroup's own limit) and every Xid error in a kernel
    log (dmesg lines, with or without their [time] prefix), in log order."""
    events: list[KernelLogMatch] = []
    constraints: dict[str, tuple[str, str | None]] = {}  # pid -> (constraint, memcg) from the line before the kill
    for raw in text.splitlines():
        # A plain substring test first: a boot's log holds thousands of lines and the three
        # patterns below match a handful (~10 ms saved on doctor's every run).
        # (hostctl.facts.kernel_log.EVENT_MARKERS: the same three, tested on the whole log first)
        if "oom-kill:" not in raw and "Killed process" not in raw and "NVRM: Xid" not in raw:
            continue
        line = loglines.bounded(raw.strip())
        m_time = _KERNEL_TIME.match(line)
        t = float(m_time.group("t")) if m_time else None
        if (m := OOM_CONSTRAINT.search(line)) is not None:
            constraints[m.group("pid")] = (m.group("constraint"), m.group("memcg"))
            continue
        if (m := KILLED.search(line)) is not None:
            constraint, memcg = constraints.pop(m.group("pid"), (None, None))
            in_cgroup = bool(m.group("memcg")) or constraint == "CONSTRAINT_MEMCG"
            events.append(KernelLogMatch(kind="memcg_oom" if in_cgroup else "host_oom", line=line, time_s=t,
                                      process=f"{m.group('comm')} (pid {m.group('pid')})", cgroup=memcg or None))
            continue
        if (m := XID.search(line)) is not None:
            code = int(m.group(2))
            events.append(KernelLogMatch(kind="xid", line=line, time_s=t, xid=code, pci_bus_id=m.group(1),
                                      severity=XID_MEANINGS.get(code, ("", "unknown"))[1]))
    return events
