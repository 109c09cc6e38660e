"""`hostctl verify` and `provision --json` on this machine with the demo profile (no GPU, no drive):
the documents are valid and versioned, a part never provisioned is "not provisioned" (listed, not
run, not a failure), and a part provisioned under this test's sysroot is judged by its
convergence proof and its testinfra checks, which fail naming the check when the host drifts."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hostctl import paths
from hostctl.cli import main

HOSTS = paths.hosts_dir()
DEMO = str(HOSTS / "demo-cpu.toml")


def run(argv, capsys):
    capsys.readouterr()
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture
def sysroot() -> Path:
    root = paths.sysroot()  # tests/conftest.py gives every test its own
    (root / "usr/local/bin").mkdir(parents=True, exist_ok=True)
    (root / "usr/local/bin/hostctl").write_text("#!/bin/sh\n")
    return root


def test_provision_dry_run_json_on_the_demo_profile(sysroot, capsys):
    code, out, err = run(["provision", "--dry-run", "--json", "--config", DEMO], capsys)
    assert code == 0, err
    doc = json.loads(out)  # exactly one document on stdout
    assert doc["schema"] == "hostctl.provision/v1" and doc["dry_run"] and doc["ok"] and doc["exit_code"] == 0
    assert [p["part"] for p in doc["parts"]] == ["storage", "system", "gpu"]
    statuses = {a["id"]: a["status"] for a in doc["actions"]}
    assert statuses["system/file/etc/hostctl/hostctl.toml"] == "would-change"
    assert statuses["storage/dirs/compile_cache"] == "would-change" and statuses["gpu"] == "skipped"
    for a in doc["actions"]:
        assert set(a) >= {"part", "id", "status", "argv", "diff", "destructive", "consent", "seconds", "reason"}
    # a dry run on an empty root: every action would change something, except the GPU part (no driver;
    # the demo profile sets no power limits, so no power unit either)
    assert {a["status"] for a in doc["actions"]} == {"would-change", "skipped"}
    assert [a["id"] for a in doc["actions"] if a["status"] == "skipped"] == ["gpu/power-unit", "gpu"]
    enable = next(a for a in doc["actions"] if a["id"] == "system/enable/hostctl-runtime.service")
    assert enable["argv"] == ["systemctl", f"--root={sysroot}", "enable", "hostctl-runtime.service"]
    assert not (sysroot / "etc").exists()  # changed nothing


def test_provision_refuses_a_snapshot(capsys):
    code, out, err = run(["provision", "--json", "--facts", str(HOSTS / "demo-cpu.facts.json"), "--config", DEMO],
                         capsys)
    assert code == 2 and out == "" and "acts on this host" in err


def test_verify_json_on_a_plain_machine_lists_the_checks_and_what_is_not_provisioned(capsys):
    code, out, err = run(["verify", "--json", "--config", DEMO], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "hostctl.verify/v1" and doc["ok"] and doc["host"] == "local"
    assert {p["part"]: p["status"] for p in doc["parts"]} == {
        "storage": "not-provisioned", "system": "not-provisioned", "gpu": "not-provisioned", "runtime": "not-expected"}
    ids = [c["id"] for c in doc["checks"]]
    assert {"storage/converged", "system/converged", "system/file/etc/hostctl/hostctl.toml",
            "system/enabled/hostctl-runtime.service", "gpu/converged", "runtime/container", "runtime/caps",
            "runtime/models"} <= set(ids)
    assert {c["status"] for c in doc["checks"]} == {"not-run"}


def test_verify_judges_what_provision_converged_and_names_what_drifted(sysroot, capsys):
    assert run(["provision", "--config", DEMO], capsys)[0] == 0
    code, out, err = run(["verify", "--config", DEMO, "--only", "storage,system,gpu"], capsys)
    assert code == 0, out + err
    assert "system: pass" in out and "pass  system/converged" in out and "  runtime:" not in out
    # someone edits the installed profile by hand: the file check and the convergence proof fail
    installed = sysroot / "etc/hostctl/hostctl.toml"
    installed.write_text(installed.read_text() + "# edited\n")
    code, out, err = run(["verify", "--json", "--config", DEMO, "--only", "system"], capsys)
    doc = json.loads(out)
    assert code == 1 and not doc["ok"]
    failed = {c["id"]: c for c in doc["checks"] if c["status"] == "fail"}
    assert set(failed) == {"system/converged", "system/file/etc/hostctl/hostctl.toml"}
    assert "replace /etc/hostctl/hostctl.toml" in failed["system/converged"]["found"]
    assert failed["system/converged"]["fix"].startswith("run `hostctl provision --only system`")
    # the unit disabled by hand: named in the text
    os.unlink(sysroot / "etc/systemd/system/multi-user.target.wants/hostctl-runtime.service")
    installed.write_text(installed.read_text().removesuffix("# edited\n"))
    code, out, err = run(["verify", "--config", DEMO, "--only", "system"], capsys)
    assert code == 1 and "FAIL  system/enabled/hostctl-runtime.service: hostctl-runtime.service is disabled" in out
    assert out.strip().endswith("failed: system/converged, system/enabled/hostctl-runtime.service")


def test_a_re_run_of_provision_json_is_only_ok(sysroot, capsys):
    code, out, _ = run(["provision", "--json", "--config", DEMO], capsys)
    first = json.loads(out)
    assert code == 0 and {a["status"] for a in first["actions"]} == {"changed", "skipped"}
    assert all(a["seconds"] is not None for a in first["actions"] if a["status"] == "changed")
    assert [p["status"] for p in first["parts"]] == ["converged"] * 3
    code, out, _ = run(["provision", "--json", "--config", DEMO], capsys)
    again = json.loads(out)
    assert code == 0 and {a["status"] for a in again["actions"] if a["part"] != "gpu"} == {"ok"}
    recorded = json.loads((sysroot / "var/lib/hostctl/provisioned.json").read_text())
    assert set(recorded["parts"]) == {"storage", "system", "gpu"}


def test_provision_json_of_a_failed_part_is_still_one_document(sysroot, capsys):
    # the desktop's recipe on this machine (no GPUs): the system part refuses to install its unit
    code, out, err = run(["provision", "--json", "--only", "system", "--config", str(HOSTS / "pro6000x2-desktop.toml")],
                         capsys)
    doc = json.loads(out)
    assert code == 1 and not doc["ok"] and doc["exit_code"] == 1
    assert doc["error"]["message"] == "the plan has errors; no unit was installed" and doc["error"]["details"]
    assert doc["parts"][0]["status"] == "failed" and doc["actions"][0]["status"] == "failed"
    assert "the plan has errors" in err  # the error is also said on stderr, for people
