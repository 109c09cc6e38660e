"""`hostctl doctor` live on a real GPU (the GPU test machine): the GPU checks must judge what
NVML and nvidia-smi report, read-only, and whatever that machine lacks (Docker, a second GPU,
a NUMA node) must be a skip or a warning with its reason, never a crash."""

from __future__ import annotations

import shutil

import pytest

from hostctl import runner
from hostctl.doctor import build_report
from hostctl.doctor.options import DoctorOptions

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def doctor():
    if shutil.which("nvidia-smi") is None:
        pytest.skip("no nvidia-smi: no NVIDIA driver on this machine")
    report, _, facts, _ = build_report(DoctorOptions())
    return {o.check.id: o.result for o in report.outcomes}, facts


def test_gpu_checks_read_what_nvidia_smi_reads(doctor):
    results, facts = doctor
    smi = runner.run(["nvidia-smi", "--query-gpu=driver_version,persistence_mode", "--format=csv,noheader"], timeout=30)
    assert smi.ok, smi.why()
    driver, persistence = (v.strip() for v in smi.stdout.splitlines()[0].split(","))
    assert results["gpu.driver"].status == "pass" and driver in results["gpu.driver"].summary
    assert results["gpu.kernel_module"].status in ("pass", "warn", "fail")
    assert results["gpu.persistence"].status == ("pass" if persistence == "Enabled" else "warn")
    assert results["gpu.pcie.link"].status in ("pass", "warn")
    assert "range" in results["gpu.power.limit"].summary  # no profile: shows the limit and its range


def test_nothing_breaks_and_absences_explain_themselves(doctor):
    results, facts = doctor
    for cid, r in results.items():
        assert "the check itself broke" not in r.summary, (cid, r.summary)
        if r.status in ("warn", "fail"):
            assert r.fix, cid
    if len(facts.gpus.devices) < 2:
        assert results["nccl.p2p.ladder"].status == "skip" and results["nccl.p2p.functional"].status == "skip"
    if not facts.engine.available:
        assert results["docker.engine"].status == "warn" and facts.engine.reason in results["docker.engine"].summary
