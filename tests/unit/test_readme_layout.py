"""README's "Layout" section matches the tree: every top-level folder and every hostctl subpackage
is named there, and every folder or file it names exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _layout() -> str:
    text = (ROOT / "README.md").read_text()
    m = re.search(r"^## Layout\n(.*?)(?=^## )", text, re.M | re.S)
    assert m, "README.md has no '## Layout' section"
    return m.group(1)


def _named(section: str) -> set[str]:
    return set(re.findall(r"`([^`\s]+)`", section))


def test_every_top_level_folder_and_subpackage_is_named():
    named = _named(_layout())
    folders = {p.name + "/" for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")
               and not p.name.endswith(".egg-info") and p.name not in {"build", "dist", "__pycache__"}}
    packages = {p.parent.name + "/" for p in (ROOT / "hostctl").glob("*/__init__.py")}
    assert folders - named == set(), "top-level folders missing from README's Layout"
    assert packages - named == set(), "hostctl subpackages missing from README's Layout"


def test_every_path_it_names_exists():
    named = _named(_layout())
    top = {n for n in named if n.endswith("/") and "<" not in n}
    sub = {n for n in top if (ROOT / "hostctl" / n).is_dir()}
    missing = sorted(n for n in top - sub if not (ROOT / n).exists())
    files = {n for n in named if re.fullmatch(r"[\w./-]+\.\w+", n) and not n.endswith(".j2")}
    templates = {n for n in named if n.endswith(".j2")}
    missing += sorted(n for n in files if not (ROOT / n).exists())
    missing += sorted(n for n in templates if not any((ROOT / d / n).exists() for d in ("templates", "systemd")))
    assert missing == []
