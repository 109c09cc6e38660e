"""Consent for destructive actions, asked by the executor before any of them runs. `--yes`
consents for drives that are blank or carry hostctl's own layout; otherwise the user types the
drive's identity value (its serial, WWN, by-id name or path) at a terminal. Without a terminal
nobody can be asked: refused (exit 3). Erasing foreign contents also needs `--erase IDENTITY`,
which the storage part checks before it decides the action."""

from __future__ import annotations

from typing import TextIO

from hostctl.data import Data
from hostctl.errors import RefusedError


class Request(Data):
    drive: str  # the drive's name in the profile
    identity: str  # as written in the profile, e.g. serial:25120G800101
    answer: str  # what the user must type: the identity's value
    what: str  # what will be destroyed, one line
    review: str = "hostctl provision --only storage --dry-run"  # the command that shows the plan first


def obtain(requests: list[Request], *, yes: bool, stdin: TextIO, stderr: TextIO) -> None:
    """Return when every request is consented to; raise RefusedError otherwise. All questions are
    asked before anything runs, so a refusal on the second drive leaves the first untouched too."""
    if not requests or yes:
        return
    if not stdin.isatty():
        names = ", ".join(f"{r.drive} ({r.identity})" for r in requests)
        raise RefusedError(
            f"destructive steps on {names} need consent, and stdin is not a terminal to ask",
            fix="re-run at a terminal to type each drive's identity, or pass --yes after reading the plan "
                f"(`{requests[0].review}`)",
        )
    for r in requests:
        stderr.write(f"\n{r.drive} ({r.identity}): {r.what}\nType {r.answer} to continue: ")
        stderr.flush()
        typed = stdin.readline()
        if typed.strip() != r.answer:
            raise RefusedError(
                f"consent for {r.drive} not given: typed {typed.strip()!r}, expected {r.answer!r}; nothing was changed",
                fix="re-run and type the identity exactly, or pass --yes",
            )
