"""A part that writes plain files a command owns (tune's knob files, results and chart): each file
that differs from what is wanted (its bytes, and mode where one is wanted) becomes an action that
replaces it through safefs.write_file (crash-safe, the folder opened safely, a planted link not
followed); reading the files again after writing is the verification.

A file marked `secret` (it quotes a recipe's env) is named in the preview, its text never shown;
nor is a file wanted as bytes (tune's PNG chart): no diff of it would read as anything.
"""

from __future__ import annotations

import difflib
import os
import stat
from pathlib import Path
from typing import Any

from hostctl.act import hooks
from hostctl.act.actions import Action, Assessment, Settled
from hostctl.act.consent import Request
from hostctl.act.executor import Context
from hostctl.data import Data
from hostctl.errors import FailedError, HostctlError


class FileNow(Data):
    """A file as it is on the host: its bytes (None: absent or not a plain file), its text (None
    as well when they are not UTF-8) and its permission bits."""

    name: str
    data: bytes | None = None
    text: str | None = None
    mode: int | None = None


class Want(Data):
    path: str
    text: str | bytes  # bytes: a file that is not text (tune's chart)
    mode: int | None = None  # None: a file being replaced keeps its mode (a new one: 0644)
    owner: tuple[int, int] | None = None
    secret: bool = False
    why: str = ""


def read_file(dir_fd: int | None, name: str) -> FileNow:
    """`name` (in the folder open as dir_fd, or a path) as it is; a link is not followed."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return FileNow(name=name)  # absent, a link or unreadable: written anew
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            return FileNow(name=name)
        data = fh.read()
        try:
            text: str | None = data.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        return FileNow(name=name, data=data, text=text, mode=stat.S_IMODE(st.st_mode))


class FilesPart:
    record = False

    def __init__(self, name: str, wants: list[Want], *, done: str = "") -> None:
        self.name, self.wants, self.done = name, wants, done

    def read(self, ctx: Context) -> Any:
        return [read_file(None, w.path) for w in self.wants]

    def decide(self, snapshot: Any) -> Assessment:
        return decide(self.name, self.wants, snapshot)

    def plan_text(self, d: Assessment, round_no: int) -> str:
        return ""

    def done_text(self, first: Assessment, final: Assessment, ran: list[Action], *, dry_run: bool) -> str:
        if dry_run:
            return "".join(f"would {a.describe}\n" + (a.diff or "") for a in first.actions)
        return f"{self.done}\n" if self.done else ""

    def refusal(self, d: Assessment, ran: int) -> HostctlError:
        return FailedError(f"{self.name} part refused", details=[r.reason for r in d.refusals])

    def consent(self, d: Assessment) -> list[Request]:
        return []


def decide(part: str, wants: list[Want], now: list[FileNow]) -> Assessment:
    """Pure: an action per wanted file whose bytes (or wanted mode) differ from what is there."""
    d = Assessment(part)
    for w, have in zip(wants, now):
        step = f"{part}/{Path(w.path).name}"
        data = w.text.encode() if isinstance(w.text, str) else w.text
        if have.data == data and (w.mode is None or have.mode == w.mode):
            d.add(Settled(id=step, what=f"{w.path} as wanted"))
            continue
        verb = "create" if have.data is None else "replace"
        diff = preview(w.path, have, w.text, w.mode, hidden="it quotes the recipe" if w.secret else None)
        mode = f", mode {w.mode:04o}" if w.mode is not None else ""
        d.add(Action(step=step, describe=f"{verb} {w.path} ({len(data)} bytes{mode})", run=_writer(w),
                     diff=diff, changes=w.path, why=w.why, writes=w.path))
    return d


def preview(name: str, have: FileNow, want: str | bytes, mode: int | None, *, hidden: str | None = None,
            labels: tuple[str, str] | None = None) -> str:
    """What replacing `have` with `want` (and `mode`, where one is wanted) changes, as a dry run
    shows it: a mode alone, a unified diff, or only the file's name for one whose text must not be
    shown (`hidden`: why) or is not text. labels: the diff's two file names (default: `name`)."""
    data = want.encode() if isinstance(want, str) else want
    if have.data == data:
        return f"{name}: mode {have.mode:o} -> {mode:o}\n" if have.mode is not None and mode is not None else ""
    state = "new" if have.data is None else "changes"
    if hidden is not None:
        return f"{name}: {state} ({hidden}: not shown)\n"
    if isinstance(want, bytes):
        return f"{name}: {state} ({len(data)} bytes, not text: not shown)\n"
    now_label, want_label = labels or (name, name)
    return "".join(difflib.unified_diff((have.text or "").splitlines(True), want.splitlines(True),
                                       fromfile=now_label if have.text is not None else "/dev/null",
                                       tofile=want_label))


def _writer(w: Want):
    def run() -> None:
        from hostctl.safefs import write_file

        write_file(w.path, w.text, mode=w.mode, owner=w.owner,
                   before_replace=lambda: hooks.write(w.path))

    return run
