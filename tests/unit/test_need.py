"""The one skip helper (tests/need.py): a missing part skips on a developer's machine and fails
under CI=true; and no test outside tests/gpu skips any other way."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CASES = "tests/unit/data/need_cases.py"
# pytest's own ways to skip; only tests/need.py (and the GPU tier, which may skip) call them
SKIPS = re.compile(r"pytest\.skip\(|pytest\.importorskip\(|mark\.skipif\b|mark\.skip\b|\bimportorskip\(")


def _outcomes(ci: str | None) -> tuple[dict[str, str], str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    if ci is not None:
        env["CI"] = ci
    res = subprocess.run([sys.executable, "-m", "pytest", "-v", "-p", "no:cacheprovider", CASES],
                         capture_output=True, text=True, cwd=ROOT, env=env, timeout=120)
    return dict(re.findall(r"::(\w+) (PASSED|SKIPPED|FAILED|ERROR)", res.stdout)), res.stdout + res.stderr


EXPECTED = ["test_call_with_a_missing_part", "test_mark_with_a_missing_part", "test_module_that_is_missing"]


def test_a_missing_part_skips_on_a_developers_machine():
    got, text = _outcomes(None)
    assert got == {"test_present_part_runs": "PASSED", **{n: "SKIPPED" for n in EXPECTED}}, text


def test_a_missing_part_fails_under_ci():
    got, text = _outcomes("true")
    # a mark fails the test at setup, which pytest reports as an error: the run is red either way
    assert got == {"test_present_part_runs": "PASSED", **{n: "FAILED" for n in EXPECTED},
                   "test_mark_with_a_missing_part": "ERROR"}, text
    assert "a part this test needs is missing: part-B is missing" in text
    assert "a test whose part is missing must not run" not in text  # the mark stops it before its body


def test_no_test_outside_the_gpu_tier_skips_by_itself():
    tests = ROOT / "tests"
    offenders = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}"
                 for p in sorted(tests.rglob("*.py"))
                 if p.relative_to(tests).parts[0] != "gpu" and p != tests / "need.py" and p != Path(__file__)
                 for i, line in enumerate(p.read_text().splitlines(), 1) if SKIPS.search(line)]
    assert offenders == [], "skip through tests/need.py (need, needs, need_module, missing):\n" + "\n".join(offenders)
