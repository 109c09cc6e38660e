"""PCIe link and driver health checks (the functions doctor calls), on the reference snapshots
and the fake hosts. The copy-bandwidth measurement itself runs in tests/gpu."""

from __future__ import annotations

import pytest

from hostctl import examples
from hostctl.facts.model import GpuFacts
from hostctl.gpu.health import (
    CopyBandwidth,
    copy_bandwidth_check,
    driver_checks,
    kernel_module_check,
    link_capability_gbps,
    pcie_link_check,
    persistence_check,
)


def gpu(name="pro6000x1-mapped", index=0):
    _, facts = examples.load(name)
    return facts.gpus.devices[index].model_copy(deep=True)


@pytest.mark.parametrize("gen,width,gbps", [(5, 16, 63.0), (5, 8, 31.5), (4, 16, 31.5), (3, 16, 15.8), (6, 16, 121.0),
                                            (None, 16, None), (5, None, None), (9, 16, None)])
def test_link_capability(gen, width, gbps):
    assert link_capability_gbps(gen, width) == gbps


def test_full_link_is_ok():
    check = pcie_link_check(gpu(), under_load=(4, 16))
    assert check.status == "ok" and "Gen4 x16" in check.summary and check.values["under_load"] == [4, 16]


def test_lower_generation_at_rest_is_not_judged():
    g = gpu()
    g.pcie.gen_current = 1
    check = pcie_link_check(g)
    assert check.status == "unknown" and "idle" in check.summary and "under load" in check.summary


def test_lower_generation_under_load_is_a_warning_with_numbers():
    check = pcie_link_check(gpu(), under_load=(3, 16))
    assert check.status == "warn" and "Gen3 of Gen4 under load" in check.summary
    assert "15.8 of 31.5 GB/s" in check.summary


def test_narrower_link_is_a_warning_even_at_rest():
    g = gpu("pro6000x2-desktop")
    g.pcie.width_max = 16  # x8 on a link NVML says could run x16 (a card not seated fully, a shared lane)
    check = pcie_link_check(g)
    assert check.status == "warn" and "x8 of x16" in check.summary and "31.5 of 63 GB/s" in check.summary


def test_copy_bandwidth_as_a_fraction_of_the_link():
    h200 = gpu()
    h200.pcie.gen_max, h200.pcie.width_max = 5, 16
    check = copy_bandwidth_check(h200, CopyBandwidth(gpu_index=0, h2d_gbps=54.7, d2h_gbps=55.3, bytes=256 * 2**20,
                                                     link_under_load=(5, 16)))
    assert check.status == "ok" and check.values["h2d_fraction"] == pytest.approx(0.868, abs=0.001)
    assert "87% of 63" in check.summary
    slow = copy_bandwidth_check(h200, CopyBandwidth(gpu_index=0, h2d_gbps=24.0, d2h_gbps=50.0, bytes=2**28))
    assert slow.status == "warn" and "below 60%" in slow.summary
    none = copy_bandwidth_check(h200, CopyBandwidth(gpu_index=0, error="torch is not installed"))
    assert none.status == "unknown" and "torch is not installed" in none.summary


def test_driver_checks_on_the_reference_hosts():
    _, facts = examples.load("pro6000x2-desktop")
    checks = {c.id: c for c in driver_checks(facts.gpus)}
    assert checks["driver.version"].status == "ok" and "595.71.05" in checks["driver.version"].summary
    assert checks["driver.kernel_module"].status == "ok" and checks["driver.kernel_module"].values["module"] == "open"
    assert checks["driver.persistence"].status == "ok"


def test_proprietary_module_with_blackwell_fails():
    _, facts = examples.load("pro6000x2-desktop")
    gpus = facts.gpus.model_copy(update={"kernel_module": "proprietary"})
    check = kernel_module_check(gpus)
    assert check.status == "fail" and "open kernel module" in check.summary


def test_persistence_off_is_a_warning():
    _, facts = examples.load("pro6000x2-desktop")
    gpus = facts.gpus.model_copy(deep=True)
    gpus.devices[1].persistence_mode = False
    check = persistence_check(gpus)
    assert check.status == "warn" and check.values["off"] == [1] and "nvidia-persistenced" in check.fix


def test_no_driver():
    gpus = GpuFacts(available=False, reason="NVIDIA driver not loaded")
    assert [c.status for c in driver_checks(gpus)] == ["unknown", "unknown", "unknown"]
