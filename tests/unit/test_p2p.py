"""The P2P ladder without processes: the lspci ACS parser on captured text, the PCI path between
GPUs, the verdict logic, the rungs on the reference hosts (fake NVML), and what the plan does
with a stored verdict. The harness itself runs in tests/system/test_p2p_harness.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hostctl import examples
from hostctl.facts.gpu import probe_gpus
from fake_nvml import FakeNvml, pci_tree, pro6000x2_phb, two_socket, write_sysfs
from hostctl.facts.records import P2PVerdict
from hostctl.facts.state import probe_state
from hostctl.gpu import p2p as p2p_mod
from hostctl.facts.acs import parse_lspci, pci_chain, probe_acs
from hostctl.gpu.acs import bridges_between, judge_acs, judge_paths
from hostctl.gpu.harness import AllReduceRun, FunctionalCheck, GroupRun, TorchPython, decide_verdict, judge_group
from hostctl.gpu.p2p import configured_env, run_ladder, verdict_applies
from hostctl.plan import build_plan
from hostctl.plan.nccl import IOMMU_COST

DATA = Path(__file__).parent / "data"
REDIRECT = (DATA / "lspci-pro6000x2-acs-redirect.txt").read_text()
NOT_ROOT = (DATA / "lspci-switch-not-root.txt").read_text()


# ---------------------------------------------------------------- lspci ACS parser


def test_parser_reads_acs_on_root_ports_and_adds_the_domain():
    devs = parse_lspci(REDIRECT)
    rp = devs["0000:00:01.1"]
    assert rp.bridge and not rp.access_denied
    assert rp.acs_cap["ReqRedir"] and rp.acs_cap["DirectTrans"]
    assert rp.acs_ctl == {"SrcValid": True, "TransBlk": False, "ReqRedir": True, "CmpltRedir": True,
                          "UpstreamFwd": True, "EgressCtrl": False, "DirectTrans": False}
    assert rp.redirects == ["ReqRedir", "CmpltRedir"]
    gpu = devs["0000:01:00.0"]
    assert not gpu.bridge and gpu.acs_ctl is None and gpu.redirects == []
    assert devs["0000:00:00.0"].description.startswith("Host bridge")


def test_parser_joins_flag_lists_wrapped_onto_the_next_line():
    rp = parse_lspci(REDIRECT)["0000:00:01.3"]
    assert rp.acs_ctl["EgressCtrl"] is False and rp.acs_ctl["DirectTrans"] is False
    assert rp.acs_cap["DirectTrans"] is True and len(rp.acs_ctl) == 7


def test_parser_marks_unreadable_capabilities():
    devs = parse_lspci(NOT_ROOT)
    assert set(devs) >= {"0000:40:01.1", "0000:41:00.0", "0000:42:00.0", "0000:43:00.0"}
    assert all(d.access_denied and d.acs_ctl is None for d in devs.values())


def test_capability_without_control_is_not_redirection():
    """Near miss: every ACS feature is CAPABLE (+ in ACSCap) but none is enabled in ACSCtl."""
    text = REDIRECT.replace("ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+",
                            "ACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd-")
    text = text.replace("ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ \nEgressCtrl-",
                        "ACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd- \nEgressCtrl-")
    devs = parse_lspci(text)
    assert devs["0000:00:01.1"].acs_cap["ReqRedir"] and devs["0000:00:01.1"].redirects == []
    reading = judge_acs(["0000:00:01.1", "0000:00:01.3"], devs)
    assert reading.status == "ok" and reading.redirecting == []


def test_judge_acs_on_the_desktop_root_ports():
    reading = judge_acs(["0000:00:01.1", "0000:00:01.3"], parse_lspci(REDIRECT))
    assert reading.status == "warn" and reading.redirecting == ["0000:00:01.1", "0000:00:01.3"]
    assert any("ReqRedir+ CmpltRedir+" in e for e in reading.evidence)
    assert judge_acs(["0000:41:00.0"], parse_lspci(NOT_ROOT)).status == "unknown"
    assert judge_acs([], {}).status == "unknown"


# ---------------------------------------------------------------- the PCI path between GPUs


def test_bridges_between_under_one_host_bridge_and_behind_a_switch():
    a = ["0000:00:01.1", "0000:01:00.0"]
    b = ["0000:00:01.3", "0000:03:00.0"]
    assert bridges_between(a, b) == ["0000:00:01.1", "0000:00:01.3"]  # PHB: both root ports
    a = ["0000:40:01.1", "0000:41:00.0", "0000:42:00.0", "0000:43:00.0"]
    b = ["0000:40:01.1", "0000:41:00.0", "0000:42:01.0", "0000:44:00.0"]
    # PXB/PIX: the switch port where they meet and the downstream ports below it, not above
    assert bridges_between(a, b) == ["0000:41:00.0", "0000:42:00.0", "0000:42:01.0"]


def test_pci_chain_from_sysfs(tmp_path):
    bus = pci_tree(tmp_path, [["0000:00:01.1", "0000:01:00.0"], ["0000:00:01.3", "0000:03:00.0"]])
    assert pci_chain("0000:01:00.0", bus) == ["0000:00:01.1", "0000:01:00.0"]
    assert pci_chain("0000:09:00.0", bus) is None


# ---------------------------------------------------------------- verdict logic


def run_(outcome, bw=None):
    return AllReduceRun(label="x", env={}, outcome=outcome, detail=outcome, seconds=1.0, busbw_gbps=bw)


@pytest.mark.parametrize("configured,control,verdict", [
    ("ok", "ok", "ok"),
    ("hang", "ok", "hang"),
    ("wrong_data", "ok", "wrong_data"),
    ("error", "ok", "failed"),
    ("hang", "hang", "inconclusive"),
    ("wrong_data", "error", "inconclusive"),
    ("error", "wrong_data", "inconclusive"),
    ("ok", "hang", "ok"),
])
def test_verdict_table(configured, control, verdict):
    got, reason = decide_verdict(2, run_(configured), run_(control))
    assert got == verdict and reason
    if (configured, control) == ("ok", "hang"):
        assert "fallback is suspect" in reason


def test_fewer_than_two_gpus_is_not_applicable():
    assert decide_verdict(1, None, None)[0] == "not_applicable"
    assert decide_verdict(0, None, None)[0] == "not_applicable"


def group(codes, outs, errs=None, timed_out=False):
    return GroupRun(returncodes=codes, stdouts=outs, stderrs=errs or [""] * len(codes), seconds=1.0,
                    timed_out=timed_out, killed=timed_out, pgid=1)


def rank(r, mismatches=0, bw=10.0):
    return json.dumps({"rank": r, "bytes": 4096, "mismatches": mismatches, "busbw_gbps": bw, "algbw_gbps": bw,
                       "example": {"index": 3, "expected": 5.0, "got": 1005.0} if mismatches else None})


def test_judge_group_outcomes():
    ok = judge_group("configured", {}, group([0, 0], [rank(0, bw=20.0), "NCCL INFO noise\n" + rank(1, bw=18.5)]), 30)
    assert ok.outcome == "ok" and ok.busbw_gbps == 18.5  # the slowest rank bounds the collective
    hang = judge_group("configured", {}, group([None, None], ["", ""], timed_out=True), 30)
    assert hang.outcome == "hang" and "within 30 s" in hang.detail and "nothing left" in hang.detail
    wrong = judge_group("configured", {}, group([0, 0], [rank(0, 2), rank(1, 2)]), 30)
    assert wrong.outcome == "wrong_data" and "expected 5, got 1005" in wrong.detail
    crash = judge_group("configured", {}, group([0, 1], [rank(0), ""], ["", "RuntimeError: NCCL error: unhandled cuda error"]), 30)
    assert crash.outcome == "error" and "rank 1 failed: RuntimeError: NCCL error" in crash.detail
    grace = judge_group("configured", {}, group([1, None], ["", ""], ["boom", ""]), 30)
    assert grace.outcome == "error"  # one rank crashed, the other was killed after the grace


# ---------------------------------------------------------------- the rungs on the reference hosts


def fake_facts(tmp_path, host, base="pro6000x2-desktop"):
    config, facts = examples.load(base)
    gpus = probe_gpus(FakeNvml(host), pci_root=write_sysfs(host, tmp_path / "sysfs"), version_file=tmp_path / "absent")
    return config, facts.model_copy(update={"gpus": gpus})


NO_TORCH = TorchPython(python=None, why="no torch in the unit tier")


def test_rungs_on_the_desktop_with_p2p_ok(tmp_path):
    _, facts = fake_facts(tmp_path, pro6000x2_phb())
    bus = pci_tree(tmp_path / "pci", [["0000:00:01.1", "0000:01:00.0"], ["0000:00:01.3", "0000:03:00.0"]])
    ladder = run_ladder(facts, facts.gpus.devices, measure=False, lspci=(REDIRECT, ""), pci_root=bus)
    r = {x.name: x for x in ladder.rungs}
    assert [x.name for x in ladder.rungs] == ["topology", "driver", "iommu", "acs"]
    assert r["topology"].status == "ok" and "NCCL_P2P_LEVEL=PHB" in r["topology"].summary
    assert r["driver"].status == "ok" and "capability, not proof" in r["driver"].summary
    assert r["iommu"].status == "ok"  # report 001's desktop after IOMMU off
    assert r["acs"].status == "warn" and "0000:00:01.1, 0000:00:01.3" in r["acs"].summary
    assert IOMMU_COST in r["acs"].fix
    assert configured_env(facts, facts.gpus.devices) == {"NCCL_P2P_DISABLE": "0", "NCCL_P2P_LEVEL": "PHB"}
    assert ladder.verdict is None and ladder.functional is None


def test_p2p_blocked_with_iommu_on_skips_the_functional_check_and_states_the_cost(tmp_path):
    _, facts = fake_facts(tmp_path, pro6000x2_phb(p2p_ok=False))
    facts.iommu.class_entries, facts.iommu.group_count, facts.iommu.default_domain_type = ["ivhd0"], 31, "DMA"
    ladder = run_ladder(facts, facts.gpus.devices, lspci=(None, "lspci is not installed"), torch_python=NO_TORCH,
                        state_dir=tmp_path / "state")
    r = {x.name: x for x in ladder.rungs}
    assert r["driver"].status == "fail" and "chipset_not_supported" in " ".join(r["driver"].evidence)
    assert r["iommu"].status == "warn" and "docs/field-reports.md, 001" in r["iommu"].summary
    assert r["acs"].status == "unknown" and "lspci is not installed" in r["acs"].summary
    assert r["functional"].status == "skip" and "refuses P2P" in r["functional"].summary
    assert ladder.verdict is None and not (tmp_path / "state").exists()
    assert any(IOMMU_COST in rec for rec in ladder.recommendations)


def test_two_socket_pair_meets_at_sys(tmp_path):
    _, facts = fake_facts(tmp_path, two_socket(), base="pro6000x1-mapped")
    ladder = run_ladder(facts, facts.gpus.devices, measure=False, lspci=(NOT_ROOT, ""), pci_root=tmp_path / "none")
    assert "worst path SYS" in ladder.rung("topology").summary
    assert ladder.rung("acs").status == "unknown"
    assert configured_env(facts, facts.gpus.devices)["NCCL_P2P_LEVEL"] == "SYS"


def test_one_gpu_is_not_applicable_and_stored(tmp_path):
    _, facts = examples.load("pro6000x1-resident")
    ladder = run_ladder(facts, facts.gpus.devices, state_dir=tmp_path)
    assert ladder.verdict.verdict == "not_applicable" and ladder.rung("functional").status == "skip"
    state, notes = probe_state(tmp_path)
    assert notes == [] and state.p2p.verdict == "not_applicable"
    assert state.p2p.gpu_uuids == [facts.gpus.devices[0].uuid]


def test_without_torch_the_check_says_why_and_stores_nothing(tmp_path):
    _, facts = fake_facts(tmp_path, pro6000x2_phb())
    facts.state.p2p = None
    ladder = run_ladder(facts, facts.gpus.devices, lspci=(REDIRECT, ""), torch_python=NO_TORCH, state_dir=tmp_path / "s")
    assert ladder.rung("functional").status == "unknown" and "no torch in the unit tier" in ladder.rung("functional").summary
    assert "HOSTCTL_TORCH_PYTHON" in ladder.rung("functional").fix
    assert ladder.verdict is None and not (tmp_path / "s").exists()


def test_a_hang_is_stored_and_the_plan_keeps_p2p_off_stating_the_iommu_cost(tmp_path, monkeypatch):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    facts.state.p2p = None
    facts.iommu.class_entries, facts.iommu.group_count, facts.iommu.default_domain_type = ["ivhd0"], 31, "DMA"
    canned = FunctionalCheck(verdict="hang", reason="with P2P the all-reduce hung", configured=run_("hang"), control=run_("ok", 11.2))
    monkeypatch.setattr(p2p_mod, "functional_check", lambda *a, **k: canned)
    ladder = run_ladder(facts, facts.gpus.devices, lspci=(REDIRECT, ""), torch_python=TorchPython(python="/bin/false", why="test"),
                        state_dir=tmp_path / "state")
    assert ladder.rung("functional").status == "fail"
    assert ladder.verdict.control_busbw_gbps == 11.2
    recs = ladder.recommendations
    assert any("P2P off" in r and "11.2 GB/s" in r for r in recs)
    assert all(IOMMU_COST in r for r in recs if "IOMMU off" in r or "turning the IOMMU off" in r)
    state, _ = probe_state(tmp_path / "state")
    assert state.p2p.verdict == "hang" and verdict_applies(state.p2p, facts, [g.uuid for g in facts.gpus.devices])
    plan = build_plan(config, facts.model_copy(update={"state": state}))
    assert plan.nccl.p2p is False and plan.nccl.env["NCCL_P2P_DISABLE"] == "1"
    assert any(IOMMU_COST in (p.fix or "") for p in plan.nccl.problems)


def test_an_ok_verdict_turns_p2p_on_at_phb_and_goes_stale_with_other_gpus(tmp_path):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    uuids = [g.uuid for g in facts.gpus.devices]
    facts.state.p2p = P2PVerdict(verdict="ok", measured_at="2026-01-01T00:00:00+00:00",
                                 driver_version=facts.gpus.driver_version, kernel_cmdline=facts.kernel.cmdline,
                                 busbw_gbps=21.0, control_busbw_gbps=17.5, gpu_uuids=uuids)
    plan = build_plan(config, facts)
    assert plan.nccl.p2p is True and plan.nccl.env["NCCL_P2P_LEVEL"] == "PHB"
    facts.state.p2p.gpu_uuids = list(reversed(uuids))
    plan = build_plan(config, facts)
    assert plan.nccl.p2p is False and any(d.value == "stale" for d in plan.nccl.decisions)
