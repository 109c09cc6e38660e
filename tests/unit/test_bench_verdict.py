"""The bench verdict is honest about what did not run: `ok` only when every enabled probe ran and
passed; a skipped probe (a quality eval with no tool or dataset here, a size that does not fit)
makes a run `partial` or, when nothing passed, `failed`; a disabled probe counts for nothing; a
`role: baseline` recipe's result says it is a baseline. Driven by vLLM-MoET's own quality suites and
baseline recipes from the copy (tests/moet_runner.py) and by probes recorded on the CPU demo."""

import json
from pathlib import Path

import pytest
import yaml

import moet_runner
from hostctl.bench import probes, runner, suites
from hostctl.config import Config, load_config, load_profile, parse_recipe
from hostctl.facts import load_snapshot
from hostctl.plan import build_plan

ROOT = Path(__file__).resolve().parents[2]
HOSTS = ROOT / "runtime" / "hosts"
DATA = ROOT / "tests" / "unit" / "data"


def _recipes_with_role(role: str) -> list[str]:
    out = []
    for rid in moet_runner.recipe_ids():
        data = yaml.safe_load((moet_runner.bench_copy("recipes") / f"{rid}.yaml").read_text())
        if data.get("role") == role:
            out.append(rid)
    return out


BASELINES = _recipes_with_role("baseline")
QUALITY_SUITES = [n for n in moet_runner.suite_names() if n.startswith("quality")]


def test_the_copy_has_baseline_recipes_and_quality_suites():
    # The parametrised tests below run on these; an empty list must fail, not pass silently.
    moet_runner.bench_dir()
    assert len(BASELINES) == 4 and QUALITY_SUITES == ["quality", "quality-native"]


def _recorded(key: str) -> dict:
    std = json.loads((DATA / "bench-vllm-moet-standard-demo-cpu.json").read_text())
    return next(p for p in std["probes"] if p["key"] == key)


def _quality_probe() -> dict:
    spec = suites.ProbeSpec(key="gsm8k", kind="quality", params={"profile": "gsm8k", "baseline": "b/x"})
    return runner.run_probe(probes.ProbeContext(api=None, context=2048, max_num_seqs=2, say=lambda m: None), spec)


def test_a_skipped_probe_makes_a_passing_run_partial_never_ok():
    decode, coherence = _recorded("decode"), _recorded("coherence")  # both passed on the demo
    assert runner.verdict([decode, coherence])[0] == "ok"
    quality = _quality_probe()
    assert quality["status"] == "skipped"
    status, incomplete = runner.verdict([decode, quality, coherence])
    assert status == "partial"
    assert incomplete["failed"] == [] and [s["key"] for s in incomplete["skipped"]] == ["gsm8k"]
    assert "gsm8k dataset" in incomplete["skipped"][0]["reason"]
    prefill = _recorded("prefill")  # recorded skipped: 8,000 words do not fit 2,048 tokens
    assert runner.verdict([decode, prefill])[0] == "partial"


def test_a_passing_probe_with_cases_that_did_not_run_makes_the_run_partial():
    # The demo's recorded needle under vLLM-MoET's standard suite: its 3% and 95% sizes did not fit.
    needle = _recorded("needle")
    skipped_cases = [c for c in needle["cases"] if c.get("skipped")]
    assert len(skipped_cases) == 2 and len(needle["cases"]) == 4
    # Had the two sizes that ran been recalled, the probe passes, and the run is still not ok.
    recalled = {**needle, "status": "ok", "cases": [c if c.get("skipped") else {**c, "pass": True}
                                                    for c in needle["cases"]]}
    status, incomplete = runner.verdict([_recorded("decode"), recalled])
    assert status == "partial"
    (entry,) = incomplete["skipped"]
    assert entry["key"] == "needle" and entry["reason"].startswith("2 of its 4 cases did not run: ")
    assert skipped_cases[1]["skipped"] in entry["reason"]


def test_nothing_passed_is_failed_and_a_disabled_probe_counts_for_nothing():
    decode, needle = _recorded("decode"), _recorded("needle")  # needle failed on the demo
    disabled = {"key": "gpqa-think", "kind": "quality", "status": "disabled"}
    assert runner.verdict([decode, disabled])[0] == "ok"
    assert runner.verdict([_quality_probe(), disabled])[0] == "failed"  # all skipped: nothing measured
    assert runner.verdict([disabled])[0] == "failed"
    assert runner.verdict([needle, _quality_probe()]) == (
        "failed", {"failed": ["needle"], "skipped": [runner.verdict([_quality_probe()])[1]["skipped"][0]]})
    assert runner.verdict([decode, needle])[0] == "partial"


def _demo_plan():
    return build_plan(load_config(HOSTS / "demo-cpu.toml"), load_snapshot(HOSTS / "demo-cpu.facts.json"))


@pytest.mark.parametrize("suite", QUALITY_SUITES)
@pytest.mark.parametrize("rid", BASELINES)
def test_a_baseline_recipe_on_a_quality_suite_says_what_is_missing_and_is_not_ok(rid, suite, tmp_path):
    copy = moet_runner.bench_dir()
    data = yaml.safe_load((copy / "recipes" / f"{rid}.yaml").read_text())
    recipe = parse_recipe(data, rid)
    cfg = Config(profile=load_profile(HOSTS / "demo-cpu.toml"), recipe=recipe, source=str(HOSTS / "demo-cpu.toml"))
    # Nothing listens on port 9: no quality probe may reach the API (none can run here).
    svc = runner.Service(endpoint="http://127.0.0.1:9", container="none", image_id=None, kv=None,
                         project_dir=tmp_path / "project")
    doc, path = runner.run(cfg, _demo_plan(), str(copy / "suites" / f"{suite}.yaml"), out_dir=tmp_path,
                           say=lambda m: None, service=svc)
    assert json.loads(path.read_text()) == doc
    # vLLM-MoET's own merge decides which probes are enabled for this recipe.
    moet = moet_runner.runner()["common"]
    expected = moet.merge_suite(moet.load_suite(suite), moet.load_recipe(rid))
    assert [(p["key"], p["status"] != "disabled") for p in doc["probes"]] == [
        (p.get("id") or p["kind"], p["enabled"]) for p in expected]
    for p, want in zip(doc["probes"], expected):
        if not want["enabled"]:
            assert p["status"] == "disabled"
            continue
        assert p["status"] == "skipped" and "llm-inference-bench" in p["reason"]
        assert f"the {want['profile']} dataset" in p["reason"]
        assert (f"baseline {want.get('baseline')}" in p["reason"]) == ("baseline" in want)
    assert doc["status"] == "failed" and doc["status_rule"] == runner.STATUS_RULE
    assert [s["key"] for s in doc["incomplete"]["skipped"]] == [p["id"] for p in expected if p["enabled"]]
    assert doc["service"]["recipe_role"] == "baseline" and doc["baseline"]["recipe"] == rid
    head = runner.text_report(doc, path).splitlines()[0]
    assert f"recipe {rid} (a baseline recipe)" in head and head.endswith(": failed")


def test_a_candidate_recipe_is_not_called_a_baseline(tmp_path):
    data = yaml.safe_load((ROOT / "runtime" / "recipes" / "demo-cpu-tiny-moe.yaml").read_text())
    cfg = Config(profile=load_profile(HOSTS / "demo-cpu.toml"), recipe=parse_recipe(data),
                 source=str(HOSTS / "demo-cpu.toml"))
    svc = runner.Service(endpoint="http://127.0.0.1:9", container="none", image_id=None, kv=None,
                         project_dir=tmp_path / "project")
    suite = tmp_path / "q.yaml"
    suite.write_text("id: q\nprobes:\n  - {kind: quality, id: gsm8k, profile: gsm8k}\n")
    doc, path = runner.run(cfg, _demo_plan(), str(suite), out_dir=tmp_path, say=lambda m: None, service=svc)
    assert doc["baseline"] is None and doc["service"]["recipe_role"] is None
    assert "baseline" not in runner.text_report(doc, path).splitlines()[0]
    assert "baseline" not in doc["probes"][0]["reason"]  # this probe names none


def test_a_missing_quality_tool_fails_in_vllm_moet_and_is_skipped_in_hostctl(monkeypatch):
    # A deliberate difference (docs/vllm-moet-differences.md, "Running a suite"): vLLM-MoET's probe
    # raises when llm-inference-bench is not where it looks (bench.py then records `failed`);
    # hostctl records the same probe `skipped` with what is missing. Both sides run on each quality
    # probe of the copy's suites, as vLLM-MoET merges them.
    moet = moet_runner.runner()
    monkeypatch.delenv("LLM_BENCH", raising=False)
    common = moet["common"]
    for name in QUALITY_SUITES:
        for p in common.merge_suite(common.load_suite(name), {"suite_params": {}}):
            params = {k: v for k, v in p.items() if k not in ("kind", "id", "enabled")}
            with pytest.raises(RuntimeError, match="quality probe needs llm-inference-bench"):
                moet["probes"].quality("http://127.0.0.1:9", "m", log=lambda m: None, **params)
            spec = suites.ProbeSpec(key=p["id"], kind="quality", params=params)
            mine = runner.run_probe(probes.ProbeContext(api=None, context=2048, max_num_seqs=2, say=lambda m: None),
                                    spec)
            assert mine["status"] == "skipped" and f"the {p['profile']} dataset" in mine["reason"]
