"""The one executor of `hostctl provision`: runs the parts in order under one lock, each in rounds
of read facts -> decide (pure) -> print -> ask consent -> run the actions -> read again -> decide
again, until the part decides zero actions (it converged) or fails, naming the action and its
output. --dry-run reads and decides once per part, prints, and changes nothing.

Re-deciding after acting is the verification: a part is provisioned when a fresh look at the host
yields no actions (then it is recorded in hostctl's state, for `hostctl verify`). It is also how
a drive whose partition table the kernel had not loaded gets the rest of its plan (a decision
that is `pending`), and why an interrupted run converges on the next one: each run starts from
what the host is, not from what an earlier run meant to do.

Every outcome is also kept as data, one record per action (ok, changed, would-change, skipped,
failed, refused) with its argv or diff and seconds, for `provision --json` (hostctl.provision/v1).
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol, TextIO

from hostctl import __version__, paths
from hostctl.errors import EXIT_OK, FailedError, HostctlError, RefusedError
from hostctl.provision import consent
from hostctl.provision.actions import Action, Decision, Note

MAX_ROUNDS = 4
LOCK_FILE = "provision.lock"
SCHEMA = "hostctl.provision/v1"


@dataclass
class Context:
    """What a part may know when it reads: whether this is a dry run, and what the parts before it
    decided last (a dry run judges a later part on the facts an earlier one would leave)."""

    dry_run: bool
    earlier: dict[str, Decision] = field(default_factory=dict)
    # what a part holds until the whole run ends (the disk locks of the storage part)
    held: ExitStack = field(default_factory=ExitStack)


class Part(Protocol):
    name: str
    record: bool  # record convergence in hostctl's state (False for a partial run, e.g. --boot)

    def read(self, ctx: Context) -> Any: ...  # fresh facts and files, every round

    def decide(self, snapshot: Any) -> Decision: ...  # pure

    def plan_text(self, d: Decision, round_no: int) -> str: ...  # before acting

    def done_text(self, first: Decision, final: Decision, ran: list[Action], *, dry_run: bool) -> str: ...

    def refusal(self, d: Decision, ran: int) -> HostctlError: ...

    def consent(self, d: Decision) -> list[consent.Request]: ...


@dataclass
class Record:
    part: str
    id: str
    status: str  # ok | changed | would-change | skipped | failed | refused
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
    def of(cls, a: Action, status: str, **kw: Any) -> "Record":
        d = a.to_dict()
        return cls(part=a.part, id=a.id, status=status, describe=d["describe"], changes=a.changes, why=a.why,
                   argv=d["argv"], diff=a.diff, destructive=a.destructive, consent=a.consent, **kw)

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items()}


@dataclass
class PartOutcome:
    part: str
    status: str  # converged | ok | would-change | failed | refused | not-run
    rounds: int = 0
    changed: int = 0
    reason: str | None = None
    first: Decision | None = None
    final: Decision | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"part": self.part, "status": self.status, "rounds": self.rounds, "changed": self.changed,
                "reason": self.reason, "pending": bool(self.final and self.final.pending)}


@dataclass
class Report:
    dry_run: bool
    profile: str = ""
    only: str | None = None
    parts: list[PartOutcome] = field(default_factory=list)
    records: list[Record] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    error: HostctlError | None = None

    def part(self, name: str) -> PartOutcome | None:
        return next((p for p in self.parts if p.part == name), None)

    @property
    def changed(self) -> int:
        return sum(p.changed for p in self.parts)

    def document(self) -> dict[str, Any]:
        err = self.error
        return {
            "schema": SCHEMA, "hostctl": __version__, "profile": self.profile, "dry_run": self.dry_run,
            "only": self.only, "ok": err is None, "exit_code": err.exit_code if err else EXIT_OK,
            "parts": [p.to_dict() for p in self.parts],
            "actions": [r.to_dict() for r in self.records],
            "warnings": self.warnings,
            "error": None if err is None else {"message": err.message, "details": err.details, "fix": err.fix,
                                               "exit_code": err.exit_code},
        }

    def raise_for_error(self) -> None:
        if self.error is not None:
            raise self.error


@contextmanager
def provision_lock() -> Iterator[None]:
    """One lock for all of provision: a second run fails at once (naming the first) instead of
    deciding on a host the first one is changing. The same helper as up/down's lock."""
    from hostctl.service.lock import LifecycleLock

    with LifecycleLock("provision", paths.state_dir() / LOCK_FILE, fix="wait for it to finish, then re-run"):
        yield


DISK_LOCK_WAIT_S = 10.0


@contextmanager
def disk_lock(path: str) -> Iterator[None]:
    """An exclusive BSD lock on a whole disk while provision may write to it: the convention of
    systemd's block-device locking, which udev honours (it does not probe a locked disk) and which
    keeps a second hostctl (another state directory) or a partitioning tool that locks off it.
    udev's own short shared locks are waited out."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise FailedError(f"cannot open {path} to lock it: {exc.strerror or exc}") from exc
    try:
        deadline = time.monotonic() + DISK_LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise FailedError(f"{path} is locked by another process (a second `hostctl provision`, or a "
                                      f"partitioning tool) for more than {DISK_LOCK_WAIT_S:g} s",
                                      fix=f"find it with `fuser -v {path}` or `lslocks`, wait for it, then re-run") from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)


def _ran_before(i: int, total: int) -> str:
    return (f"{i - 1} of {total} action(s) ran before this one failed; re-running `hostctl provision` "
            "continues from what the host is now")


def run_action(a: Action, i: int, total: int, err: TextIO) -> float:
    """Run one action with its progress line on stderr; the seconds it took. A failure names the
    action and carries its output."""
    err.write(f"[{i}/{total}] {a.step}: {a.describe.splitlines()[0]}\n")
    err.flush()
    t0 = time.monotonic()
    try:
        a.run()
    except HostctlError as exc:
        exc.details = [*exc.details, _ran_before(i, total)]
        raise
    except OSError as exc:  # a directory or file edit (the commands report through the runner)
        raise FailedError(f"{a.step}: {exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""),
                          details=[_ran_before(i, total)]) from exc
    took = time.monotonic() - t0
    err.write(f"        done in {took:.2f} s\n")
    return took


def run_actions(actions: list[Action], err: TextIO) -> int:
    """Run in order, progress on stderr; stop at the first failure (a re-run continues from there)."""
    for i, a in enumerate(actions, 1):
        run_action(a, i, len(actions), err)
    return len(actions)


class Executor:
    def __init__(self, *, dry_run: bool = False, yes: bool = False, stdin: TextIO | None = None,
                 out: TextIO | None = None, err: TextIO | None = None,
                 record: Callable[[str], None] | None = None) -> None:
        self.dry_run, self.yes = dry_run, yes
        self.stdin, self.out, self.err = stdin or sys.stdin, out or sys.stdout, err or sys.stderr
        self.record_converged = record

    def run(self, parts: list[Part], report: Report | None = None) -> Report:
        """Every part in order; the first that fails (or refuses) stops the run and is kept in
        report.error (the parts after it are not run)."""
        report = report or Report(dry_run=self.dry_run)
        with ExitStack() as stack:
            try:
                if not self.dry_run:
                    stack.enter_context(provision_lock())
            except HostctlError as exc:
                report.error = exc
                report.parts += [PartOutcome(p.name, "not-run", reason=f"not run: {exc.message}") for p in parts]
                return report
            self._parts(parts, report)
        return report

    def _parts(self, parts: list[Part], report: Report) -> None:
        with ExitStack() as held:
            self._each_part(parts, report, Context(dry_run=self.dry_run, held=held))

    def _each_part(self, parts: list[Part], report: Report, ctx: Context) -> None:
        for i, part in enumerate(parts):
            outcome = PartOutcome(part.name, "failed")
            report.parts.append(outcome)
            try:
                self._part(part, ctx, report, outcome)
            except HostctlError as exc:
                outcome.status = "refused" if isinstance(exc, RefusedError) else "failed"
                outcome.reason = exc.message
                report.error = exc
                for later in parts[i + 1:]:
                    report.parts.append(PartOutcome(later.name, "not-run",
                                                    reason=f"not run: the {part.name} part {outcome.status}"))
                break

    # ------------------------------------------------------------ one part

    def _part(self, part: Part, ctx: Context, report: Report, outcome: PartOutcome) -> None:
        consented: set[str] = set()
        ran: list[Action] = []
        expect_done = False
        first: Decision | None = None
        d: Decision | None = None
        for round_no in range(1, MAX_ROUNDS + 1):
            outcome.rounds = round_no
            try:
                d = part.decide(part.read(ctx))
            except HostctlError as exc:
                report.records.append(Record(part.name, part.name, "failed", reason=exc.message,
                                             output=exc.details or None, round=round_no))
                raise
            first = first or d
            outcome.first, outcome.final = first, d
            if expect_done and d.actions:
                self._finish(report, part, first, d, ran)
                raise FailedError(
                    f"{part.name} did not converge: after {len(ran)} action(s) a fresh look at the host still needs "
                    f"{len(d.actions)}",
                    details=[f"{a.step}: {a.describe.splitlines()[0]}" for a in d.actions],
                    fix="look at the step named above (its command ran without an error); re-run to retry",
                )
            if round_no == 1 or d.actions or d.refusals:
                self.out.write(part.plan_text(d, round_no))
            if d.refusals:
                for r in d.refusals:
                    report.records.append(Record(part.name, r.id, "refused", reason=r.reason, round=round_no))
                self._finish(report, part, first, d, ran)
                raise part.refusal(d, len(ran))
            if not d.actions:
                self._finish(report, part, first, d, ran)
                if d.failures:
                    raise FailedError(f"the {part.name} part failed", details=d.failures,
                                      fix=f"see each line above; re-run `hostctl provision --only {part.name}` after "
                                          "fixing it")
                outcome.changed = len(ran)
                outcome.status = "ok" if self.dry_run else "converged"
                if not self.dry_run and self.record_converged and part.record:
                    self.record_converged(part.name)
                ctx.earlier[part.name] = d
                self.out.write(part.done_text(first, d, ran, dry_run=self.dry_run))
                return
            if self.dry_run:
                for a in d.actions:
                    report.records.append(Record.of(a, "would-change", round=round_no))
                self._finish(report, part, first, d, ran)
                outcome.status = "would-change"
                ctx.earlier[part.name] = d
                self.out.write(part.done_text(first, d, ran, dry_run=True))
                return
            need = [r for r in part.consent(d) if r.drive not in consented]
            try:
                consent.obtain(need, yes=self.yes, stdin=self.stdin, stderr=self.err)
            except RefusedError as exc:
                for a in d.actions:
                    if a.destructive:
                        report.records.append(Record.of(a, "refused", reason=exc.message, round=round_no))
                raise
            consented |= {r.drive for r in need}
            total = len(d.actions)
            for i, a in enumerate(d.actions, 1):
                try:
                    took = run_action(a, i, total, self.err)
                except HostctlError as exc:
                    report.records.append(Record.of(a, "failed", reason=exc.message, output=exc.details or None,
                                                    round=round_no))
                    for rest in d.actions[i:]:
                        report.records.append(Record.of(rest, "skipped", reason=f"not run: {a.step} failed before it",
                                                        round=round_no))
                    outcome.changed = len(ran)
                    self._finish(report, part, first, d, ran)
                    raise
                report.records.append(Record.of(a, "changed", seconds=round(took, 3), round=round_no))
                ran.append(a)
            outcome.changed = len(ran)
            expect_done = not d.pending
        assert d is not None
        self._finish(report, part, first or d, d, ran)
        raise FailedError(f"{part.name} did not converge in {MAX_ROUNDS} rounds", details=[a.step for a in d.actions])

    def _finish(self, report: Report, part: Part, first: Decision, final: Decision, ran: list[Action]) -> None:
        """The ok, skipped and warning records of a part: what was already as desired before this
        run touched it (a settled item of the final look that no action of this run changed),
        what it does not do here, and the warnings of the last look at the host."""
        changed = [a.id for a in ran]
        for s in final.settled:
            if not any(c == s.id or c.startswith(s.id + "/") for c in changed):
                report.records.append(Record(part.name, s.id, "ok", describe=s.what))
        for s in final.skipped:
            report.records.append(Record(part.name, s.id, "skipped", reason=s.reason))
        seen = {(w["id"], w["message"]) for w in report.warnings}
        for n in final.warnings:
            if (n.id, n.message) not in seen:
                report.warnings.append(_note(part.name, n))


def _note(part: str, n: Note) -> dict[str, Any]:
    return {"part": part, "id": n.id, "severity": n.severity, "message": n.message, "data": n.data}
