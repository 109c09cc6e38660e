"""The NVML adapter asks for pynvml only where an NVIDIA driver is loaded: on a host without
/proc/driver/nvidia/version and /dev/nvidiactl the GPU facts say "driver not loaded" at once,
without the ~80 ms import (benchmarks/results/doctor_quick-2vcpu-shared.txt)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hostctl.facts import gpu
from hostctl.facts.gpu import NvmlAdapter, NvmlUnavailable, probe_gpus


def test_no_driver_files_means_driver_not_loaded_without_pynvml(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu, "NVIDIA_VERSION", tmp_path / "version")
    monkeypatch.setattr(gpu, "NVIDIA_CTL", tmp_path / "nvidiactl")
    facts = probe_gpus()
    assert facts.available is False and facts.reason.startswith("NVIDIA driver not loaded")
    assert str(tmp_path / "nvidiactl") in facts.reason


@pytest.mark.parametrize("present", ["version", "nvidiactl"])
def test_either_driver_file_lets_nvml_answer(tmp_path, monkeypatch, present):
    """With a driver file present the real pynvml is asked; what it says decides (here, on a
    machine without libnvidia-ml, "not found"; on the GPU machine, the GPUs)."""
    monkeypatch.setattr(gpu, "NVIDIA_VERSION", tmp_path / "version")
    monkeypatch.setattr(gpu, "NVIDIA_CTL", tmp_path / "nvidiactl")
    (tmp_path / present).write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06\n")
    adapter = NvmlAdapter()
    try:
        adapter.init()
    except NvmlUnavailable as exc:
        assert "neither" not in str(exc)  # the answer came from NVML, not from the file check
    else:
        adapter.shutdown()
    assert adapter.errors, "pynvml was imported and its error type recorded"


def test_a_driverless_host_does_not_import_pynvml(tmp_path):
    code = ("import sys; from pathlib import Path; from hostctl.facts import gpu; "
            f"gpu.NVIDIA_VERSION = gpu.NVIDIA_CTL = Path({str(tmp_path / 'absent')!r}); "
            "f = gpu.probe_gpus(); assert not f.available, f; "
            "assert 'pynvml' not in sys.modules and 'ctypes' not in sys.modules, 'pynvml imported'")
    subprocess.run([sys.executable, "-c", code], check=True)
