"""Plain files a command owns (tune's knob files and results) go through the one executor: a
file that differs is replaced and read back, one that matches is settled, a dry run shows the
diff (a secret file's text never) and writes nothing, and a planted link is replaced, not followed."""

from __future__ import annotations

import os

from hostctl.act.files import FilesPart, Want, decide, read_file
from hostctl.act.inline import run_inline


def _run(wants, *, dry_run=False):
    lines: list[str] = []
    report = run_inline([FilesPart("t", wants)], command="hostctl t", schema="t/v1", say=lines.append,
                        dry_run=dry_run)
    return report, "\n".join(lines)


def test_a_file_that_differs_is_written_then_settled(tmp_path):
    want = Want(path=str(tmp_path / "k" / "VAR"), text="4\n", why="the trial's value")
    report, text = _run([want])
    assert [(a.id, a.status) for a in report.actions] == [("t/VAR", "changed")]
    assert (tmp_path / "k" / "VAR").read_text() == "4\n" and "[1/1] t/VAR: create" in text
    report, _ = _run([want])
    assert [(a.id, a.status) for a in report.actions] == [("t/VAR", "ok")]
    report, _ = _run([want.model_copy(update={"text": "8\n"})])
    assert [a.status for a in report.actions] == ["changed"] and (tmp_path / "k" / "VAR").read_text() == "8\n"


def test_dry_run_writes_nothing_and_hides_a_secret_file(tmp_path):
    wants = [Want(path=str(tmp_path / "a"), text="plain\n"),
             Want(path=str(tmp_path / "s"), text="HF_TOKEN: hf_x\n", mode=0o600, secret=True)]
    report, text = _run(wants, dry_run=True)
    assert not any(tmp_path.iterdir()) and {a.status for a in report.actions} == {"would-change"}
    assert "+plain" in text and "hf_x" not in text and "(it quotes the recipe: not shown)" in text


def test_a_wanted_mode_is_verified(tmp_path):
    p = tmp_path / "s"
    p.write_text("x\n")
    os.chmod(p, 0o644)
    want = Want(path=str(p), text="x\n", mode=0o600)
    d = decide("t", [want], [read_file(None, str(p))])
    assert "mode 644 -> 600" in d.actions[0].diff
    _run([want])
    assert os.stat(p).st_mode & 0o777 == 0o600


def test_a_planted_link_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "VAR").symlink_to(victim)
    assert read_file(None, str(tmp_path / "VAR")).text is None
    _run([Want(path=str(tmp_path / "VAR"), text="1\n")])
    assert victim.read_text() == "keep\n" and (tmp_path / "VAR").read_text() == "1\n"


def test_bytes_are_written_never_shown_and_then_settled(tmp_path):
    png = b"\x89PNG\r\n\x1a\n\xff\x00"  # not UTF-8: compared as bytes, not as text
    want = Want(path=str(tmp_path / "c.png"), text=png)
    report, text = _run([want], dry_run=True)
    assert not (tmp_path / "c.png").exists() and "c.png: new (10 bytes, not text: not shown)" in text
    report, _ = _run([want])
    assert [a.status for a in report.actions] == ["changed"] and (tmp_path / "c.png").read_bytes() == png
    report, _ = _run([want])
    assert [a.status for a in report.actions] == ["ok"]
    report, text = _run([want.model_copy(update={"text": png + b"\x01"})], dry_run=True)
    assert [a.status for a in report.actions] == ["would-change"] and "changes (11 bytes" in text
