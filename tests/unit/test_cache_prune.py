"""`hostctl cache prune` through the one executor (hostctl.act) on cache directories laid out as
the runtime lays them out: the pure decision (a removal per unused generation and leftover, the
kept ones settled or skipped, a refusal while the runtime runs), --dry-run changes nothing, consent
as provision asks it, the guard right before removing, and the re-read that verifies."""

from __future__ import annotations

import io
from types import SimpleNamespace

import pytest

import cachelayout as cl
from hostctl.cache import prune
from hostctl.cache.act import CacheView
from hostctl.cache.decide import PlanKey, generations
from hostctl.facts.caches import Root, RunningRuntime, scan
from hostctl.errors import EXIT_REFUSED, RefusedError

CONFIG = SimpleNamespace(profile=SimpleNamespace(name="p", runtime=SimpleNamespace(project="hostctl-p")))


@pytest.fixture
def caches(tmp_path, monkeypatch):
    planes = tmp_path / "planes"
    planes.mkdir()
    cl.planes(planes, "c" * 64, world=2, layers=2)  # used
    old = cl.planes(planes, "d" * 64, world=2, layers=2)  # another checkpoint: unused
    leftover = planes / "v2" / ".hostctl-removing.0123456789abcdef0123"
    leftover.mkdir(parents=True)
    roots = [Root(kind="planes", path=str(planes), planned=True)]
    key = PlanKey(world=2, roots={"planes_cache": str(planes)}, ckpt_id="c" * 64, ckpt_reason="test")

    def view(config):
        facts = scan(roots)
        return CacheView(key=key, facts=facts, gens=generations(facts, key))

    running: list[RunningRuntime] = []
    monkeypatch.setattr(prune, "view", view)
    monkeypatch.setattr(prune, "running_runtimes", lambda profile, project: (running, None))
    return SimpleNamespace(old=old, leftover=leftover, running=running, view=view)


def run(**kw):
    out, err = io.StringIO(), io.StringIO()
    report = prune.prune(CONFIG, out=out, err=err, **kw)
    return report, out.getvalue(), err.getvalue()


def test_decide_is_one_removal_per_unused_generation_and_leftover(caches):
    d = prune.decide(prune.Snapshot(caches.view(CONFIG), [], None))
    assert len(d.actions) == 2 and all(a.destructive and a.consent == "yes" for a in d.actions)
    assert any(a.id == f"cache/{caches.leftover}" for a in d.actions)
    assert [s.what.split(": used")[0] for s in d.settled] == [f"keep {d.detail.keep[0].id}"] and not d.refusals


def test_dry_run_shows_and_changes_nothing(caches):
    report, out, _ = run(dry_run=True)
    assert report.error is None and report.parts[0].status == "would-change"
    assert out.count("would remove") == 2 and "dry run: 2 removal(s) shown" in out
    assert all(p.exists() for p in caches.old) and caches.leftover.exists()
    assert report.document()["schema"] == "hostctl.cache-prune/v1"


def test_no_terminal_no_consent(caches):
    report, _, _ = run(stdin=io.StringIO())
    assert isinstance(report.error, RefusedError) and "not a terminal" in report.error.message
    assert "hostctl cache prune --dry-run" in report.error.fix
    assert all(p.exists() for p in caches.old)


def test_refused_while_this_profiles_runtime_runs(caches):
    caches.running.append(RunningRuntime(name="rt", profile="p", ours=True))
    report, _, _ = run(yes=True)
    assert report.error.exit_code == EXIT_REFUSED and "runtime is running (rt" in report.error.message
    assert report.parts[0].status == "refused" and all(p.exists() for p in caches.old)
    assert run(dry_run=True)[0].error is None  # a dry run still shows what it would remove


def test_yes_removes_and_a_fresh_look_verifies(caches):
    report, out, err = run(yes=True)
    assert report.error is None and report.parts[0].status == "converged" and report.parts[0].rounds == 2
    assert not any(p.exists() for p in caches.old) and not caches.leftover.exists()
    assert out.count("removed ") == 2 and "verified" in out and "[2/2]" in err
    again, out, _ = run(yes=True)
    assert again.changed == 0 and "nothing to prune" in out
