"""System files hostctl edits (/etc/fstab, /etc/sysctl.d/...): read them under the sysroot,
show an edit as a unified diff for --dry-run, and write them atomically (a crash leaves the
old file or the new one, never half of each), keeping the file's mode and owner."""

from __future__ import annotations

import difflib
import os
import tempfile
from pathlib import Path

from hostctl import paths


def read_text(host_path: str) -> str | None:
    """The file at this host path (under the sysroot); None when it does not exist."""
    try:
        return paths.system_path(host_path).read_text()
    except FileNotFoundError:
        return None


def diff(host_path: str, old: str | None, new: str) -> str:
    """A unified diff from the current text to the new one, labelled with the host path."""
    lines = difflib.unified_diff(
        (old or "").splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=host_path if old is not None else "/dev/null",
        tofile=host_path,
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines).rstrip("\n")


def write_atomic(host_path: str, text: str, mode: int = 0o644) -> Path:
    target = paths.system_path(host_path)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        st = target.stat()
        mode, owner = st.st_mode & 0o7777, (st.st_uid, st.st_gid)
    except FileNotFoundError:
        owner = None
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.hostctl-")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        if owner is not None:
            os.chown(tmp, *owner)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(target.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself must survive a power cut
    finally:
        os.close(dir_fd)
    return target
