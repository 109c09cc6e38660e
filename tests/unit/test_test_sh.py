"""./test.sh, the README's test command: run without root it refuses before touching anything,
and says how to run it (sudo, with the same arguments). What it sets up is proven by CI, which
runs it (.ci/run)."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from conftest import ROOT

NOBODY = 65534


def test_refuses_without_root_and_changes_nothing():
    # A copy in a directory anyone can read: as root, the refusal is checked as the nobody user.
    work = Path(tempfile.mkdtemp(prefix="hostctl-test-sh-"))
    try:
        work.chmod(0o755)
        script = work / "test.sh"
        shutil.copy2(ROOT / "test.sh", script)
        script.chmod(0o755)
        argv = [str(script), "tests/unit", "-k", "plan"]
        if os.geteuid() == 0:
            argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *argv]
        res = subprocess.run(argv, capture_output=True, text=True, cwd=work, timeout=60, stdin=subprocess.DEVNULL)
        assert res.returncode == 1, res.stderr
        assert "needs root" in res.stderr
        assert f"sudo {script} tests/unit -k plan" in res.stderr
        assert "ci-timing:" not in res.stderr  # no phase began
        assert sorted(p.name for p in work.iterdir()) == ["test.sh"]
    finally:
        shutil.rmtree(work)
