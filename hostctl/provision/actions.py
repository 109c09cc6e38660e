"""Action: one change to the host, described before it runs, and the Decision a part makes.

Every provision part (storage, system, gpu) is a pure `decide(...) -> Decision`, the way pyinfra
operations yield only the commands that are needed: a host that already matches yields no
Action. An Action carries its part and id, what it changes, why (the plan decision it serves),
the exact argv (run as a list, never through a shell; `describe` shell-quotes it for reading
only) or the file diff, whether it is destructive, and its consent level:
  none  - runs without asking;
  yes   - destroys nothing that may hold data (a blank drive, hostctl's own unfinished
          partitions): needs --yes or the drive's identity typed at a terminal;
  erase - destroys foreign contents: also needs --erase IDENTITY, which the storage decision
          checks before it yields the action.
`run` performs it and raises a HostctlError (or OSError) on failure; the executor
(provision/executor.py) is the only caller.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Union

from hostctl import runner
from hostctl.errors import FailedError, HostctlError

Consent = Literal["none", "yes", "erase"]


@dataclass(frozen=True)
class Action:
    step: str  # its id, "<part>/...", e.g. "storage/ssd1/partition"
    describe: str
    run: Callable[[], None] = field(compare=False, repr=False)
    destructive: bool = False
    argv: tuple[str, ...] | None = None  # the exact command, when it is one
    diff: str | None = None  # the unified diff, when it edits a text file
    changes: str = ""  # what it changes: a device, a file, a GPU's power limit
    why: str = ""  # the plan decision it serves
    consent: Consent = "none"

    @property
    def id(self) -> str:
        return self.step

    @property
    def part(self) -> str:
        return self.step.split("/", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        return {"part": self.part, "id": self.id, "describe": self.describe.splitlines()[0], "changes": self.changes,
                "why": self.why, "argv": list(self.argv) if self.argv is not None else None, "diff": self.diff,
                "destructive": self.destructive, "consent": self.consent}


@dataclass(frozen=True)
class Settled:
    """A piece of the desired state the host already has (status `ok` in provision's report)."""

    id: str
    what: str


@dataclass(frozen=True)
class Skipped:
    """Something the part does not do here, and why (no driver, no limits configured, ...)."""

    id: str
    reason: str


@dataclass(frozen=True)
class Note:
    """A warning (or, with severity info, data worth reporting such as a P2P rung) from deciding."""

    id: str
    message: str
    severity: Literal["info", "warn"] = "warn"
    data: dict[str, Any] | None = None


@dataclass(frozen=True)
class Refusal:
    """The part will not act on this (exit 3): a drive that is in use, foreign, unsafe."""

    id: str
    reason: str


Item = Union[Action, Settled, Skipped, Note, Refusal]


@dataclass
class Decision:
    """What one part decided on one snapshot of the host, in the order it decided it."""

    part: str
    items: list[Item] = field(default_factory=list)
    pending: bool = False  # more is decided once these actions ran and the host is read again
    failures: list[str] = field(default_factory=list)  # nothing left to do, yet the part has failed
    detail: Any = None  # the part's own decision value (StorageProvision, ...) for its text

    def add(self, item: Item) -> Item:
        self.items.append(item)
        return item

    @property
    def actions(self) -> list[Action]:
        return [i for i in self.items if isinstance(i, Action)]

    @property
    def settled(self) -> list[Settled]:
        return [i for i in self.items if isinstance(i, Settled)]

    @property
    def skipped(self) -> list[Skipped]:
        return [i for i in self.items if isinstance(i, Skipped)]

    @property
    def warnings(self) -> list[Note]:
        return [i for i in self.items if isinstance(i, Note)]

    @property
    def refusals(self) -> list[Refusal]:
        return [i for i in self.items if isinstance(i, Refusal)]


def command(step: str, argv: list[str], *, destructive: bool = False, timeout: float = 600, changes: str = "",
            why: str = "", consent: Consent = "none", input_text: str | None = None,
            before: Callable[[], None] | None = None, after: Callable[[], None] | None = None,
            note: str | None = None) -> Action:
    """An Action that runs one external command through the runner and fails with its output.
    `before`/`after` are guards and waits around it (a guard that finds the device changed since
    the facts were read raises before anything is written); `note` is shown after the command."""

    def _run() -> None:
        if before:
            before()
        res = runner.run(argv, timeout=timeout, input_text=input_text)
        if not res.ok:
            raise FailedError(f"{step}: {res.why()}", details=(res.stderr or res.stdout).strip().splitlines()[-5:])
        if after:
            after()

    describe = shlex.join(argv) + (f"    # {note}" if note else "")
    return Action(step=step, describe=describe, run=_run, destructive=destructive, argv=tuple(argv),
                  changes=changes, why=why or (note or ""), consent=consent if destructive else "none")


def error_lines(exc: HostctlError) -> list[str]:
    """An error as the lines a report shows: the message, then its details."""
    return [exc.message, *exc.details]
