"""The report of a run of the executor, one JSON shape for every command that acts: per part its
outcome (converged, ok, would-change, failed, refused, not-run), per action its outcome (ok,
changed, would-change, skipped, failed, refused) with its argv or diff and seconds, the warnings
of the last look at the host, and the error the run stopped at. Each command keeps its own schema
tag (`hostctl.provision/v1`, ...) in `schema`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import PrivateAttr

from hostctl import __version__
from hostctl.data import Data
from hostctl.errors import EXIT_OK, HostctlError

if TYPE_CHECKING:
    from hostctl.act.actions import Action, Assessment


class ActionOutcome(Data):
    part: str
    id: str
    status: Literal["ok", "changed", "would-change", "skipped", "failed", "refused"]
    describe: str = ""
    changes: str = ""
    why: str = ""
    argv: list[str] | None = None
    diff: str | None = None
    destructive: bool = False
    consent: str = "none"
    seconds: float | None = None
    reason: str | None = None
    output: list[str] | None = None
    round: int | None = None

    @classmethod
    def of(cls, a: Action, status: str, **kw: Any) -> ActionOutcome:
        d = a.to_dict()
        return cls(part=a.part, id=a.id, status=status, describe=d["describe"], changes=a.changes, why=a.why,
                   argv=d["argv"], diff=a.diff, destructive=a.destructive, consent=a.consent, **kw)


class PartOutcome(Data):
    part: str
    status: Literal["converged", "ok", "would-change", "failed", "refused", "not-run"]
    rounds: int = 0
    changed: int = 0
    reason: str | None = None
    pending: bool = False  # its last look decided more once its actions have run
    # the part's first and last Assessment (not data: they hold the actions), for its callers' text
    _first: Assessment | None = PrivateAttr(default=None)
    _final: Assessment | None = PrivateAttr(default=None)

    @property
    def first(self) -> Assessment | None:
        return self._first

    @first.setter
    def first(self, value: Assessment) -> None:
        self._first = value

    @property
    def final(self) -> Assessment | None:
        return self._final

    @final.setter
    def final(self, value: Assessment) -> None:
        self._final = value
        self.pending = value.pending


class PartNote(Data):
    part: str
    id: str
    severity: Literal["info", "warn"]
    message: str
    data: dict[str, Any] | None = None


class Report(Data):
    schema_tag: str  # the command's own: hostctl.provision/v1, ...
    dry_run: bool
    profile: str = ""
    only: str | None = None
    parts: list[PartOutcome] = []
    actions: list[ActionOutcome] = []
    warnings: list[PartNote] = []
    # the error the run stopped at, kept to be raised once the report is presented
    _error: HostctlError | None = PrivateAttr(default=None)

    @property
    def error(self) -> HostctlError | None:
        return self._error

    @error.setter
    def error(self, value: HostctlError) -> None:
        self._error = value

    def part(self, name: str) -> PartOutcome | None:
        return next((p for p in self.parts if p.part == name), None)

    @property
    def changed(self) -> int:
        return sum(p.changed for p in self.parts)

    def document(self) -> dict[str, Any]:
        err = self.error
        return {
            "schema": self.schema_tag, "hostctl": __version__, "profile": self.profile, "dry_run": self.dry_run,
            "only": self.only, "ok": err is None, "exit_code": err.exit_code if err else EXIT_OK,
            "parts": [p.model_dump(mode="json") for p in self.parts],
            "actions": [a.model_dump(mode="json") for a in self.actions],
            "warnings": [n.model_dump(mode="json") for n in self.warnings],
            "error": None if err is None else {"message": err.message, "details": err.details, "fix": err.fix,
                                               "exit_code": err.exit_code},
        }

    def raise_for_error(self) -> None:
        if self.error is not None:
            raise self.error
