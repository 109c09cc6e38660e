"""The Compose project `up` and `render` write goes through the one executor: only a project that
differs is written, a dry run shows the diff (runtime.env's secret text never) and writes nothing,
and a second run finds every file settled."""

from __future__ import annotations

import os

import pytest

from hostctl.errors import FailedError
from hostctl.service.project_part import decide, render_project
from hostctl.act.files import FileNow
from hostctl.service.render import read_project

FILES = {"compose.yaml": "services: {}\n", "runtime.env": "API_KEY='s3cret'\n"}


def _run(target, *, dry_run=False, files=FILES, check=None):
    lines: list[str] = []
    report = render_project(files, target, check=check, say=lines.append, dry_run=dry_run)
    return report, "\n".join(lines)


def test_first_run_writes_then_second_run_is_settled(tmp_path):
    target = tmp_path / "project"
    report, text = _run(target)
    assert [a.status for a in report.actions] == ["changed"]
    assert report.actions[0].id == "project/write"
    assert (target / "compose.yaml").read_text() == FILES["compose.yaml"]
    assert os.stat(target / "runtime.env").st_mode & 0o777 == 0o600
    assert f"rendered {target}" in text
    report, text = _run(target)
    assert {a.status for a in report.actions} == {"ok"} and report.parts[0].status == "converged"
    assert "(unchanged)" in text


def test_dry_run_shows_the_diff_without_the_secret_and_writes_nothing(tmp_path):
    target = tmp_path / "project"
    report, text = _run(target, dry_run=True)
    assert not target.exists()
    assert report.parts[0].status == "would-change"
    assert "+services: {}" in text and "s3cret" not in text
    assert "runtime.env: new (it holds the recipe's secrets: not shown)" in text


def test_a_changed_mode_is_written_again(tmp_path):
    target = tmp_path / "project"
    _run(target)
    os.chmod(target / "runtime.env", 0o644)
    d = decide(FILES, read_project(target, list(FILES)), target, write=lambda: None)
    assert [a.id for a in d.actions] == ["project/write"] and "mode 644 -> 600" in d.actions[0].diff


def test_a_rejected_project_writes_nothing_and_names_the_action(tmp_path):
    target = tmp_path / "project"

    def reject(path):
        raise FailedError("docker compose config rejected the rendered project; nothing was written")

    with pytest.raises(FailedError) as err:
        _run(target, check=reject)
    assert "rejected" in err.value.message and not target.exists()


def test_absent_files_are_actions():
    d = decide(FILES, [FileNow(name="compose.yaml", text=FILES["compose.yaml"], mode=0o644)],
               __import__("pathlib").Path("/p"), write=lambda: None)
    assert d.actions[0].describe == "write runtime.env into /p" and not d.settled
