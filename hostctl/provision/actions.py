"""Action: one change to the host, described before it runs.

`describe` is what --dry-run prints: the exact argv (shell-quoted for reading only; it is
run as a list, never through a shell) or the file edit. `destructive` actions (partition
tables, mkfs, mkswap over data) need consent; `run` performs it and raises on failure.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field

from hostctl import runner
from hostctl.errors import FailedError


@dataclass(frozen=True)
class Action:
    step: str  # the step it belongs to, e.g. "storage/ssd1/partition"
    describe: str
    run: Callable[[], None] = field(compare=False, repr=False)
    destructive: bool = False


def command(step: str, argv: list[str], *, destructive: bool = False, timeout: float = 600) -> Action:
    """An Action that runs one external command through the runner and fails with its output."""

    def _run() -> None:
        res = runner.run(argv, timeout=timeout)
        if not res.ok:
            raise FailedError(f"{step}: {res.why()}", details=(res.stderr or res.stdout).strip().splitlines()[-5:])

    return Action(step=step, describe=shlex.join(argv), run=_run, destructive=destructive)
