import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
# CI installs every real part: there, a missing part must fail the test, not skip it.
IN_CI = os.environ.get("CI") == "true"


def _skip_unless(ok: bool, reason: str):
    return pytest.mark.skipif(not ok and not IN_CI, reason=reason)


def _has_compose() -> bool:
    return shutil.which("docker") is not None and subprocess.run(
        ["docker", "compose", "version"], capture_output=True).returncode == 0


needs_compose = _skip_unless(_has_compose(), "Docker Compose v2 not installed (.ci/run installs it)")
needs_root = _skip_unless(os.geteuid() == 0, "needs root")
needs_systemd_analyze = _skip_unless(shutil.which("systemd-analyze") is not None, "systemd-analyze not installed")


@pytest.fixture(autouse=True)
def _private_sysroot(tmp_path_factory, monkeypatch):
    """Every test writes hostctl's /etc and /var/lib files under its own temporary root unless it
    sets HOSTCTL_SYSROOT itself: a test that forgets must not change this machine."""
    monkeypatch.setenv("HOSTCTL_SYSROOT", str(tmp_path_factory.mktemp("sysroot")))


@pytest.fixture
def repo_root() -> Path:
    return ROOT
