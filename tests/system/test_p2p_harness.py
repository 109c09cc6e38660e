"""The functional P2P check's harness, for real, on the CPU: PyTorch's gloo backend with two
rank processes rendezvousing on 127.0.0.1 (ports 18400-18499), with injected faults. The hang
and wrong-data verdicts are proven here, not assumed: a stalled rank is killed at the hard
timeout with its whole process group, and a corrupted input is caught in the summed values.
"""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path

import pytest

from hostctl import examples
from hostctl.facts.gpu import probe_gpus
from fake_nvml import FakeNvml, pro6000x2_phb, write_sysfs
from hostctl.facts.state import probe_state
from hostctl.facts.processes import in_group
from hostctl.gpu.harness import Fault, TorchPython, free_port, functional_check
from hostctl.plan import build_plan
from hostctl.provision import parts
from need import needs

pytestmark = [
    pytest.mark.system,
    needs(importlib.util.find_spec("torch") is not None, "torch (CPU) not installed; .ci/run installs /opt/wheels/torch-*+cpu"),
]

CPU = dict(backend="gloo", device="cpu", size_bytes=256 * 1024, iters=3)
PATIENT_S = 180.0  # generous: torch imports slowly on a loaded 2-core CI machine
STALL_TIMEOUT_S = 25.0


def ports() -> tuple[int, int]:
    return free_port(range(18400, 18450)), free_port(range(18450, 18500))


def check(faults=None, timeout_s=PATIENT_S):
    return functional_check(2, python=sys.executable, configured_env={"NCCL_P2P_DISABLE": "0"}, timeout_s=timeout_s,
                            ports=ports(), faults=faults, **CPU)


def gone(run) -> bool:
    return in_group(run.pgid) == [] and not any(Path(f"/proc/{pid}").exists() for pid in run.pids)


def test_ok_both_runs_sum_correctly_and_report_bandwidth():
    result = check()
    assert result.verdict == "ok", result.reason
    for run in (result.configured, result.control):
        assert run.outcome == "ok" and run.busbw_gbps and run.busbw_gbps > 0
        assert [r["mismatches"] for r in run.ranks] == [0, 0] and gone(run)
    assert result.control.env == {"NCCL_P2P_DISABLE": "1"}


def test_a_stalled_rank_is_a_hang_and_the_group_is_really_killed():
    result = check({"configured": Fault(kind="stall", rank=1)}, timeout_s=STALL_TIMEOUT_S)
    assert result.verdict == "hang", result.reason
    hung = result.configured
    assert hung.outcome == "hang" and f"within {STALL_TIMEOUT_S:g} s" in hung.detail
    assert hung.seconds >= STALL_TIMEOUT_S  # waited for the deadline, then killed - not a crash
    assert len(hung.pids) == 2 and hung.leftover == [] and gone(hung)
    assert result.control.outcome == "ok"


def test_garbage_from_one_rank_is_wrong_data():
    result = check({"configured": Fault(kind="wrong", rank=1)})
    assert result.verdict == "wrong_data", result.reason
    assert all(r["mismatches"] > 0 for r in result.configured.ranks)  # every rank sees the wrong sum
    assert "expected" in result.configured.detail and result.control.outcome == "ok"


def test_control_failing_too_is_inconclusive():
    result = check({"configured": Fault(kind="wrong", rank=0), "control": Fault(kind="wrong", rank=1)})
    assert result.verdict == "inconclusive" and "control without P2P failed too" in result.reason


def test_provision_stores_the_verdict_and_the_plan_turns_p2p_on(tmp_path, monkeypatch):
    """provision --only gpu on the fake P2P-capable desktop, the check run through gloo."""
    monkeypatch.setenv("HOSTCTL_SYSROOT", str(tmp_path / "root"))
    config, facts = examples.load("pro6000x2-desktop")
    host = pro6000x2_phb()
    facts = facts.model_copy(update={"gpus": probe_gpus(FakeNvml(host), pci_root=write_sysfs(host, tmp_path / "pci"))})
    facts.state.p2p = None
    assert build_plan(config, facts).nccl.p2p is False  # no verdict yet: off
    opts = dict(torch_python=TorchPython(python=sys.executable, why="test"), lspci=(None, "not read in this test"),
                timeout_s=PATIENT_S, ports=ports(), **CPU)
    fake = FakeNvml(host)
    report = parts.provision(config, only="gpu", facts=lambda c: facts, out=io.StringIO(), err=io.StringIO(),
                             gpu_options={"adapter": fake, "hostctl_bin": "/usr/bin/true", "p2p_options": opts,
                                          "gpus": lambda: probe_gpus(fake, pci_root=tmp_path / "pci")})
    report.raise_for_error()
    assert ("gpu/p2p/functional", "changed") in [(r.id, r.status) for r in report.actions]
    # the fresh look after the check finds the verdict stored: nothing more to do
    assert [i.what for i in report.part("gpu").final.settled if i.id == "gpu/p2p/functional"][0].startswith(
        "stored verdict ok")
    state, notes = probe_state(tmp_path / "root" / "var/lib/hostctl")
    assert notes == [] and state.p2p.verdict == "ok" and state.p2p.busbw_gbps > 0
    plan = build_plan(config, facts.model_copy(update={"state": state}))
    assert plan.nccl.p2p is True and plan.nccl.env["NCCL_P2P_LEVEL"] == "PHB"
