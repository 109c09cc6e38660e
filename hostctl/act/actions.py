"""Action: one change to the host, described before it runs, and the Assessment a part makes of
one look at the host (the word Decision belongs to the planner: hostctl/plan/records.py).

Every part is a pure `decide(...) -> Assessment`, the way pyinfra operations yield only the
commands that are needed: a host that already matches yields no Action. An Action carries its
part and id, what it changes, why (the plan decision it serves), the exact argv (run as a list,
never through a shell; `describe` shell-quotes it for reading only) or the file diff, whether it
is destructive, and its consent level:
  none  - runs without asking;
  yes   - destroys nothing that may hold data (a blank drive, hostctl's own unfinished
          partitions): needs --yes or the drive's identity typed at a terminal;
  erase - destroys foreign contents: also needs --erase IDENTITY, which the part's decision
          checks before it yields the action.
`run` performs it and raises a HostctlError (or OSError) on failure; the executor
(act/executor.py) is the only caller.
"""

from __future__ import annotations

import copy
import shlex
from collections.abc import Callable
from typing import Any, Literal, Union

from hostctl import runner
from hostctl.act import hooks
from hostctl.data import Data
from hostctl.errors import FailedError

Consent = Literal["none", "yes", "erase"]


class Action:
    """A plain class, not data: it holds the callable that makes the change."""

    def __init__(self, step: str, describe: str, run: Callable[[], None], *, destructive: bool = False,
                 argv: tuple[str, ...] | None = None, diff: str | None = None, changes: str = "", why: str = "",
                 consent: Consent = "none", writes: str | None = None) -> None:
        self.step = step  # its id, "<part>/...", e.g. "storage/ssd1/partition"
        self.describe = describe
        self.run = run
        self.destructive = destructive
        self.argv = argv  # the exact command, when it is one
        self.diff = diff  # the unified diff, when it edits a text file
        self.changes = changes  # what it changes: a device, a file, a GPU's power limit
        self.why = why  # the plan decision it serves
        self.consent = consent
        # the file it writes, when it writes one: a run can check every such target
        # (facts.sysfiles.write_target) before the first action of any part changes the host
        self.writes = writes

    def __repr__(self) -> str:
        return f"Action({self.step!r}, {self.describe.splitlines()[0]!r})"

    def amended(self, **changes: Any) -> Action:
        """This action with some of its fields changed (why it runs, what it changes, its consent)."""
        unknown = set(changes) - set(vars(self))
        if unknown:
            raise TypeError(f"Action has no field(s) {', '.join(sorted(unknown))}")
        new = copy.copy(self)
        vars(new).update(changes)
        return new

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


class Settled(Data):
    """A piece of the desired state the host already has (status `ok` in the report)."""

    id: str
    what: str


class Skipped(Data):
    """Something the part does not do here, and why (no driver, no limits configured, ...)."""

    id: str
    reason: str


class Note(Data):
    """A warning (or, with severity info, data worth reporting such as a P2P rung) from deciding."""

    id: str
    message: str
    severity: Literal["info", "warn"] = "warn"
    data: dict[str, Any] | None = None


class Refusal(Data):
    """The part will not act on this (exit 3): a drive that is in use, foreign, unsafe."""

    id: str
    reason: str


Item = Union[Action, Settled, Skipped, Note, Refusal]


class Assessment:
    """What one part found on one look at the host, in the order it found it: the actions still
    needed and what is settled, skipped, warned about or refused. A plain class: its actions hold
    callables."""

    def __init__(self, part: str, items: list[Item] | None = None, *, pending: bool = False,
                 failures: list[str] | None = None, detail: Any = None) -> None:
        self.part = part
        self.items: list[Item] = items if items is not None else []
        self.pending = pending  # more is decided once these actions ran and the host is read again
        self.failures: list[str] = failures if failures is not None else []  # nothing left to do, yet it failed
        self.detail = detail  # the part's own value (StorageProvision, ...) for its text

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
        hooks.command(argv)
        res = runner.run(argv, timeout=timeout, input_text=input_text)
        if not res.ok:
            raise FailedError(f"{step}: {res.why()}", details=(res.stderr or res.stdout).strip().splitlines()[-5:])
        if after:
            after()

    describe = shlex.join(argv) + (f"    # {note}" if note else "")
    return Action(step=step, describe=describe, run=_run, destructive=destructive, argv=tuple(argv),
                  changes=changes, why=why or (note or ""), consent=consent if destructive else "none")
