"""The Pythons hostctl starts with `-c` never import from the caller's cwd (F10 of the adversarial
review): `python -c` puts the cwd first on sys.path, so a json.py or torch.py that another user
left in the folder the admin ran `sudo hostctl` from would run as root.

The attacker is `nobody` (uid 65534): the module is planted in a 1777 folder, owned by it, and
creates a marker when imported. The effect checked: no marker.
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from pathlib import Path

import pytest

from hostctl.config import load_config
from hostctl.facts import load_snapshot
from hostctl.gpu import harness
from hostctl.plan import build_plan
from hostctl.verify.connection import connect
from tests.need import needs

ROOT = Path(__file__).resolve().parents[2]
NOBODY = 65534
suite = importlib.import_module("hostctl.verify.suite")  # the package exports a function of that name
pytestmark = needs(os.geteuid() == 0, "needs root: the planted module is chowned to nobody")


def plant(tmp_path: Path, module: str) -> tuple[Path, Path]:
    """A shared 1777 folder with `module`.py of nobody's that writes a marker; (folder, marker)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    marker = tmp_path / f"PWNED-by-{module}"
    mod = shared / f"{module}.py"
    mod.write_text(f"open({str(marker)!r}, 'w').write('uid=%d' % __import__('os').getuid())\n")
    os.chown(mod, NOBODY, NOBODY)
    return shared, marker


def test_verify_endpoint_checks_do_not_import_a_json_py_from_the_cwd(tmp_path, monkeypatch):
    shared, marker = plant(tmp_path, "json")
    monkeypatch.chdir(shared)
    config = load_config(ROOT / "runtime" / "hosts" / "demo-cpu.toml")
    plan = build_plan(config, load_snapshot(ROOT / "runtime" / "hosts" / "demo-cpu.facts.json"))
    # port 9 (discard): nothing answers, so only the snippet's own start-up is exercised
    plan = plan.model_copy(update={"runtime": plan.runtime.model_copy(update={"api_port": 9})})
    ctx = types.SimpleNamespace(target=connect(None), plan=plan, config=config)
    got = suite._get(ctx, "/health")
    assert not marker.exists()
    assert got["status"] is None and "ConnectionRefusedError" in got["error"], got  # the snippet itself ran


def test_find_torch_python_does_not_import_a_torch_py_from_the_cwd(tmp_path, monkeypatch):
    shared, marker = plant(tmp_path, "torch")
    monkeypatch.chdir(shared)
    monkeypatch.setenv(harness.TORCH_PYTHON_ENV, sys.executable)
    harness.find_torch_python()
    assert not marker.exists()
