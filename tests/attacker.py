"""The other local user the root-safety tests attack as (`nobody`, uid 65534), and the root-only
file such an attack must leave unchanged. The one copy of these for tests/unit; the planted files
are chowned to NOBODY, or written by a child that drops to it."""

from __future__ import annotations

import os
from pathlib import Path

NOBODY = 65534


def run_as(uid: int, gid: int, fn) -> int:
    """fn() in a child as uid/gid with no supplementary groups: 0 done, 1 OSError (denied), 2 other."""
    pid = os.fork()
    if pid == 0:
        try:
            os.setgroups([])
            os.setgid(gid)
            os.setuid(uid)
            fn()
            os._exit(0)
        except OSError:
            os._exit(1)
        except BaseException:
            os._exit(2)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def make_victim(tmp_path: Path) -> Path:
    """A root-only file (0600 in a 0700 folder) that an attack tries to overwrite, chown or read."""
    v = tmp_path / "victim"
    v.mkdir(mode=0o700)
    f = v / "shadow"
    f.write_text("root's secret\n")
    os.chmod(f, 0o600)
    return f
