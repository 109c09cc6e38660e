"""`docker compose up` and `down` are actions of the runtime part: up is decided on the first
look and verified by the container existing after it; down is decided only while the container
exists, and a look that finds none verifies it."""

from __future__ import annotations

from hostctl.facts.container import ContainerState
from hostctl.service.runtime_part import Look, decide

GONE, RUNNING = ContainerState(exists=False), ContainerState(exists=True, status="running")


def _d(goal, state, started=False):
    return decide(goal, Look(state=state, started=started), container="c", up=lambda: None, down=lambda: None)


def test_up_is_decided_once_and_verified_by_the_container_existing():
    assert [a.id for a in _d("start", RUNNING).actions] == ["runtime/up"]  # compose decides what to recreate
    assert not _d("start", ContainerState(exists=True, status="exited"), started=True).actions  # the watch diagnoses it
    assert [a.id for a in _d("start", GONE, started=True).actions] == ["runtime/up"]  # not converged


def test_down_only_while_the_container_exists():
    d = _d("stop", RUNNING)
    assert [a.id for a in d.actions] == ["runtime/down"] and "caches stay" in d.actions[0].describe
    d = _d("stop", GONE)
    assert not d.actions and d.settled[0].what == "c does not exist"


def test_up_dry_run_shows_the_files_and_the_compose_command_and_changes_nothing(tmp_path, monkeypatch):
    from pathlib import Path

    from hostctl.config import load_config
    from hostctl.facts import load_snapshot
    from hostctl.plan import build_plan
    from hostctl.service import lifecycle

    hosts = Path(__file__).resolve().parents[2] / "runtime" / "hosts"
    cfg = load_config(hosts / "demo-cpu.toml")
    plan = build_plan(cfg, load_snapshot(hosts / "demo-cpu.facts.json"))
    target = tmp_path / "project"
    monkeypatch.setattr(lifecycle, "project_dir", lambda config: target)
    lines: list[str] = []
    report = lifecycle.preview(cfg, plan, say=lines.append)
    text = "\n".join(lines)
    assert not target.exists() and report.dry_run
    assert [p.status for p in report.parts] == ["would-change", "would-change"]
    assert f"would render {target}" in text and "+services:" in text and "would docker compose up" in text


def _engine(monkeypatch, *, removes: bool, returncode: int = 0):
    """A container that `compose down` removes (or does not), seen through the part's own reads."""
    from hostctl.runner import Result
    from hostctl.facts import container
    from hostctl.service import compose

    there = {"c": True}
    calls: list[tuple] = []

    def down(project_dir, project, *, stop_timeout_s=30, timeout=300, new_session=False):
        calls.append((project_dir, project, stop_timeout_s, new_session))
        if removes:
            there["c"] = False
        return Result(argv=("docker", "compose", "down"), returncode=returncode, stdout="",
                      stderr="" if returncode == 0 else "Error response from daemon: conflict")

    monkeypatch.setattr(compose, "compose_down", down)
    monkeypatch.setattr(container, "container_state", lambda name: RUNNING if there[name] else GONE)
    return calls


def test_take_down_runs_compose_down_through_the_executor_and_verifies_the_container_gone(monkeypatch, tmp_path):
    from hostctl.service.runtime_part import take_down

    calls = _engine(monkeypatch, removes=True)
    lines: list[str] = []
    assert take_down(tmp_path, "p", "c", command="hostctl up", schema="s", say=lines.append, stop_timeout_s=5,
                     new_session=True) is None
    assert calls == [(tmp_path, "p", 5, True)]
    assert any("runtime/down" in line for line in lines)  # the executor's progress line


def test_take_down_says_why_when_compose_fails_or_the_container_stays(monkeypatch, tmp_path):
    from hostctl.service.runtime_part import take_down

    _engine(monkeypatch, removes=False, returncode=1)
    why = take_down(tmp_path, "p", "c", command="hostctl up", schema="s", say=lambda line: None)
    assert why == "docker compose down failed: Error response from daemon: conflict"
    _engine(monkeypatch, removes=False)
    why = take_down(tmp_path / "gone", "p", "c", command="hostctl up", schema="s", say=lambda line: None)
    assert why is not None and why.startswith("runtime did not converge")


def test_take_down_runs_compose_down_once_even_when_no_container_is_seen_yet(monkeypatch, tmp_path):
    # an interrupt during `compose up` can look before the engine has created the container
    from hostctl.service.runtime_part import take_down

    calls = _engine(monkeypatch, removes=True)
    take_down(tmp_path, "p", "c", command="hostctl up", schema="s", say=lambda line: None)
    assert take_down(tmp_path, "p", "c", command="hostctl up", schema="s", say=lambda line: None) is None
    assert len(calls) == 2  # once each, and the fresh look after it verifies the container gone
    # `down` itself (no debt) runs nothing for a container that does not exist
    from hostctl.act.inline import run_inline
    from hostctl.service.runtime_part import RuntimePart

    run_inline([RuntimePart("stop", project_dir=tmp_path, project="p", container="c")], command="hostctl down",
               schema="s", say=lambda line: None)
    assert len(calls) == 2
