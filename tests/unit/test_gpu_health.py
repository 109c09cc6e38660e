"""GPU health as doctor judges it (hostctl/doctor/checks/gpu.py, the one implementation): the
PCIe link, pinned copy bandwidth against the link's capability (the measurement itself is
replaced by its result here; it runs in tests/gpu), the kernel module against the GPU
generation, persistence mode, and no driver."""

from __future__ import annotations

import pytest

from hostctl import examples
from hostctl.doctor import functional
from hostctl.doctor.checks import all_checks
from hostctl.doctor.registry import CheckContext, CheckResult, run_checks
from hostctl.facts.records import GpuFacts
from hostctl.gpu.health import COPY_FRACTION_WARN, link_capability_gbps
from hostctl.plan import build_plan


def result(check_id: str, facts, config=None, level="quick") -> CheckResult:
    ctx = CheckContext(facts=facts, config=config, plan=build_plan(config, facts) if config else None, level=level,
                  facts_source="snapshot")
    return run_checks(ctx, [c for c in all_checks() if c.id == check_id])[0].result


def desktop():
    config, facts = examples.load("pro6000x2-desktop")
    return config, facts.model_copy(deep=True)


@pytest.mark.parametrize("gen,width,gbps", [(5, 16, 63.0), (5, 8, 31.5), (4, 16, 31.5), (3, 16, 15.8), (6, 16, 121.0),
                                            (None, 16, None), (5, None, None), (9, 16, None)])
def test_link_capability(gen, width, gbps):
    assert link_capability_gbps(gen, width) == gbps


def test_full_width_link_passes_and_a_lower_generation_at_rest_is_only_noted():
    config, facts = desktop()
    assert result("gpu.pcie.link", facts, config).status == "pass"
    facts.gpus.devices[0].pcie.gen_current = 1  # an idle GPU trains its link down
    r = result("gpu.pcie.link", facts, config)
    assert r.status == "pass" and "idle GPU" in r.summary and "gen 1/" in r.evidence.observed


def test_narrower_link_is_a_warning_even_at_rest():
    config, facts = desktop()
    facts.gpus.devices[1].pcie.width_max = 16  # x8 on a link NVML says could run x16
    r = result("gpu.pcie.link", facts, config)
    assert r.status == "warn" and "GPU 1 runs x8 of x16" in r.summary


def bandwidth(monkeypatch, *measured):
    monkeypatch.setattr(functional, "measure_bandwidth", lambda f: (list(measured), []))


def test_copy_bandwidth_at_the_measured_h200_share_passes(monkeypatch):
    config, facts = desktop()
    # the H200 test machine: 55.4 / 55.3 GB/s on Gen5 x16 (benchmarks/results/gpu_link-h200.txt)
    bandwidth(monkeypatch, functional.Bandwidth(index=0, h2d_gbps=55.4, d2h_gbps=55.3, link_gbps=63.0, link_max=(5, 16), link_under_load=(5, 16)))
    r = result("gpu.pcie.bandwidth", facts, config, level="full")
    assert r.status == "pass" and "H2D 55.4 GB/s (88%)" in r.evidence.observed


def test_copy_bandwidth_just_below_the_threshold_warns(monkeypatch):
    config, facts = desktop()
    just_below = round(COPY_FRACTION_WARN * 63.0 - 0.1, 1)
    bandwidth(monkeypatch, functional.Bandwidth(index=0, h2d_gbps=just_below, d2h_gbps=55.0, link_gbps=63.0, link_max=(5, 16), link_under_load=(5, 16)))
    r = result("gpu.pcie.bandwidth", facts, config, level="full")
    assert r.status == "warn" and r.summary == "GPU 0 copies below 60% of its link"
    bandwidth(monkeypatch, functional.Bandwidth(index=0, h2d_gbps=just_below + 0.2, d2h_gbps=55.0, link_gbps=63.0, link_max=(5, 16), link_under_load=(5, 16)))
    assert result("gpu.pcie.bandwidth", facts, config, level="full").status == "pass"


def test_a_link_below_its_generation_under_load_warns(monkeypatch):
    config, facts = desktop()
    bandwidth(monkeypatch, functional.Bandwidth(index=0, h2d_gbps=50.0, d2h_gbps=50.0, link_gbps=63.0, link_max=(5, 16), link_under_load=(4, 16)))
    r = result("gpu.pcie.bandwidth", facts, config, level="full")
    assert r.status == "warn" and "GPU 0 ran gen 4 x16 under load, of gen 5 x16" in r.summary


def test_copy_bandwidth_not_measurable_skips(monkeypatch):
    config, facts = desktop()
    monkeypatch.setattr(functional, "measure_bandwidth", lambda f: ([], ["GPU 0: torch is not installed"]))
    r = result("gpu.pcie.bandwidth", facts, config, level="full")
    assert r.status == "skip" and "torch is not installed" in r.summary


def test_driver_and_open_module_on_the_desktop():
    config, facts = desktop()
    assert result("gpu.driver", facts, config).status == "pass"
    assert "595.71.05" in result("gpu.driver", facts, config).summary
    assert result("gpu.kernel_module", facts, config).status == "pass"


@pytest.mark.parametrize("name", ["NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "NVIDIA B200", "NVIDIA GB200",
                                  "NVIDIA GeForce RTX 5090"])
def test_proprietary_module_with_a_gpu_that_needs_the_open_one_fails(name):
    config, facts = desktop()
    facts.gpus.kernel_module = "proprietary"
    facts.gpus.devices[0].name = name
    r = result("gpu.kernel_module", facts, config)
    assert r.status == "fail" and "need(s) the open one" in r.summary


@pytest.mark.parametrize("name", ["NVIDIA H200", "NVIDIA H100 80GB HBM3", "NVIDIA GeForce RTX 4090", "NVIDIA A100-SXM4-80GB"])
def test_proprietary_module_on_older_gpus_only_warns(name):
    config, facts = desktop()
    facts.gpus.kernel_module = "proprietary"
    for d in facts.gpus.devices:
        d.name = name
    assert result("gpu.kernel_module", facts, config).status == "warn"


def test_persistence_off_is_a_warning():
    config, facts = desktop()
    facts.gpus.devices[1].persistence_mode = False
    r = result("gpu.persistence", facts, config)
    assert r.status == "warn" and "GPU 1" in r.summary and "nvidia-persistenced" in r.fix


def test_no_driver():
    _, facts = desktop()
    facts.gpus = GpuFacts(available=False, reason="NVIDIA driver not loaded")
    for cid in ("gpu.driver", "gpu.kernel_module", "gpu.persistence", "gpu.pcie.link"):
        r = result(cid, facts)
        assert r.status == "skip" and "NVIDIA driver not loaded" in r.summary, cid
