"""A test hook that kills hostctl, with everything it started, at a chosen step: how the
system tests prove that a kill -9 at any point of provisioning converges on the next run.

Set HOSTCTL_TEST_KILL_AT=<what>[#<n>]@<when> in the environment of a hostctl started in its own
process group. <what> is the start of a command line (`sgdisk --clear`, `partx -u`, `mkfs.xfs`, `mount`, ...) or `write:<path>`
for a file hostctl replaces (`write:/etc/fstab`); #<n> picks its n-th run (default 1); <when>
is a delay in seconds after the program started (`0`, `0.02`) or `end` (after it finished,
before hostctl records anything).
SIGKILL goes to the whole process group, so the program dies with hostctl. Unset, this costs
one dictionary lookup.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

ENV = "HOSTCTL_TEST_KILL_AT"
_seen: dict[str, int] = {}


def _armed(what: str) -> str | None:
    """<when> if the hook names this program or file and this is the chosen run of it."""
    spec = os.environ.get(ENV)
    if not spec or "@" not in spec:
        return None
    target, when = spec.rsplit("@", 1)
    name, _, nth = target.partition("#")
    if name != what:
        return None
    _seen[what] = _seen.get(what, 0) + 1
    return when if _seen[what] == int(nth or 1) else None


def _kill_group() -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)


def armed_for_command(argv: list[str]) -> str | None:
    """The <when> of the hook if it is armed for this run of this command. <what> matches the
    start of the command line (`partx -u` is the table reload, not the `partx --show` probe)."""
    spec = os.environ.get(ENV)
    if not spec:
        return None
    line = " ".join([os.path.basename(argv[0]), *argv[1:]])
    what = spec.rsplit("@", 1)[0].partition("#")[0]
    return _armed(what) if line.startswith(what) else None


def run_then_kill(proc: subprocess.Popen, when: str) -> None:
    """Called with the program started: kill everything at the chosen moment."""
    if when == "end":
        proc.wait()
    else:
        time.sleep(float(when))
    _kill_group()


def at_write(host_path: str) -> None:
    """Called after the new file's data is written and before it replaces the old one."""
    if _armed(f"write:{host_path}") is not None:
        _kill_group()
