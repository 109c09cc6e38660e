"""The one way a test outside tests/gpu says that a part it needs is missing here.

On a developer's machine a missing part (Docker, root, a tool, a wheel) skips the test with the
reason. Under CI=true every real part is installed (test.sh), so the same call fails the test
instead: a part that went missing from CI must turn the run red, not quietly shrink it.
tests/unit/test_need.py checks that no test outside tests/gpu and this module skips by itself.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import NoReturn

import pytest

IN_CI = os.environ.get("CI") == "true"
MARK = "need"  # @needs(...) marks are read by tests/conftest.py before each test runs


def missing(reason: str) -> NoReturn:
    """Skip with the reason; under CI=true fail with it."""
    if IN_CI:
        pytest.fail(f"CI=true and a part this test needs is missing: {reason}", pytrace=False)
    pytest.skip(reason)


def need(ok: object, reason: str) -> None:
    """Inside a test or fixture: go on only when ok is true."""
    if not ok:
        missing(reason)


def needs(ok: object, reason: str) -> pytest.MarkDecorator:
    """A mark (for a test, a class or a module's pytestmark) that calls need(ok, reason) at setup."""
    return getattr(pytest.mark, MARK)(ok=bool(ok), reason=reason)


def check_marks(item: pytest.Item) -> None:
    for mark in item.iter_markers(MARK):
        need(mark.kwargs["ok"], mark.kwargs["reason"])


def need_module(name: str, reason: str | None = None) -> ModuleType:
    """The module, imported; pytest.importorskip's rule, through missing()."""
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        missing(reason or f"cannot import {name}: {exc}")
