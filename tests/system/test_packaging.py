"""The wheel works outside the checkout: `pip install hostctl-*.whl` into a fresh venv carries
the compose and unit templates, recipes, example hosts and golden files (as share/hostctl data files), and the
installed `hostctl` finds them from any working directory."""

from __future__ import annotations

import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from conftest import ROOT
from vm.image import _source_files, build_wheel

pytestmark = pytest.mark.system

RESOURCE_DIRS = ("templates", "systemd", "runtime", "compose")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("wheel"), log=lambda msg: None)


def test_wheel_carries_every_resource_file(wheel):
    shipped = {n.split(".data/data/share/hostctl/", 1)[1] for n in zipfile.ZipFile(wheel).namelist()
               if ".data/data/share/hostctl/" in n}
    expected = {f for f in _source_files() if f.split("/", 1)[0] in RESOURCE_DIRS}
    assert expected and expected <= shipped, sorted(expected - shipped)


def test_installed_wheel_renders_outside_the_checkout(wheel, tmp_path):
    venv = tmp_path / "venv"
    # The dependencies come from this interpreter's site-packages; hostctl itself only from the wheel.
    # A .pth of plain paths, not --system-site-packages: when this interpreter is a venv's (./test.sh
    # runs ./.venv), that flag would give the base Python's site-packages, which lack the
    # dependencies. Plain paths also leave the checkout's editable-install hook unrun.
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = venv / "bin/python"
    site_dir = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                              capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    (Path(site_dir) / "hostctl-test-deps.pth").write_text("".join(f"{p}\n" for p in site.getsitepackages()))
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-index", "--no-deps", str(wheel)], check=True, timeout=300)
    where = subprocess.run([py, "-c", "import hostctl, hostctl.paths as p; print(hostctl.__file__); print(p.resource_root())"],
                           capture_output=True, text=True, check=True, cwd=tmp_path, timeout=60).stdout.split()
    assert where[0].startswith(str(venv)), where
    assert where[1] == str(venv / "share/hostctl"), where
    out = tmp_path / "rendered"
    hosts = venv / "share/hostctl/runtime/hosts"
    res = subprocess.run([venv / "bin/hostctl", "render", "--config", hosts / "demo-cpu.toml", "--facts",
                          hosts / "demo-cpu.facts.json", "--out", out], capture_output=True, text=True, cwd=tmp_path,
                         timeout=120)
    assert res.returncode == 0, res.stderr
    for name in ("compose.yaml", "runtime.env", "hostctl-runtime.service", "hostctl-power.service",
                 "hostctl-metrics.service", "hostctl-metrics.timer"):
        assert (out / name).read_text() == (ROOT / "compose/demo-cpu" / name).read_text(), name
    rules = subprocess.run([venv / "bin/hostctl", "metrics", "--alert-rules"], capture_output=True, text=True,
                           cwd=tmp_path, timeout=60)
    assert rules.returncode == 0 and rules.stdout == (ROOT / "prometheus/hostctl-alerts.yml").read_text(), rules.stderr
