"""Kernel log facts: the OOM kills and GPU Xid errors since boot, classified by
`hostctl.kernel_events`.

The log is read from /dev/kmsg directly (one non-blocking pass, no subprocess: doctor's quick
level must stay fast), else from `dmesg`, else from `journalctl -k -b`. The kernel's ring
buffer drops its oldest records when it fills; the facts say when that happened, because
then "no OOM kill since boot" is only "none since the oldest record kept".
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from pydantic import ConfigDict

from hostctl import runner
from hostctl.data import Data
from hostctl.facts.records import KernelEvent, KernelLogFacts

KMSG = Path("/dev/kmsg")
UPTIME = Path("/proc/uptime")
MAX_KMSG_RECORDS = 200_000  # a bound, so a log that is being flooded cannot keep us reading


def uptime_s() -> float | None:
    """Seconds since boot on the clock the kernel log's timestamps use: `up` notes it when it
    starts, so the events logged after that (its own run's) can be told from older ones."""
    try:
        return float(UPTIME.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def parse_kmsg_record(record: bytes) -> tuple[int, str] | None:
    """One /dev/kmsg record ("prio,seq,usec,flags;message" plus " KEY=value" continuation lines)
    -> (sequence number, the line as dmesg prints it: "[seconds] message")."""
    head, sep, message = record.decode("utf-8", "replace").partition(";")
    fields = head.split(",")
    try:
        seq, usec = int(fields[1]), int(fields[2])
    except (IndexError, ValueError):
        return None
    if not sep:
        return None
    message = message.split("\n", 1)[0]  # continuation lines carry device metadata, not text
    return seq, f"[{usec // 1_000_000:5d}.{usec % 1_000_000:06d}] {message}"


def read_kmsg(path: Path = KMSG) -> tuple[list[str], int | None]:
    """(lines as dmesg prints them "[seconds] message", sequence number of the first record).
    Raises OSError when the device cannot be opened (no permission: dmesg_restrict)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    lines: list[str] = []
    first_seq: int | None = None
    try:
        for _ in range(MAX_KMSG_RECORDS):
            try:
                record = os.read(fd, 16384)
            except BlockingIOError:
                break  # read everything there is
            except OSError as exc:
                if exc.errno == errno.EPIPE:
                    continue  # the record we were at was overwritten: the next read resumes at the oldest
                raise
            if not record:
                break
            parsed = parse_kmsg_record(record)
            if parsed is None:
                continue
            seq, line = parsed
            if first_seq is None:
                first_seq = seq
            lines.append(line)
    finally:
        os.close(fd)
    return lines, first_seq


# Every line hostctl.kernel_events.kernel_events can turn into an event holds one of these (it tests
# the same substrings before its patterns): a log without any has no event.
EVENT_MARKERS = ("oom-kill:", "Killed process", "NVRM: Xid")


def _events(text: str) -> list[KernelEvent]:
    if not any(marker in text for marker in EVENT_MARKERS):
        return []  # the usual log: the catalogue's patterns (~10 ms to compile) are not needed
    from hostctl.kernel_events import kernel_events

    return [KernelEvent(kind=e.kind, line=e.line, time_s=e.time_s, process=e.process, cgroup=e.cgroup, xid=e.xid,
                        pci_bus_id=e.pci_bus_id, severity=e.severity) for e in kernel_events(text)]


def _first_time(lines: list[str]) -> float | None:
    for line in lines:
        if line.startswith("["):
            try:
                return float(line[1:line.index("]")])
            except ValueError:
                return None
    return None


class KernelLines(Data):
    """The kernel log as read: its lines (None when no source could be read) and from where."""

    model_config = ConfigDict(frozen=True)

    lines: list[str] | None
    source: str | None = None  # /dev/kmsg, dmesg or journalctl -k -b
    first_seq: int | None = None  # /dev/kmsg's first record's sequence number (0: nothing dropped)
    why: str = ""  # why no source could be read


def read_kernel_lines(kmsg: Path = KMSG) -> KernelLines:
    """The kernel log from the first source that reads: /dev/kmsg, dmesg, journalctl -k -b."""
    try:
        lines, first_seq = read_kmsg(kmsg)
    except OSError as exc:
        kmsg_problem = f"{kmsg}: {exc.strerror or exc}"
    else:
        return KernelLines(lines=lines, source=str(kmsg), first_seq=first_seq)
    dmesg = runner.run(["dmesg"], timeout=5)
    if dmesg.ok:
        return KernelLines(lines=dmesg.stdout.splitlines(), source="dmesg")
    journal = runner.run(["journalctl", "-k", "-b", "--no-pager", "-q", "-o", "short-monotonic"], timeout=10)
    if journal.ok and journal.stdout.strip():
        return KernelLines(lines=journal.stdout.splitlines(), source="journalctl -k -b")
    return KernelLines(lines=None, why=f"kernel log unreadable: {kmsg_problem}; {dmesg.why()}; "
                       + (journal.why() if not journal.ok else "journalctl -k -b: no entries (no persistent journal)"))


def kernel_log_tail(n: int, kmsg: Path = KMSG) -> KernelLines:
    """The last n lines of the kernel log (what a support bundle keeps), read as the facts read it."""
    read = read_kernel_lines(kmsg)
    return read if read.lines is None else KernelLines(lines=read.lines[-n:], source=read.source, first_seq=read.first_seq)


def probe_kernel_log(kmsg: Path = KMSG) -> KernelLogFacts:
    read = read_kernel_lines(kmsg)
    if read.lines is None:
        return KernelLogFacts(available=False, reason=read.why)
    lines, text = read.lines, "\n".join(read.lines)
    first = _first_time(lines)
    if read.source == str(kmsg):
        complete = read.first_seq == 0 if read.first_seq is not None else None
    elif read.source == "dmesg":
        # dmesg cannot tell how many records were dropped; a first record well after boot means some were.
        complete = None if first is None else first < 1.0
    else:
        complete = True  # the journal keeps what the ring buffer dropped
    return KernelLogFacts(source=read.source, records=len(lines), first_record_s=first, complete=complete,
                          events=_events(text))
