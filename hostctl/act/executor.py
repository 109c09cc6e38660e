"""The one executor: runs parts in order under one lock, each in rounds of read facts -> decide
(pure) -> print -> ask consent -> run the actions -> read again -> decide again, until the part
decides zero actions (it converged) or fails, naming the action and its output. --dry-run reads
and decides once per part, prints, and changes nothing.

Re-deciding after acting is the verification: a part is done when a fresh look at the host yields
no actions (then the caller may record it). It is also how a part whose first actions reveal more
(a drive whose partition table the kernel had not loaded) gets the rest of its work (an
Assessment that is `pending`), and why an interrupted run converges on the next one: each run
starts from what the host is, not from what an earlier run meant to do.

Every outcome is also kept as data in the run's Report (act/report.py).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack
from typing import Any, Protocol, TextIO

from hostctl.act import consent
from hostctl.act.actions import Action, Assessment, Note
from hostctl.act.report import ActionOutcome, PartNote, PartOutcome, Report
from hostctl.errors import FailedError, HostctlError, RefusedError

MAX_ROUNDS = 4


class Context:
    """What a part may know when it reads: whether this is a dry run, and what the parts before it
    decided last (a dry run judges a later part on the facts an earlier one would leave). A plain
    class: `held` holds what a part keeps until the whole run ends (the storage part's disk locks)."""

    def __init__(self, *, dry_run: bool, held: ExitStack) -> None:
        self.dry_run = dry_run
        self.earlier: dict[str, Assessment] = {}
        self.held = held


class Part(Protocol):
    name: str
    record: bool  # record convergence (False for a partial run, e.g. provision --boot)

    def read(self, ctx: Context) -> Any: ...  # fresh facts and files, every round

    def decide(self, snapshot: Any) -> Assessment: ...  # pure

    def plan_text(self, d: Assessment, round_no: int) -> str: ...  # before acting

    def done_text(self, first: Assessment, final: Assessment, ran: list[Action], *, dry_run: bool) -> str: ...

    def refusal(self, d: Assessment, ran: int) -> HostctlError: ...

    def consent(self, d: Assessment) -> list[consent.Request]: ...


def _ran_before(i: int, total: int, command: str) -> str:
    return (f"{i - 1} of {total} action(s) ran before this one failed; re-running `{command}` "
            "continues from what the host is now")


def run_action(a: Action, i: int, total: int, err: TextIO, command: str) -> float:
    """Run one action with its progress line on stderr; the seconds it took. A failure names the
    action and carries its output."""
    err.write(f"[{i}/{total}] {a.step}: {a.describe.splitlines()[0]}\n")
    err.flush()
    t0 = time.monotonic()
    try:
        a.run()
    except HostctlError as exc:
        exc.details = [*exc.details, _ran_before(i, total, command)]
        raise
    except OSError as exc:  # a directory or file edit (the commands report through the runner)
        raise FailedError(f"{a.step}: {exc.strerror or exc}" + (f": {exc.filename}" if exc.filename else ""),
                          details=[_ran_before(i, total, command)]) from exc
    took = time.monotonic() - t0
    err.write(f"        done in {took:.2f} s\n")
    return took


class Executor:
    """`command` is what a user re-runs (`hostctl provision`; it takes `--only PART`); `lock` is its
    own lock, taken for a real run (a dry run changes nothing: no lock); `record` is called with
    the name of each part that converged."""

    def __init__(self, *, command: str, lock: Callable[[], AbstractContextManager[Any]], dry_run: bool = False,
                 yes: bool = False, stdin: TextIO | None = None, out: TextIO | None = None, err: TextIO | None = None,
                 record: Callable[[str], None] | None = None) -> None:
        self.command, self.lock = command, lock
        self.dry_run, self.yes = dry_run, yes
        self.stdin, self.out, self.err = stdin or sys.stdin, out or sys.stdout, err or sys.stderr
        self.record_converged = record

    def run(self, parts: list[Part], report: Report) -> Report:
        """Every part in order; the first that fails (or refuses) stops the run and is kept in
        report.error (the parts after it are not run)."""
        with ExitStack() as stack:
            try:
                if not self.dry_run:
                    stack.enter_context(self.lock())
            except HostctlError as exc:
                report.error = exc
                report.parts += [PartOutcome(part=p.name, status="not-run", reason=f"not run: {exc.message}") for p in parts]
                return report
            self._parts(parts, report)
        return report

    def _parts(self, parts: list[Part], report: Report) -> None:
        with ExitStack() as held:
            self._each_part(parts, report, Context(dry_run=self.dry_run, held=held))

    def _each_part(self, parts: list[Part], report: Report, ctx: Context) -> None:
        for i, part in enumerate(parts):
            outcome = PartOutcome(part=part.name, status="failed")
            report.parts.append(outcome)
            try:
                self._part(part, ctx, report, outcome)
            except HostctlError as exc:
                outcome.status = "refused" if isinstance(exc, RefusedError) else "failed"
                outcome.reason = exc.message
                report.error = exc
                for later in parts[i + 1:]:
                    report.parts.append(PartOutcome(part=later.name, status="not-run",
                                                    reason=f"not run: the {part.name} part {outcome.status}"))
                break

    # ------------------------------------------------------------ one part

    def _part(self, part: Part, ctx: Context, report: Report, outcome: PartOutcome) -> None:
        consented: set[str] = set()
        ran: list[Action] = []
        expect_done = False
        first: Assessment | None = None
        d: Assessment | None = None
        for round_no in range(1, MAX_ROUNDS + 1):
            outcome.rounds = round_no
            try:
                d = part.decide(part.read(ctx))
            except HostctlError as exc:
                report.actions.append(ActionOutcome(part=part.name, id=part.name, status="failed", reason=exc.message,
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
                    report.actions.append(ActionOutcome(part=part.name, id=r.id, status="refused", reason=r.reason,
                                                        round=round_no))
                self._finish(report, part, first, d, ran)
                raise part.refusal(d, len(ran))
            if not d.actions:
                self._finish(report, part, first, d, ran)
                if d.failures:
                    raise FailedError(f"the {part.name} part failed", details=d.failures,
                                      fix=f"see each line above; re-run `{self.command} --only {part.name}` after "
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
                    report.actions.append(ActionOutcome.of(a, "would-change", round=round_no))
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
                        report.actions.append(ActionOutcome.of(a, "refused", reason=exc.message, round=round_no))
                raise
            consented |= {r.drive for r in need}
            total = len(d.actions)
            for i, a in enumerate(d.actions, 1):
                try:
                    took = run_action(a, i, total, self.err, self.command)
                except HostctlError as exc:
                    report.actions.append(ActionOutcome.of(a, "failed", reason=exc.message, output=exc.details or None,
                                                    round=round_no))
                    for rest in d.actions[i:]:
                        report.actions.append(ActionOutcome.of(rest, "skipped", reason=f"not run: {a.step} failed before it",
                                                        round=round_no))
                    outcome.changed = len(ran)
                    self._finish(report, part, first, d, ran)
                    raise
                report.actions.append(ActionOutcome.of(a, "changed", seconds=round(took, 3), round=round_no))
                ran.append(a)
            outcome.changed = len(ran)
            expect_done = not d.pending
        assert d is not None
        self._finish(report, part, first or d, d, ran)
        raise FailedError(f"{part.name} did not converge in {MAX_ROUNDS} rounds", details=[a.step for a in d.actions])

    def _finish(self, report: Report, part: Part, first: Assessment, final: Assessment, ran: list[Action]) -> None:
        """The ok, skipped and warning records of a part: what was already as desired before this
        run touched it (a settled item of the final look that no action of this run changed),
        what it does not do here, and the warnings of the last look at the host."""
        changed = [a.id for a in ran]
        for s in final.settled:
            if not any(c == s.id or c.startswith(s.id + "/") for c in changed):
                report.actions.append(ActionOutcome(part=part.name, id=s.id, status="ok", describe=s.what))
        for s in final.skipped:
            report.actions.append(ActionOutcome(part=part.name, id=s.id, status="skipped", reason=s.reason))
        seen = {(w.id, w.message) for w in report.warnings}
        for n in final.warnings:
            if (n.id, n.message) not in seen:
                report.warnings.append(_note(part.name, n))


def _note(part: str, n: Note) -> PartNote:
    return PartNote(part=part, id=n.id, severity=n.severity, message=n.message, data=n.data)
