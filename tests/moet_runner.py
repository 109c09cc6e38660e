"""vLLM-MoET's own bench runner, imported from ../shared/vllm-moet-bench for the differential tests.

The copy there is verbatim (its ORIGIN.md); nothing of it is copied into this repository. Its
modules import each other by bare name (`import common`), as `runner/bench.py` does by putting
its own folder first on sys.path, so they are loaded the same way here, once per test session,
and then kept under those names in sys.modules (no module of hostctl or its tests uses them).

`bench_dir()` is where the copy lives: beside this checkout (`../shared`, as CI lays it out),
else /work/shared. Under CI=true its absence fails the test that asked (tests/need.py).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType

from need import need

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = (ROOT.parent / "shared" / "vllm-moet-bench", Path("/work/shared/vllm-moet-bench"))
RUNNER_MODULES = ("common", "integrity", "probes", "serverctl", "sweep")


def find_bench_dir() -> Path | None:
    return next((p for p in CANDIDATES if (p / "runner" / "common.py").is_file()), None)


def bench_dir() -> Path:
    found = find_bench_dir()
    need(found, "vLLM-MoET's bench copy is not beside this checkout (../shared/vllm-moet-bench)")
    return found


def bench_copy(part: str) -> Path:
    """A folder of the copy (recipes, suites, boxes); a path that does not exist when there is none, so a
    glob over it finds nothing and the test that counts its files says so."""
    found = find_bench_dir()
    return (found or CANDIDATES[0]) / part


def recipe_ids() -> list[str]:
    """Every recipe of the copy as vLLM-MoET names it (`<model>/<config>`), without importing it."""
    found = find_bench_dir()
    if found is None:
        return []
    return sorted(f"{p.parent.name}/{p.stem}" for p in (found / "recipes").glob("*/*.yaml"))


def suite_names() -> list[str]:
    found = find_bench_dir()
    return sorted(p.stem for p in (found / "suites").glob("*.yaml")) if found else []


def box_files() -> list[Path]:
    found = find_bench_dir()
    return sorted((found / "boxes").glob("*.yaml")) if found else []


def runner() -> dict[str, ModuleType]:
    """vLLM-MoET's runner modules by their own names: common, integrity, probes, serverctl, sweep."""
    folder = str(bench_dir() / "runner")
    loaded = {}
    for name in RUNNER_MODULES:
        mod = sys.modules.get(name)
        if mod is not None and not str(getattr(mod, "__file__", "")).startswith(folder):
            raise RuntimeError(f"a module named {name!r} from {mod.__file__} is already imported; vLLM-MoET's runner "
                               "needs that name")
    if folder not in sys.path:
        sys.path.insert(0, folder)
    try:
        for name in RUNNER_MODULES:
            loaded[name] = importlib.import_module(name)
    finally:
        sys.path.remove(folder)
    return loaded
