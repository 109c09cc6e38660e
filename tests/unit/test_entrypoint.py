"""runtime/entrypoint/hostctl-entrypoint run by sh on this machine: plain exec without a node,
clear refusals (numactl missing, contradicting guards). The binding itself is proven inside a
container in tests/system/test_numa_container.py."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT
from need import need

ENTRYPOINT = ROOT / "runtime" / "entrypoint" / "hostctl-entrypoint"


@pytest.fixture
def bare_path(tmp_path) -> str:
    """A PATH with the few tools the script uses, and no numactl."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("cat", "echo", "tr", "printf"):
        found = shutil.which(tool)
        if found:
            (bin_dir / tool).symlink_to(found)
    return str(bin_dir)


def run(env: dict[str, str], *argv: str, path: str) -> subprocess.CompletedProcess:
    return subprocess.run(["/bin/sh", str(ENTRYPOINT), *argv], env={"PATH": path, **env}, capture_output=True,
                          text=True, timeout=30)


def test_is_executable_posix_sh():
    assert os.access(ENTRYPOINT, os.X_OK)
    assert ENTRYPOINT.read_text().startswith("#!/bin/sh\n")
    assert subprocess.run(["/bin/sh", "-n", str(ENTRYPOINT)]).returncode == 0


def test_without_a_node_the_command_is_execd_as_is(bare_path):
    res = run({}, "echo", "hello", path=bare_path)
    assert res.returncode == 0 and res.stdout == "hello\n"


def test_no_command_is_an_error(bare_path):
    res = run({}, path=bare_path)
    assert res.returncode == 64 and "no command given" in res.stderr


def test_missing_numactl_is_named(bare_path):
    res = run({"HOSTCTL_NUMA_NODE": "0"}, "echo", "hello", path=bare_path)
    assert res.returncode == 127 and res.stdout == ""
    assert "numactl is not installed in this image" in res.stderr


def test_a_bad_node_value_is_refused(bare_path):
    res = run({"HOSTCTL_NUMA_NODE": "zero"}, "echo", path=bare_path)
    assert res.returncode == 78 and "not a NUMA node number" in res.stderr


def test_mapped_layer_guard_must_agree_with_the_binding(bare_path):
    res = run({"HOSTCTL_NUMA_NODE": "0", "VLLM_MOE_W2_MAPPED_NUMA_NODE": "1"}, "echo", path=bare_path)
    assert res.returncode == 78 and "mapped layers would live on another node" in res.stderr


def test_mapped_layer_guard_checks_the_gpus_node_in_sysfs(bare_path):
    # pick a real PCI device of this machine; sysfs says -1 or a node number
    devices = sorted(Path("/sys/bus/pci/devices").iterdir()) if Path("/sys/bus/pci/devices").is_dir() else []
    dev = next((d for d in devices if (d / "numa_node").is_file()), None)
    need(dev is not None, "no PCI device with a numa_node in sysfs")
    actual = (dev / "numa_node").read_text().strip()
    wrong = "7" if actual != "7" else "6"
    res = run({"VLLM_MOE_W2_MAPPED_PCI": dev.name, "VLLM_MOE_W2_MAPPED_NUMA_NODE": wrong}, "echo", "ok", path=bare_path)
    if actual == "-1":  # firmware does not say: nothing to contradict
        assert res.returncode == 0 and res.stdout == "ok\n"
    else:
        assert res.returncode == 78 and f"sits on NUMA node {actual}" in res.stderr
