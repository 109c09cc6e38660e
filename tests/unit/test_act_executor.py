"""The one executor (hostctl/act/executor.py) on small parts whose "host" is a dict: it re-reads
and re-decides until a part yields no action, runs nothing under --dry-run, stops at the first
failure naming the action and its output, asks consent before anything destructive runs, takes
the command's lock for the whole run, records convergence, and reports everything as one
versioned JSON document."""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass, field

import pytest

from hostctl import paths
from hostctl.act import consent
from hostctl.act.actions import Action, Assessment, Note, Refusal, Settled, Skipped
from hostctl.act.executor import Executor
from hostctl.act.lock import HostLock
from hostctl.act.report import Report
from hostctl.errors import FailedError, RefusedError

SCHEMA = "hostctl.example/v1"


def example_lock() -> HostLock:
    return HostLock("example", paths.state_dir() / "example.lock", fix="wait for it to finish, then re-run")


@dataclass
class Counter:
    """A part that wants host[key] == want, one step per action; `stall` makes an action that
    succeeds but changes nothing (a command that lies); `fail_at` one that fails."""

    key: str
    want: int
    host: dict
    name: str = "storage"
    record: bool = True
    stall: bool = False
    fail_at: int | None = None
    per_round: int = 1  # actions decided per look (the rest shows up on the next round: pending)
    destructive: bool = False
    refuse: str | None = None
    reads: list = field(default_factory=list)

    def read(self, ctx):
        self.reads.append(ctx.dry_run)
        return dict(self.host)

    def decide(self, snap) -> Assessment:
        d = Assessment(self.name)
        have = snap.get(self.key, 0)
        if self.refuse:
            d.add(Refusal(id=f"{self.name}/{self.key}", reason=self.refuse))
            return d
        if have >= self.want:
            d.add(Settled(id=f"{self.name}/{self.key}", what=f"{self.key} is {have}"))
        steps = list(range(have, self.want))
        for i in steps[: self.per_round]:
            d.add(Action(f"{self.name}/{self.key}/{i}", f"step {self.key} {i} -> {i + 1}", run=self._step(i),
                         argv=("step", str(i)), destructive=self.destructive, consent="yes" if self.destructive else "none",
                         why="the profile wants more"))
        d.pending = len(steps) > self.per_round
        d.add(Skipped(id=f"{self.name}/other", reason="nothing else here"))
        d.add(Note(id=f"{self.name}/note", message="a warning"))
        return d

    def _step(self, i):
        def run():
            if self.fail_at == i:
                raise FailedError(f"{self.name}/{self.key}/{i}: step exited 1: disk on fire", details=["last line"])
            if not self.stall:
                self.host[self.key] = i + 1

        return run

    def plan_text(self, d, round_no):
        return f"plan {self.name} round {round_no}: {len(d.actions)} action(s)\n"

    def done_text(self, first, final, ran, *, dry_run):
        return f"{self.name}: {len(ran)} ran\n"

    def refusal(self, d, ran):
        return RefusedError(f"{self.name} refused: {d.refusals[0].reason}")

    def consent(self, d):
        return ([consent.Request(drive=self.key, identity=f"path:/dev/{self.key}", answer=self.key, what="writes")]
                if self.destructive else [])


def run(parts, **kw):
    recorded: list[str] = []
    out, err = io.StringIO(), io.StringIO()
    kw.setdefault("yes", True)
    report = Executor(command="hostctl example", lock=example_lock, out=out, err=err, record=recorded.append,
                      **kw).run(parts, Report(schema_tag=SCHEMA, dry_run=kw.get("dry_run", False)))
    return report, out.getvalue(), err.getvalue(), recorded


def statuses(report: Report):
    return [(r.id, r.status) for r in report.actions]


def test_runs_reads_again_and_decides_again_until_nothing_is_left():
    host: dict = {}
    part = Counter("a", 3, host, per_round=1)
    report, out, err, recorded = run([part])
    assert host == {"a": 3} and report.error is None
    assert report.part("storage").status == "converged" and report.part("storage").rounds == 4
    assert [s for _, s in statuses(report) if s == "changed"] == ["changed"] * 3
    assert "[1/1] storage/a/0: step a 0 -> 1" in err and "done in" in err  # progress on stderr
    assert out.startswith("plan storage round 1") and out.endswith("storage: 3 ran\n")
    assert recorded == ["storage"]
    # the re-run is all ok: nothing changed, the part converged again
    again, out, err, recorded = run([part])
    assert {s for _, s in statuses(again)} == {"ok", "skipped"} and err == ""
    assert again.part("storage").rounds == 1 and recorded == ["storage"]


def test_dry_run_runs_nothing_takes_no_lock_and_records_nothing(monkeypatch):
    host: dict = {}
    report, out, err, recorded = run([Counter("a", 2, host)], dry_run=True)
    assert host == {} and err == "" and recorded == []
    assert statuses(report)[0] == ("storage/a/0", "would-change")
    assert report.part("storage").status == "would-change"
    assert not (paths.state_dir() / "example.lock").exists()


def test_an_action_that_changes_nothing_is_a_failure_naming_it():
    report, _, _, recorded = run([Counter("a", 1, {}, stall=True)])
    assert isinstance(report.error, FailedError) and "storage did not converge" in report.error.message
    assert "storage/a/0: step a 0 -> 1" in report.error.details[0] and recorded == []


def test_a_failed_action_stops_the_run_with_its_output_and_skips_the_rest():
    host: dict = {}
    first = Counter("a", 3, host, fail_at=1, per_round=3)
    later = Counter("b", 1, host, name="system")
    report, out, err, recorded = run([first, later])
    assert host == {"a": 1}
    assert statuses(report)[:3] == [("storage/a/0", "changed"), ("storage/a/1", "failed"), ("storage/a/2", "skipped")]
    failed = report.actions[1]
    assert "disk on fire" in failed.reason and failed.output[0] == "last line"
    assert report.error.details[-1] == ("1 of 3 action(s) ran before this one failed; re-running `hostctl example` "
                                       "continues from what the host is now")
    assert [(p.part, p.status) for p in report.parts] == [("storage", "failed"), ("system", "not-run")]
    assert later.reads == [] and recorded == []


def test_consent_is_asked_before_anything_destructive_runs():
    host: dict = {}
    part = Counter("a", 1, host, destructive=True)
    report, _, _, _ = run([part], yes=False, stdin=io.StringIO(""))  # not a terminal: nobody can be asked
    assert isinstance(report.error, RefusedError) and host == {}
    assert statuses(report)[0] == ("storage/a/0", "refused")
    report, _, _, _ = run([part], yes=True)
    assert host == {"a": 1} and report.error is None


def test_a_refusal_stops_before_anything_runs():
    host: dict = {}
    report, out, _, _ = run([Counter("a", 1, host, refuse="it is mounted"), Counter("b", 1, host, name="system")])
    assert host == {} and report.error.exit_code == 3 and "it is mounted" in report.error.message
    assert ("storage/a", "refused") in statuses(report)
    assert report.part("system").status == "not-run"


def test_one_lock_for_the_whole_run():
    with example_lock():
        report, _, _, _ = run([Counter("a", 1, {})])
    assert isinstance(report.error, FailedError) and "another hostctl example is running" in report.error.message
    assert f"pid {os.getpid()}" in report.error.message  # the holder is named


def test_later_parts_see_what_earlier_ones_decided_in_a_dry_run():
    seen = {}

    class Later(Counter):
        def read(self, ctx):
            seen.update(ctx.earlier)
            return super().read(ctx)

    run([Counter("a", 1, {}), Later("b", 0, {}, name="system")], dry_run=True)
    assert [a.id for a in seen["storage"].actions] == ["storage/a/0"]


def test_the_document_is_one_versioned_json_value():
    host: dict = {}
    report, _, _, _ = run([Counter("a", 1, host)])
    doc = json.loads(json.dumps(report.document()))
    assert doc["schema"] == SCHEMA and doc["ok"] and doc["exit_code"] == 0
    (changed,) = [a for a in doc["actions"] if a["status"] == "changed"]
    assert changed["argv"] == ["step", "0"] and changed["why"] == "the profile wants more" and changed["seconds"] >= 0
    assert {"part", "id", "status", "argv", "diff", "destructive", "consent", "seconds", "reason"} <= set(changed)
    assert [(a["id"], a["reason"]) for a in doc["actions"] if a["status"] == "skipped"] == [
        ("storage/other", "nothing else here")]
    assert doc["warnings"] == [{"part": "storage", "id": "storage/note", "severity": "warn", "message": "a warning",
                                "data": None}]
    failed, _, _, _ = run([Counter("b", 1, {}, fail_at=0)])
    doc = failed.document()
    assert not doc["ok"] and doc["exit_code"] == 1 and "disk on fire" in doc["error"]["message"]


@pytest.mark.parametrize("dry_run", [False, True])
def test_a_part_whose_decide_fails_is_reported_and_stops_the_run(dry_run):
    class Broken(Counter):
        def decide(self, snap):
            raise FailedError("the plan has errors; no unit was installed")

    report, _, _, _ = run([Broken("a", 1, {}, name="system"), Counter("b", 1, {}, name="gpu")], dry_run=dry_run)
    assert statuses(report)[0] == ("system", "failed") and report.part("gpu").status == "not-run"
    assert report.error.exit_code == 1
