"""A password in a URL the user gave hostctl (`smoke --url`, HF_ENDPOINT, `verify --host`) is
shown nowhere: checked on what the commands print, with the real huggingface_hub and httpx, on
127.0.0.1 port 1 where nothing listens."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostctl.urldisplay import display

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "runtime" / "hosts" / "demo-cpu.toml"


@pytest.mark.parametrize("url,shown", [
    ("ssh://admin:PASSWORD@gpu-box:22", "ssh://admin:***REDACTED***@gpu-box:22"),
    ("https://u:PASSWORD@hub.example/x?y=1", "https://u:***REDACTED***@hub.example/x?y=1"),
    ("http://u:PASS@WORD@127.0.0.1:1/", "http://u:***REDACTED***@127.0.0.1:1/"),  # the last '@' ends the userinfo
    ("http://:PASSWORD@h", "http://:***REDACTED***@h"),
    ("u:PASSWORD@h", "u:***REDACTED***@h"),  # no scheme: still an authority
    ("ssh://admin@gpu-box", "ssh://admin@gpu-box"),
    ("http://127.0.0.1:8000/v1?a=b:c@d", "http://127.0.0.1:8000/v1?a=b:c@d"),  # '@' after the authority
])
def test_display_masks_only_the_password(url, shown):
    assert display(url) == shown


def hostctl(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if not k.startswith("HF_") and "proxy" not in k.lower()}
    return subprocess.run([sys.executable, "-m", "hostctl", *args], cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120,
                          env={**base, "PYTHONPATH": str(ROOT), "NO_PROXY": "127.0.0.1", **(env or {})})


@pytest.mark.parametrize("url", ["http://u:PASSWORD@10.0.0.9:8000", "ftp://u:PASSWORD@127.0.0.1:1"])
def test_smoke_url_with_a_password_is_refused_without_showing_it(url, tmp_path):
    p = hostctl("smoke", "--config", str(DEMO), "--url", url, cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "PASSWORD" not in p.stdout + p.stderr and "u:***REDACTED***@" in p.stderr


def test_an_unreachable_hf_endpoint_is_named_without_its_password(tmp_path):
    (tmp_path / "recipe.yaml").write_text(json.dumps(
        {"id": "tiny", "model": "test-org/tiny", "served_name": "tiny", "requires": {"gpus": 0}, "context": 2048,
         "load_timeout_s": 60, "image": "hostctl/none:0", "revision": "a" * 40}))
    (tmp_path / "hostctl.toml").write_text(f'name = "urltest"\nrecipe = "recipe.yaml"\n[runtime]\n'
                                          f'model_dir = "{tmp_path / "models"}"\n')
    p = hostctl("model", "pull", "--config", str(tmp_path / "hostctl.toml"), cwd=tmp_path,
                env={"HF_ENDPOINT": "http://hub:PASSWORD@127.0.0.1:1", "HF_HUB_DISABLE_XET": "1",
                     "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HOME": str(tmp_path / "hf-home"),
                     "HOSTCTL_SYSROOT": str(tmp_path / "sysroot")})
    assert p.returncode == 1, p.stdout + p.stderr
    assert "cannot reach the hub at http://hub:***REDACTED***@127.0.0.1:1" in p.stderr, p.stderr
    assert "PASSWORD" not in p.stdout + p.stderr
