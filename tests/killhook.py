"""The kill points of the system tests, on the executor's test hook (hostctl.act.hooks): how
tests/system/test_storage_safety.py proves that a kill -9 at any step of provisioning converges on
the next run. tests/conftest.py installs it when pytest starts, so a child that pytest forks
inherits it.

Set HOSTCTL_TEST_KILL_AT=<what>[#<n>]@<when> in the environment of a hostctl running in its own
process group. <what> is the start of a command line (`sgdisk --clear`, `partx -u`, `mkfs.xfs`,
`mount`, ...) or `write:<path>` for a file hostctl replaces (`write:/etc/fstab`); #<n> picks its
n-th run (default 1); <when> is a delay in seconds after the program started (`0`, `0.02`) or
`end` (after it finished, before hostctl records anything). SIGKILL goes to the whole process
group, so the program dies with hostctl. Unset, a step costs one environment lookup.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

from hostctl.act import hooks

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


def _command(argv: tuple[str, ...]) -> None:
    """<what> matches the start of the command line (`partx -u` is the table reload, not the
    `partx --show` probe). Armed: start the program, kill everything at the chosen moment."""
    spec = os.environ[ENV]
    line = " ".join([os.path.basename(argv[0]), *argv[1:]])
    what = spec.rsplit("@", 1)[0].partition("#")[0]
    when = _armed(what) if line.startswith(what) else None
    if when is None:
        return
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if when == "end":
        proc.wait()
    else:
        time.sleep(float(when))
    _kill_group()


def _on_step(step: hooks.Step) -> None:
    if not os.environ.get(ENV):
        return
    if step.kind == "command":
        _command(step.argv)
    elif _armed(f"write:{step.path}") is not None:  # the new text is written, the old file still in place
        _kill_group()


def install() -> None:
    hooks.before_step(_on_step)
