"""Mount facts: the mount table (/proc/self/mountinfo) and the directories the plan relies on
(where each lives, how much room it has, and for store directories the files inside)."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from hostctl.facts.records import MountEntry, PathFacts

MOUNTINFO = Path("/proc/self/mountinfo")
MAX_LISTED_FILES = 500

_OCTAL = re.compile(r"\\([0-7]{3})")


class MountLine(NamedTuple):
    """One mountinfo line: the public entry plus the device number and root the disk probe needs."""

    dev: str  # "major:minor"
    root: str
    entry: MountEntry


def unescape(field: str) -> str:
    """mountinfo and /proc/swaps write space, tab, newline and backslash as \\ooo."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[MountLine]:
    lines: list[MountLine] = []
    for raw in text.splitlines():
        fields = raw.split()
        try:
            sep = fields.index("-", 6)  # optional fields (shared:N, master:N) come before the separator
            dev, root, target, options = fields[2], fields[3], fields[4], fields[5]
            fs_type, source = fields[sep + 1], fields[sep + 2]
        except (ValueError, IndexError):
            continue
        entry = MountEntry(source=unescape(source), target=unescape(target), fs_type=fs_type, options=options)
        lines.append(MountLine(dev, unescape(root), entry))
    return lines


def read_mountinfo() -> list[MountLine]:
    try:
        return parse_mountinfo(MOUNTINFO.read_text())
    except OSError:
        return []


def mount_for(path: str, mounts: Sequence[MountEntry]) -> MountEntry | None:
    """The mount a path lives on: the longest matching target; among equal targets the last
    (the one stacked on top)."""
    best: MountEntry | None = None
    for m in mounts:
        target = m.target.rstrip("/") or "/"
        if path == target or target == "/" or path.startswith(target + "/"):
            if best is None or len(target) >= len(best.target.rstrip("/") or "/"):
                best = m
    return best


def _holding_mount(anchor: str, lines: Sequence[MountLine]) -> MountEntry | None:
    """The mount whose filesystem really holds a path: the one with the path's device number.
    A mount hidden by a later mount over a parent directory is still in the table, and the
    longest matching target would name it; the device number does not lie."""
    try:
        st = os.stat(anchor)
    except OSError:
        return None
    dev = f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"
    return mount_for(anchor, [line.entry for line in lines if line.dev == dev])


def first_symlink(path: str) -> str | None:
    """The first component of an absolute path that is a symlink, as "link -> target"."""
    current = "/"
    for part in [p for p in path.split("/") if p]:
        current = os.path.join(current, part)
        if os.path.islink(current):
            return f"{current} -> {os.readlink(current)}"
        if not os.path.exists(current):
            return None
    return None


def _first_entries(directory: Path, n: int = 5) -> list[str]:
    names: list[str] = []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                names.append(entry.name)
                if len(names) >= n:
                    break
    except OSError:
        return []
    return sorted(names)


def _nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _list_files(directory: Path) -> list[tuple[str, int]]:
    files: list[tuple[str, int]] = []
    try:
        with os.scandir(directory) as it:
            for entry in it:
                # follows symlinks on purpose: stores are often links into a model cache
                if entry.is_file():
                    try:
                        files.append((entry.name, entry.stat().st_size))
                    except OSError:
                        continue
    except OSError:
        return []
    files.sort()
    return files[:MAX_LISTED_FILES]


def probe_path(path: str, list_files: bool, mounts: Sequence[MountEntry],
               lines: Sequence[MountLine] | None = None) -> PathFacts:
    p = Path(path)
    exists = p.is_dir()
    # A missing directory is described by where it would be created, so free space still means something.
    anchor = Path(os.path.realpath(_nearest_existing(p.absolute())))
    mount = (_holding_mount(str(anchor), lines) if lines else None) or mount_for(str(anchor), mounts)
    facts = PathFacts(path=path, exists=exists, symlink=first_symlink(str(p.absolute())),
                      not_a_directory=not exists and os.path.lexists(p))
    if exists:
        facts.entries = _first_entries(p)
        try:
            st = p.stat()
            facts.owner_uid, facts.owner_gid = st.st_uid, st.st_gid
        except OSError:
            pass
    if mount is not None:
        facts.fs_type, facts.mount_target, facts.mount_source = mount.fs_type, mount.target, mount.source
    try:
        st = os.statvfs(anchor)
        facts.free_bytes, facts.total_bytes = st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize
    except OSError:
        pass
    if list_files:
        facts.files = _list_files(p) if exists else []
    return facts


def probe_paths(requests: Sequence[tuple[str, bool]], lines: Sequence[MountLine] | None = None) -> list[PathFacts]:
    """requests: (directory, list_files) pairs."""
    if lines is None:
        lines = read_mountinfo()
    mounts = [line.entry for line in lines]
    return [probe_path(path, list_files, mounts, lines) for path, list_files in requests]
