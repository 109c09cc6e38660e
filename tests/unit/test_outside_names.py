"""A name taken from a file hostctl reads never becomes a path of its own choosing (F4 of the
adversarial review): a bench suite's `id` is checked with safepaths.file_name_problem where the
suite is parsed (exit 2 naming `id`), and safefs refuses a `..` component instead of collapsing
it by hand, so no folder on the way is skipped.

The effect checked: the victim file outside the output folder is not created, and the output
folder holds nothing but what bench meant to write.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

import moet_runner
from hostctl import safefs, safepaths
from hostctl.bench import runner, suites
from hostctl.config import load_config
from hostctl.errors import InputError
from hostctl.facts import load_snapshot
from hostctl.plan import build_plan

ROOT = Path(__file__).resolve().parents[2]
HOSTILE_IDS = ["x/../../victim/daemon", "../victim/daemon", "/tmp/victim/daemon", "..", ".", ".hidden", "-rf",
               "a/b", "x" * 129, "a\nb", "a b", "ä", 12]
BENIGN_IDS = ["quick", "standard", "qualify", "mtp-ab", "quality-native", "v1.2_rc+3", "x" * 128]


@pytest.mark.parametrize("suite_id", HOSTILE_IDS)
def test_a_suite_id_that_is_not_a_plain_name_is_refused_naming_the_field(suite_id):
    with pytest.raises(InputError) as e:
        suites.parse_suite({"id": suite_id, "probes": [{"kind": "decode", "enabled": False}]}, "s.yaml")
    assert e.value.exit_code == 2 and any(d.startswith("id: ") for d in e.value.details), e.value.details


@pytest.mark.parametrize("suite_id", BENIGN_IDS)
def test_a_plain_suite_id_is_kept(suite_id):
    assert suites.parse_suite({"id": suite_id, "probes": [{"kind": "decode"}]}, "s.yaml").id == suite_id
    assert safepaths.file_name_problem(suite_id) is None


def test_vllm_moet_and_bundled_suite_ids_are_plain_names():
    for f in [*(moet_runner.bench_copy("suites").glob("*.yaml")), *(ROOT / "runtime" / "suites").glob("*.yaml")]:
        doc = yaml.safe_load(f.read_text())
        assert safepaths.file_name_problem(doc.get("id") or f.stem) is None, f


def test_bench_with_a_climbing_suite_id_writes_nothing_outside_its_folder(tmp_path):
    suite = tmp_path / "evil-suite.yaml"
    suite.write_text('id: "x/../../victim/daemon"\nprobes:\n  - {kind: decode, enabled: false}\n')
    out, victim = tmp_path / "benchout", tmp_path / "victim" / "daemon.json"
    config = load_config(ROOT / "runtime" / "hosts" / "demo-cpu.toml")
    plan = build_plan(config, load_snapshot(ROOT / "runtime" / "hosts" / "demo-cpu.facts.json"))
    svc = runner.Service(endpoint="http://127.0.0.1:9", container="c", image_id=None, kv=None,
                         project_dir=tmp_path / "noproj")
    with pytest.raises(InputError) as e:
        runner.run(config, plan, str(suite), out_dir=out, say=lambda *_: None, service=svc, store_verdict=False)
    assert e.value.exit_code == 2 and any(d.startswith("id: ") for d in e.value.details)
    assert not victim.exists() and not (tmp_path / "victim").exists()
    assert not out.exists() or list(out.rglob("*")) == []


def test_safefs_refuses_a_dot_dot_component_instead_of_collapsing_it(tmp_path):
    victim = tmp_path / "victim.json"
    with pytest.raises(safefs.UntrustedPathError) as e:
        safefs.write_file(tmp_path / "out" / "20261202T010607Z-x" / ".." / ".." / "victim.json", "{}")
    assert e.value.exit_code == 3 and ".." in str(e.value)
    assert not victim.exists() and not (tmp_path / "out").exists()


def test_safefs_relative_paths_still_work(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    safefs.write_file(Path("out") / "r.json", "{}")
    assert (tmp_path / "out" / "r.json").read_text() == "{}"
    assert safefs.read_trusted("out/r.json", max_bytes=10) == b"{}"


def test_a_dot_dot_the_user_typed_in_out_is_theirs(tmp_path, monkeypatch):
    """safefs refuses `..` in what it walks; `render --out ../x`, typed by the user, is made absolute
    first (as the shell's cd would) and written where they meant."""
    from hostctl.cli import main

    (tmp_path / "a").mkdir()
    monkeypatch.chdir(tmp_path / "a")
    hosts = ROOT / "runtime" / "hosts"
    code = main(["render", "--config", str(hosts / "demo-cpu.toml"), "--facts", str(hosts / "demo-cpu.facts.json"),
                 "--out", "../out"])
    assert code == 0 and (tmp_path / "out" / "compose.yaml").is_file()
