"""ACS in the facts: hostctl/facts/acs.py reads each GPU's PCI path (sysfs) and the ACS control
of the bridges on it (`lspci -vvv`, real captured text in tests/unit/data), HostFacts carries it
(and snapshots from before it still load), and doctor's nccl.p2p.ladder reports it."""

from __future__ import annotations

import json
from pathlib import Path

from hostctl import examples
from hostctl.doctor.checks import all_checks
from hostctl.doctor.registry import CheckContext, run_checks
from hostctl.facts import load_snapshot
from hostctl.facts.acs import probe_acs
from hostctl.facts.gpu import probe_gpus
from fake_nvml import FakeNvml, pci_tree, pro6000x2_phb, write_sysfs
from hostctl.facts.records import HostFacts
from hostctl.gpu.acs import judge_paths
from hostctl.plan import build_plan

DATA = Path(__file__).parent / "data"
REDIRECT = (DATA / "lspci-pro6000x2-acs-redirect.txt").read_text()
NOT_ROOT = (DATA / "lspci-switch-not-root.txt").read_text()
H200X2 = Path(__file__).parents[1] / "gpu" / "h200x2-facts.json"
GPU_PATHS = [["0000:00:01.1", "0000:01:00.0"], ["0000:00:01.3", "0000:03:00.0"]]  # the desktop's root ports


def desktop(tmp_path, lspci: tuple[str | None, str]):
    config, facts = examples.load("pro6000x2-desktop")
    host = pro6000x2_phb()
    gpus = probe_gpus(FakeNvml(host), pci_root=write_sysfs(host, tmp_path / "sysfs"), version_file=tmp_path / "absent")
    acs = probe_acs([g.pci_bus_id for g in gpus.devices], lspci=lspci, pci_root=pci_tree(tmp_path / "pci", GPU_PATHS))
    return config, facts.model_copy(update={"gpus": gpus, "acs": acs})


def ladder(config, facts):
    check = next(c for c in all_checks() if c.id == "nccl.p2p.ladder")
    ctx = CheckContext(facts=facts, config=config, plan=build_plan(config, facts) if config else None, facts_source="x")
    return run_checks(ctx, [check])[0].result


def test_probe_keeps_the_bridges_on_the_gpu_paths_and_their_acs_control(tmp_path):
    _, facts = desktop(tmp_path, (REDIRECT, ""))
    acs = facts.acs
    assert acs.available and set(acs.gpu_paths) == {"0000:01:00.0", "0000:03:00.0"}
    assert acs.gpu_paths["0000:01:00.0"] == ["0000:00:01.1", "0000:01:00.0"]
    # only the devices on the paths, not the GPUs themselves nor the rest of the bus
    assert [d.bdf for d in acs.devices] == ["0000:00:01.1", "0000:00:01.3"]
    rp = acs.device("0000:00:01.1")
    assert rp.bridge and rp.redirects == ["ReqRedir", "CmpltRedir"] and rp.acs_cap["DirectTrans"]
    reading = judge_paths(acs, facts.gpus.devices)
    assert reading.status == "warn" and reading.redirecting == ["0000:00:01.1", "0000:00:01.3"]


def test_acs_survives_a_snapshot_round_trip(tmp_path):
    _, facts = desktop(tmp_path, (REDIRECT, ""))
    path = tmp_path / "snap.json"
    path.write_text(facts.model_dump_json(indent=2))
    again = load_snapshot(path)
    assert again.acs == facts.acs


def test_a_snapshot_from_before_acs_loads_and_doctor_says_so():
    data = json.loads(H200X2.read_text())
    assert "acs" not in data  # the H200 snapshots were made before hostctl read ACS
    facts = load_snapshot(H200X2)
    assert facts.acs is None
    r = ladder(None, facts)
    assert "ACS not read" in r.evidence.observed


def test_doctor_warns_when_a_bridge_between_the_gpus_redirects(tmp_path):
    config, facts = desktop(tmp_path, (REDIRECT, ""))
    assert facts.state.p2p is not None and facts.state.p2p.verdict == "ok"
    # with a passing functional all-reduce the redirect is reported, not a warning
    r = ladder(config, facts)
    assert r.status == "pass" and "ACS redirects on 0000:00:01.1, 0000:00:01.3" in r.summary
    # without one, the redirect is what the user must know before turning P2P on
    facts = facts.model_copy(update={"state": facts.state.model_copy(update={"p2p": None})})
    r = ladder(config, facts)
    assert r.status == "warn", r.summary
    assert "0000:00:01.1, 0000:00:01.3" in r.summary and "ACS warn" in r.evidence.observed
    assert "ReqRedir+ CmpltRedir+" in r.evidence.observed
    assert "lspci" in r.evidence.source


def test_doctor_passes_acs_that_is_capable_but_switched_off(tmp_path):
    text = REDIRECT.replace("ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+",
                            "ACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir- UpstreamFwd-")
    assert text != REDIRECT
    config, facts = desktop(tmp_path, (text, ""))
    assert all(not d.redirects for d in facts.acs.devices)
    r = ladder(config, facts)
    assert r.status == "pass", r.summary
    assert "ACS ok" in r.summary and "no bridge between the GPUs redirects" in r.evidence.observed


def test_doctor_says_unknown_when_lspci_cannot_read_or_run(tmp_path):
    config, facts = desktop(tmp_path, (NOT_ROOT, ""))
    assert judge_paths(facts.acs, facts.gpus.devices).status == "unknown"
    config, facts = desktop(tmp_path / "b", (None, "lspci is not installed"))
    assert not facts.acs.available and "lspci is not installed" in facts.acs.reason
    r = ladder(config, facts)
    assert r.status == "pass" and "ACS unknown" in r.summary and "lspci is not installed" in r.evidence.observed


def test_one_gpu_runs_no_lspci():
    acs = probe_acs(["0000:01:00.0"], lspci=None)  # would run lspci if it did not stop first
    assert not acs.available and "1 GPU" in acs.reason
    assert HostFacts.model_fields["acs"].default is None


def test_facts_text_shows_the_acs_of_each_bridge(tmp_path):
    from hostctl.present import facts_text

    _, facts = desktop(tmp_path, (REDIRECT, ""))
    text = facts_text(facts)
    assert "ACS: 2 device(s) on the paths between 2 GPU(s)" in text
    assert "0000:00:01.1" in text and "redirects ReqRedir, CmpltRedir" in text
    assert "ACS: not read" in facts_text(facts.model_copy(update={"acs": None}))
