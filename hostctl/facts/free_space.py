"""Free space: how many bytes an unprivileged writer can still put on the filesystem holding a path
(a pull checks it before downloading)."""

from __future__ import annotations

import os
from pathlib import Path


def free_space(path: str) -> tuple[str, int | None]:
    """(the nearest existing directory at or above `path`, its filesystem's free bytes for an
    unprivileged writer); None when even that cannot be read."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except OSError:
        return str(p), None
    return str(p), st.f_bavail * st.f_frsize
