"""The bundled examples (runtime/hosts/<name>.toml + <name>.facts.json) and their rendered
output under compose/<name>/, which `python3 -m hostctl.examples` regenerates and a test
keeps current."""

from __future__ import annotations

import sys
from pathlib import Path

from hostctl import paths
from hostctl.config import Config, load_config
from hostctl.facts import load_snapshot
from hostctl.facts.records import HostFacts
from hostctl.plan import build_plan
from hostctl.service.render import render_files


def names() -> list[str]:
    return sorted(p.stem for p in paths.hosts_dir().glob("*.toml") if (p.with_suffix(".facts.json")).is_file())


def load(name: str) -> tuple[Config, HostFacts]:
    base = paths.hosts_dir() / name
    return load_config(base.with_suffix(".toml")), load_snapshot(base.with_suffix(".facts.json"))


def rendered(name: str) -> dict[str, str]:
    config, facts = load(name)
    return render_files(build_plan(config, facts))


def regenerate(root: Path | None = None) -> list[Path]:
    from hostctl.service.render import write_files

    root = root or paths.golden_dir()
    written: list[Path] = []
    for name in names():
        written += write_files(rendered(name), root / name)
    return written


if __name__ == "__main__":
    for path in regenerate():
        print(path)
    sys.exit(0)
