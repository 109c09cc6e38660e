"""Shared-memory facts: /dev/shm's size and the segments inference runtimes leave there.

Under host IPC the runtime's ranks talk through the host's /dev/shm: NCCL (`nccl-*`), Python's
multiprocessing.shared_memory as vLLM uses it (`psm_*`), vLLM's own (`vllm*`) and PyTorch's
(`torch_*`). A rank that dies leaves its segments behind, and tmpfs pages are RAM: on a 48 GB
host a few stale GiB matter. A segment is in use while some process maps it or holds it open;
the process scan happens only when such segments exist, so the usual case costs one listdir.
"""

from __future__ import annotations

import fnmatch
import os
import time
from pathlib import Path

from hostctl.facts.records import ShmFacts, ShmSegment

SHM = Path("/dev/shm")
PROC = Path("/proc")
RUNTIME_PATTERNS = ("nccl-*", "psm_*", "vllm*", "torch_*")
# A segment this young may sit between its creation and its first mmap: never call it stale.
GRACE_S = 60.0


def _referenced(shm: Path, proc: Path) -> tuple[set[str], int, int]:
    """(names under shm that some process maps or holds open, processes scanned, processes unreadable)."""
    prefix = str(shm).rstrip("/") + "/"
    names: set[str] = set()
    scanned = unreadable = 0
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        scanned += 1
        try:
            with open(f"{entry.path}/maps", "rb") as f:
                data = f.read()
        except OSError:
            unreadable += 1
            continue
        if prefix.encode() in data:
            for line in data.decode("utf-8", "replace").splitlines():
                i = line.find(prefix)
                if i >= 0:
                    names.add(line[i + len(prefix):].removesuffix(" (deleted)").split("/")[0])
        try:
            with os.scandir(f"{entry.path}/fd") as fds:
                for fd in fds:
                    try:
                        link = os.readlink(fd.path)
                    except OSError:
                        continue
                    if link.startswith(prefix):
                        names.add(link[len(prefix):].removesuffix(" (deleted)"))
        except OSError:
            pass  # maps was readable, so only the fds of a process that just exited are lost
    return names, scanned, unreadable


def probe_shm(shm: Path = SHM, proc: Path = PROC, now: float | None = None) -> ShmFacts:
    try:
        st = os.statvfs(shm)
        entries = list(os.scandir(shm))
    except OSError as exc:
        return ShmFacts(available=False, reason=f"{shm}: {exc.strerror or exc}", path=str(shm))
    facts = ShmFacts(path=str(shm), total_bytes=st.f_blocks * st.f_frsize, free_bytes=st.f_bavail * st.f_frsize)
    candidates = []
    for entry in entries:
        if any(fnmatch.fnmatchcase(entry.name, p) for p in RUNTIME_PATTERNS):
            try:
                candidates.append((entry.name, entry.stat(follow_symlinks=False)))
            except OSError:
                continue
    if not candidates:
        return facts
    used, facts.scanned_processes, facts.unreadable_processes = _referenced(shm, proc)
    now = time.time() if now is None else now
    for name, st_ in sorted(candidates):
        age = max(0.0, now - st_.st_mtime)
        if name in used or age < GRACE_S:
            in_use: bool | None = True
        else:
            # with some processes unreadable, "nobody maps it" is not proven
            in_use = None if facts.unreadable_processes else False
        facts.segments.append(ShmSegment(name=name, size_bytes=st_.st_size, used_bytes=st_.st_blocks * 512, uid=st_.st_uid,
                                         age_s=round(age, 1), in_use=in_use))
    return facts
