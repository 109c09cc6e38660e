"""Atomic file replacement for everything hostctl writes (system files, rendered projects, state):
a crash leaves the old file or the new one, never half of each."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def write_atomic(target: Path, data: str | bytes, *, mode: int | None = None, exclusive: bool = False,
                 before_replace: Callable[[], None] | None = None) -> Path:
    """Replace `target` with `data`. A file being replaced keeps its mode and owner unless `mode`
    is given; a new one gets `mode` or 0644. The data and the rename are fsynced. A temporary
    file left by a writer that was killed (kill -9 cannot be cleaned up after) goes first.
    `exclusive`: never replace; FileExistsError when `target` exists, even if it appeared a moment
    ago (a hard link, unlike a rename, does not overwrite)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    for stale in target.parent.glob(f".{target.name}.hostctl-*"):
        stale.unlink(missing_ok=True)
    try:
        st = target.stat()
        kept_mode, owner = st.st_mode & 0o7777, (st.st_uid, st.st_gid)
    except FileNotFoundError:
        kept_mode, owner = None, None
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.hostctl-")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode if mode is not None else (kept_mode if kept_mode is not None else 0o644))
        if owner is not None:
            os.chown(tmp, *owner)
        if before_replace is not None:
            before_replace()
        if exclusive:
            try:
                os.link(tmp, target)
                os.unlink(tmp)
            except FileExistsError:
                raise
            except OSError:  # a filesystem without hard links: claim the name first, then fill it
                os.close(os.open(target, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
                os.replace(tmp, target)
        else:
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
