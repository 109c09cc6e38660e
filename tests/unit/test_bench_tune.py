"""bench and tune without a runtime: vLLM-MoET's own suite and recipe files load unchanged, suite
params merge as vLLM-MoET merges them, trial and boot planning, constraints, the tuned recipe,
the service fingerprint, the qualify verdict, doctor's service.qualified and the tune chart."""

import json
import os
import signal
import stat
import time
from pathlib import Path

import pytest
import yaml

from hostctl.bench import probes, qualify, suites
from hostctl.cli import main
from hostctl.config import parse_recipe
from hostctl.errors import InputError
from hostctl.service import fingerprint, status
from hostctl.tune import chart
from hostctl.tune import plan as tplan
from hostctl.tune import runner as trunner
from need import need, need_module

ROOT = Path(__file__).resolve().parents[2]
MOET = ROOT / "tests" / "unit" / "data" / "vllm-moet"
HOSTS = ROOT / "runtime" / "hosts"


def moet_recipe(name: str) -> tuple[dict, object]:
    data = yaml.safe_load((MOET / "recipes" / f"{name}.yaml").read_text())
    return data, parse_recipe(data, name)


# ---------------------------------------------------------------- suites


def test_vllm_moet_suites_load_unchanged_with_every_probe_kept():
    quick = suites.merge(suites.load_suite(str(MOET / "suites" / "quick.yaml")), None)
    assert [p.kind for p in quick] == ["decode", "prefill", "needle", "arithmetic"]
    assert quick[2].params == {"sizes_words": [6000], "depth": 0.5, "max_tokens": 512}
    quality = suites.merge(suites.load_suite(str(MOET / "suites" / "quality.yaml")), None)
    assert [(p.key, p.kind, p.enabled) for p in quality] == [
        ("gsm8k", "quality", True), ("gpqa", "quality", True), ("gpqa-think", "quality", False)]


def test_suite_params_apply_only_where_the_suite_allows_them():
    _, recipe = moet_recipe("deepseek-v4-flash_5090x1-basecache")  # suite_params: decode runs 7, needle [6000]
    standard = {p.key: p for p in suites.merge(suites.load_suite(str(MOET / "suites" / "standard.yaml")), recipe)}
    assert standard["decode"].params["runs"] == 7 and standard["decode"].overridden == ("runs",)
    assert standard["batch_decode"].params["concurrency"] == [1]
    assert standard["needle"].params["sizes_words"] == [6000]
    quick = {p.key: p for p in suites.merge(suites.load_suite(str(MOET / "suites" / "quick.yaml")), recipe)}
    assert quick["decode"].params["runs"] == 3 and quick["decode"].overridden == ()  # quick takes no overrides
    _, q = moet_recipe("glm-5.2-nvfp4_pro6000x4-tp4-quality")
    merged = {p.key: p for p in suites.merge(suites.load_suite(str(MOET / "suites" / "quality.yaml")), q)}
    assert merged["gpqa-think"].enabled is False


def test_bundled_suites_are_sized_by_fractions_of_the_context():
    for name in suites.BUNDLED:
        for p in suites.merge(suites.load_suite(name), None):
            assert "sizes_words" not in p.params and "words" not in p.params, (name, p.key)
    ladder = suites.merge(suites.load_suite("qualify"), None)
    assert [p.kind for p in ladder] == ["needle", "boundary"]
    assert ladder[0].params["sizes_frac"] == [0.25, 0.5, 0.95]


@pytest.mark.parametrize("doc, field", [
    ({"id": "x"}, "probes"),
    ({"probes": [{"runs": 3}]}, "probes[0].kind"),
    ({"probes": [{"kind": "decode", "runs": "three"}]}, "probes[0].runs"),
    ({"probes": [{"kind": "needle", "sizes_frac": [0.5, "half"]}]}, "probes[0].sizes_frac"),
    ({"probes": [{"kind": "decode", "enabled": "yes"}]}, "probes[0].enabled"),
])
def test_a_bad_suite_names_the_field(doc, field):
    with pytest.raises(InputError) as exc:
        suites.parse_suite(doc, "bad.yaml")
    assert any(d.startswith(field) for d in exc.value.details), exc.value.details


def test_unknown_probe_parameters_are_kept_not_refused():
    s = suites.parse_suite({"probes": [{"kind": "quality", "profile": "gsm8k", "baseline": "x"}]}, "s.yaml")
    assert suites.merge(s, None)[0].params == {"profile": "gsm8k", "baseline": "x"}


def test_degeneration_detector():
    assert probes.degenerate("the the the the the the the the the the the the the the the the ")
    assert probes.degenerate("abc" + "xy" * 40)
    assert not probes.degenerate("Bread goes stale because its starch crystallises and water moves out of it.")


# ---------------------------------------------------------------- tune planning


@pytest.mark.parametrize("name, boots, trials", [
    ("glm-5.2-nvfp4_pro6000x4-tp4-quality", 4, 12),  # 2 restart env axes x 1 knob-file axis of 3
    ("glm-5.2-nvfp4_pro6000x4-tp4-mtp", 3, 3),  # serve_json num_speculative_tokens 1/2/3
    ("kimi-k2.7-code-nvfp4_pro6000x4-tp4-256k", 4, 4),  # an axis without `restart` restarts
    ("deepseek-v4-flash_5090x1-basecache", 2, 2),
    ("deepseek-v4-flash-0731_pro6000x2-tp2", 1, 1),  # axes: []: the recipe as it is, once
])
def test_vllm_moet_recipes_plan_the_right_boots_and_trials(name, boots, trials):
    data, recipe = moet_recipe(name)
    tp = trunner.plan_for(data, recipe)
    assert (len(tp.boots), len(tp.trials)) == (boots, trials)
    assert len({t.id for t in tp.trials}) == trials


def test_dry_run_json_lists_trials_and_boots_of_a_vllm_moet_recipe(capsys):
    code = main(["tune", "--dry-run", "--json", "--config", str(HOSTS / "demo-cpu.toml"),
                 "--recipe", str(MOET / "recipes" / "glm-5.2-nvfp4_pro6000x4-tp4-quality.yaml")])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["schema"] == "hostctl.tune/v1" and doc["dry_run"] is True
    assert len(doc["boots"]) == 4 and len(doc["trials"]) == 12
    assert doc["probes"] == ["decode", "arithmetic", "coherence"]
    boot = doc["boots"][0]
    # The knob-file axis: its variable points at a file bound into the container; no boot per value.
    assert boot["env"]["VLLM_MOE_W2_GATE_TAU_FILE"] == "/run/hostctl-tune/VLLM_MOE_W2_GATE_TAU_FILE"
    assert [t["runtime_knobs"] for t in doc["trials"][:3]] == [
        {"VLLM_MOE_W2_GATE_TAU_FILE": v} for v in ("0.50", "0.60", "0.75")]


def test_demo_tuning_is_two_by_two_serve_args(capsys):
    code = main(["tune", "--dry-run", "--json", "--config", str(HOSTS / "demo-cpu.toml")])
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and len(doc["boots"]) == 4
    args = [b["serve_args"] for b in doc["boots"]]
    assert ["--max-num-batched-tokens 1024" in a and "--max-num-seqs 4" in a for a in args] == [False, True, False,
                                                                                                 False]
    assert all(sum(e.startswith("--max-num-seqs") for e in a) == 1 for a in args)  # replaced, not appended


def test_serve_json_and_serve_arg_axes_edit_the_serve_args():
    args = ['--speculative-config {"method":"dspark","num_speculative_tokens":7}', "--max-num-seqs 2",
            "--enforce-eager"]
    assert tplan.apply_serve_json(args, "--speculative-config", "num_speculative_tokens", 3)[0] == \
        '--speculative-config {"method":"dspark","num_speculative_tokens":3}'
    assert tplan.apply_serve_arg(args, "--max-num-seqs", 4)[1] == "--max-num-seqs 4"  # in place
    assert "--enforce-eager" not in tplan.apply_serve_arg(args, "--enforce-eager", False)
    assert tplan.apply_serve_arg(["--x 1"], "--enforce-eager", True) == ["--x 1", "--enforce-eager"]


@pytest.mark.parametrize("tuning, field", [
    ({"constraints": []}, "tuning.objective"),
    ({"objective": "decode.median_tok_s", "axes": [{"kind": "flag", "values": [1]}]}, "tuning.axes[0].kind"),
    ({"objective": "decode.median_tok_s", "axes": [{"kind": "env", "values": ["1"]}]}, "tuning.axes[0].name"),
    ({"objective": "decode.median_tok_s", "axes": [{"kind": "serve_arg", "arg": "--x", "values": []}]},
     "tuning.axes[0].values"),
    ({"objective": "decode.median_tok_s", "constraints": ["arithmetic.score >= lots"]}, "tuning.constraints[0]"),
    ({"objective": "nosuchprobe.x"}, "tuning.objective"),
])
def test_a_bad_tuning_block_names_the_field(tuning, field):
    with pytest.raises(InputError) as exc:
        tplan.parse_tuning(tuning, probe_keys=["decode", "needle", "arithmetic"])
    assert exc.value.message.startswith(field), exc.value.message


def test_constraints_read_probes_kv_and_qualify():
    t = tplan.parse_tuning({"objective": "decode.median_tok_s", "constraints": [
        "kv.full_context_requests>=2", "qualify.pass", "needle.all_pass", "arithmetic.score>=2"]},
        probe_keys=["decode", "needle", "arithmetic"])
    assert t.needs_qualify and t.probe_keys() == ["decode", "needle", "arithmetic"]
    results = {"kv": {"full_context_requests": 2}, "qualify": {"pass": True}, "needle": {"all_pass": False},
               "arithmetic": {"score": 3}}
    assert [c.check(results) for c in t.constraints] == [True, True, False, True]
    assert t.constraints[0].check({"kv": {"full_context_requests": 1}}) is False
    assert t.constraints[3].check({}) is None  # the probe did not run: not a pass


def test_the_winner_is_the_best_valid_trial_and_the_tuned_recipe_carries_its_knobs():
    data = yaml.safe_load((ROOT / "runtime" / "recipes" / "demo-cpu-tiny-moe.yaml").read_text())
    recipe = parse_recipe(data)
    tp = trunner.plan_for(data, recipe)
    from hostctl.config import Config, load_profile

    cfg = Config(profile=load_profile(HOSTS / "demo-cpu.toml"), recipe=recipe, source=str(HOSTS / "demo-cpu.toml"))
    sweep = trunner.Sweep(cfg, data, "demo.yaml", tp, facts=None, out_dir=Path("/nonexistent"), say=print,
                          hostctl_bin="hostctl")
    # trials: (1024, 2), (1024, 4), (2048, 2), (2048, 4)
    for t, (obj, kv) in zip(sweep.doc["trials"], [(50.0, 2), (70.0, 1), (None, None), (60.0, 3)]):
        t.update({"status": "ok" if obj else "failed", "objective": obj,
                  "constraints": {"kv.full_context_requests>=2": kv is not None and kv >= 2},
                  "valid": obj is not None and kv >= 2})
    before = json.dumps(data)
    sweep._finish()
    # trial-2 is fastest but fails its constraint; trial-3 failed to start: trial-4 wins.
    assert sweep.doc["winner"]["trial"] == "trial-4" and sweep.doc["status"] == "ok"
    tuned = sweep.tuned_recipe()
    assert tuned["serve_args"] == [a.replace("--max-num-seqs 2", "--max-num-seqs 4") for a in data["serve_args"]]
    assert json.dumps(data) == before  # the loaded recipe is left alone
    diff = sweep.doc["recipe_diff"]
    assert "-- --max-num-seqs 2\n+- --max-num-seqs 4\n" in diff and diff.count("\n+") == 2  # header + one line


def test_the_chart_is_a_png_and_its_absence_is_explained(tmp_path, monkeypatch):
    doc = {"recipe": {"id": "r"}, "objective": "decode.median_tok_s", "winner": {"trial": "trial-2"},
           "trials": [{"id": "trial-1", "knobs": {"--max-num-seqs": 2}, "objective": 10.0, "valid": True},
                      {"id": "trial-2", "knobs": {"--max-num-seqs": 4}, "objective": 12.0, "valid": True},
                      {"id": "trial-3", "knobs": {"--max-num-seqs": 8}, "objective": None, "valid": False,
                       "status": "failed", "cause": {"id": "container-oom"}}]}
    need_module("matplotlib", "the charts extra is not installed (CI installs it)")
    png, why = chart.draw(doc)
    assert why is None and png[:8] == b"\x89PNG\r\n\x1a\n"
    import builtins

    real = builtins.__import__

    def no_matplotlib(name, *a, **kw):
        if name.startswith("matplotlib"):
            raise ImportError(name)
        return real(name, *a, **kw)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    png, why = chart.draw(doc)
    assert png is None and "hostctl[charts]" in why


# ---------------------------------------------------------------- fingerprint, qualify, doctor


def test_fingerprint_hashes_compose_env_names_and_image_not_env_values():
    a = fingerprint.of_files("services: {}\n", "# c\nA=1\nB='x y'\n", "sha256:aa")
    assert a.env_names == ("A", "B")
    assert fingerprint.of_files("services: {}\n", "A=2\nB=secret\n", "sha256:aa").digest == a.digest
    assert fingerprint.of_files("services: {}\n", "A=1\n", "sha256:aa").digest != a.digest
    assert fingerprint.of_files("services: {x: 1}\n", "A=1\nB=2\n", "sha256:aa").digest != a.digest
    b = fingerprint.of_files("services: {}\n", "A=1\nB=2\n", "sha256:bb")
    assert b.digest != a.digest and "another build" in " ".join(fingerprint.differences(a, b))
    assert fingerprint.ServiceFingerprint.from_dict(a.to_dict()) == a


def _qualify_result(pass_needles=(True, True, True), boundary_pass=True, skipped_95=False):
    cases = [{"size": f, "size_unit": "context_frac", "pass": p, "prompt_tokens": int(f * 2048), "code": "ECHO",
              "reply": "ECHO" if p else "?"} for f, p in zip((0.25, 0.5, 0.95), pass_needles)]
    if skipped_95:
        cases[2] = {"size": 0.95, "size_unit": "context_frac", "pass": None, "skipped": "does not fit"}
    return {"service": {"profile": "demo-cpu", "recipe": "demo-cpu-tiny-moe", "context": 2048},
            "finished_at": "2026-12-01T00:00:00+00:00",
            "environment": {"service_fingerprint": {"compose_sha256": "c", "env_names": ["A"], "image_id": "i"}},
            "probes": [{"kind": "needle", "key": "needle", "status": "ok", "cases": cases},
                       {"kind": "boundary", "key": "boundary", "status": "ok" if boundary_pass else "failed",
                        "concurrency": 2, "input_tokens": 1920, "output_tokens": 128, "overlapped": True,
                        "requests": [{"request": 0, "pass": True}, {"request": 1, "pass": boundary_pass,
                                                                    "prompt_tokens": 1920,
                                                                    "completion_tokens": 100}]}]}


def test_qualify_verdict_passes_only_when_every_rung_ran_and_passed():
    assert qualify.verdict(_qualify_result(), None).passed is True
    v = qualify.verdict(_qualify_result(skipped_95=True), None)
    assert v.passed is False and v.rungs[2] == {"name": "needle 95%", "pass": False,
                                                 "detail": "did not run: does not fit"}
    v = qualify.verdict(_qualify_result(boundary_pass=False), None)
    assert v.passed is False and v.rungs[3]["name"] == "boundary 2x(1,920+128)"
    assert "request 1: 1920 in, 100 out" in v.rungs[3]["detail"]


def _doctor(facts_path: Path, capsys) -> dict:
    code = main(["doctor", "--json", "--config", str(HOSTS / "demo-cpu.toml"), "--facts", str(facts_path)])
    out = json.loads(capsys.readouterr().out)
    check = next(c for c in out["checks"] if c["id"] == "service.qualified")
    return {"code": code, **check}


def test_doctor_judges_the_stored_verdict_against_this_plan(tmp_path, capsys):
    from hostctl.config import load_config
    from hostctl.facts import load_snapshot
    from hostctl.plan import build_plan

    snap = load_snapshot(HOSTS / "demo-cpu.facts.json")
    assert _doctor(HOSTS / "demo-cpu.facts.json", capsys)["status"] == "skip"  # a snapshot without one cannot tell
    plan = build_plan(load_config(HOSTS / "demo-cpu.toml"), snap)
    image_id = "sha256:" + "1" * 64
    fp = fingerprint.of_plan(plan, image_id)
    verdict = {"schema": "hostctl.qualify/v1", "passed": True, "measured_at": "2026-12-01T00:00:00+00:00",
               "profile": "demo-cpu", "recipe": "demo-cpu-tiny-moe", "context": 2048, "fingerprint": fp.to_dict(),
               "rungs": [{"name": "needle 25%", "pass": True}]}

    def with_state(v: dict, image: str | None) -> Path:
        doc = json.loads((HOSTS / "demo-cpu.facts.json").read_text())
        doc["state"]["qualify"] = v
        doc["engine"]["images"] = [{"ref": plan.runtime.image, "id": image}] if image else []
        p = tmp_path / f"snap-{len(list(tmp_path.iterdir()))}.json"
        p.write_text(json.dumps(doc))
        return p

    assert _doctor(with_state(verdict, image_id), capsys)["status"] == "pass"
    other = _doctor(with_state(verdict, "sha256:" + "2" * 64), capsys)
    assert other["status"] == "warn" and "another build" in other["summary"]
    moved = _doctor(with_state({**verdict, "recipe": "something-else"}, image_id), capsys)
    assert moved["status"] == "warn" and "measured under recipe something-else" in moved["summary"]
    failed = _doctor(with_state({**verdict, "passed": False}, image_id), capsys)
    assert failed["status"] == "fail" and failed["code"] == 1


# ---------------------------------------------------------------- the sweep's orchestration


def _sweep(tmp_path, up, down):
    from hostctl.config import Config, load_profile
    from hostctl.facts import load_snapshot

    data = yaml.safe_load((ROOT / "runtime" / "recipes" / "demo-cpu-tiny-moe.yaml").read_text())
    recipe = parse_recipe(data)
    cfg = Config(profile=load_profile(HOSTS / "demo-cpu.toml"), recipe=recipe, source=str(HOSTS / "demo-cpu.toml"))
    return trunner.Sweep(cfg, data, "demo.yaml", trunner.plan_for(data, recipe),
                         facts=load_snapshot(HOSTS / "demo-cpu.facts.json"), out_dir=tmp_path, say=lambda m: None,
                         hostctl_bin="hostctl", up=up, down=down)


def test_a_failed_boot_is_recorded_and_the_sweep_goes_on(tmp_path):
    # The lifecycle is up's own in the system tests; here a stand-in with its signature fails every boot.
    from hostctl.failures import Finding
    from hostctl.errors import FailedError
    from hostctl.service.lifecycle import StartOutcome

    seen, downs = [], []

    def up(cfg, plan, facts, **kw):
        seen.append(cfg.recipe.args().get("--max-num-seqs"))
        if len(seen) == 2:
            raise FailedError("preflight: the API port 127.0.0.1:8000 is already taken", fix="stop it")
        return StartOutcome(ready=False, endpoint="http://127.0.0.1:8000",
                       cause=Finding(id="container-oom", title="OOM", cause="the cap", fix="raise it in 2 GiB steps", lines=[]))

    sweep = _sweep(tmp_path, up, lambda cfg, say: downs.append(1))
    doc = sweep.run()
    assert seen == ["2", "4", "2", "4"] and doc["boot_count"] == 4
    assert [b["cause"]["id"] for b in doc["boots"]] == ["container-oom", "preflight", "container-oom", "container-oom"]
    assert all(t["status"] == "failed" for t in doc["trials"]) and doc["status"] == "no_winner"
    assert downs == []  # up takes a failed start down itself; preflight started nothing


def test_an_interrupted_boot_is_taken_down_and_recorded(tmp_path):
    from hostctl.interrupt import Interrupted

    downs = []

    def up(cfg, plan, facts, **kw):
        raise Interrupted(signal.SIGTERM)

    sweep = _sweep(tmp_path, up, lambda cfg, say: downs.append(cfg.profile.runtime.project))
    with pytest.raises(Interrupted):
        sweep.run()
    assert downs == ["hostctl"] and sweep.doc["status"] == "interrupted"
    assert sweep.doc["interrupted"] == {"signal": "SIGTERM"}
    assert [b["status"] for b in sweep.doc["boots"]] == ["starting", "not_run", "not_run", "not_run"]
    path = sweep.write(write_recipe=True)
    assert json.loads(path.read_text())["status"] == "interrupted" and sweep.doc["tuned_recipe"] is None


def test_signals_become_interrupted_with_the_shell_exit_code():
    from hostctl.interrupt import Interrupted, signals_raise

    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as exc:
        with signals_raise():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(1)
    assert exc.value.exit_code == 143 and exc.value.signal_name == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) == before  # restored
    assert Interrupted(signal.SIGINT).exit_code == 130


def test_status_line_says_whether_the_verdict_is_this_services():
    part = {"passed": False, "measured_at": "2026-12-01T00:00:00+00:00", "context": 2048, "this_service": False,
            "differences": ["the image is another build (stored aaa, now bbb)"],
            "rungs": [{"name": "needle 25%", "pass": False}, {"name": "boundary 2x(1,920+128)", "pass": True}]}
    line = status.qualify_line(part)
    assert "FAILED" in line and "(2,048 tokens)" in line and "ANOTHER service: the image is another build" in line
    assert "needle 25% FAIL, boundary 2x(1,920+128) ok" in line
    assert "no verdict stored" in status.qualify_line(None)


def test_text_reports_of_recorded_demo_results():
    # Real results recorded on the CPU demo (tests/system/test_bench_tune_system.py's suites), before
    # coherence also refused one answer to every prompt (the tiny model says "323" to all six).
    data = ROOT / "tests" / "unit" / "data"
    from hostctl.bench.runner import text_report

    std = json.loads((data / "bench-vllm-moet-standard-demo-cpu.json").read_text())
    out = text_report(std, Path("r.json"))
    assert "skipped  prefill        prefill: 8,000 words need at least 8,000 tokens" in out
    assert "batch_decode   c=1: " in out and "; c=2: " in out and "needle         0/2 recalled (skipped," in out
    q = json.loads((data / "bench-qualify-demo-cpu.json").read_text())
    assert "qualify: FAILED needle 25% FAIL, needle 50% FAIL, needle 95% FAIL, boundary 2x(1,920+128) ok" in \
        text_report(q, Path("q.json"))
    assert qualify.verdict(q, None).passed is False
    rows = next(p for p in std["probes"] if p["key"] == "coherence")["rows"]
    assert [r["text"] for r in rows] == ["323"] * 6
    judged = probes.judge_coherence(rows)
    assert judged["ok"] is False and judged["same_answer_to_all"] is True
    assert probes.judge_coherence(rows[:1])["ok"] is True  # one prompt cannot be "the same answer to all"


def test_the_chart_is_written_with_the_results_through_the_executor(tmp_path):
    need_module("matplotlib", "the charts extra is not installed (CI installs it)")
    sweep = _sweep(tmp_path, None, None)
    lines: list[str] = []
    sweep.say = lines.append
    first = sweep.tp.trials[0]
    sweep.doc["trials"] = [{"id": first.id, "knobs": first.knobs, "status": "ok", "objective": 1.0, "valid": True}]
    sweep.doc["status"] = "running"
    sweep._finish()
    path = sweep.write(write_recipe=False)
    png = tmp_path / "objective.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads(path.read_text())["chart"] == str(png)
    assert any(line.startswith("[1/2] tune-results/objective.png: create") for line in lines), lines


def test_the_tuned_recipe_and_its_results_are_the_users_alone(tmp_path, monkeypatch):
    """tune --write copies the whole recipe, its env with it: a token the recipe holds reaches the
    runtime only through the 0600 runtime.env, so the copy (and tune.json, whose diff quotes the
    recipe) must not be readable by every local user. Under sudo they are the invoking user's."""
    need(os.geteuid() == 0, "chown to the invoking user needs root")
    monkeypatch.setenv("SUDO_UID", "65534")
    monkeypatch.setenv("SUDO_GID", "65534")
    sweep = _sweep(tmp_path, None, None)
    sweep.recipe_data = {**sweep.recipe_data, "env": {**(sweep.recipe_data.get("env") or {}),
                                                      "HF_TOKEN": "hf_" + "x" * 30}}
    first = sweep.tp.trials[0]
    sweep.doc["trials"] = [{"id": first.id, "knobs": first.knobs, "status": "ok", "objective": 1.0, "valid": True}]
    sweep.doc["status"] = "running"
    sweep._finish()
    assert sweep.doc["winner"], sweep.doc
    path = sweep.write(write_recipe=True)
    tuned = Path(sweep.doc["tuned_recipe"])
    assert "hf_" + "x" * 30 in tuned.read_text()
    for p in (tuned, path):
        st = os.stat(p)
        assert (stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid) == (0o600, 65534, 65534), p


def test_dry_run_with_facts_plans_the_recipe_on_them(tmp_path, capsys):
    # --facts was accepted and never read: `tune --dry-run --facts /nonexistent` exited 0, and a
    # recipe no boot could serve on the snapshot (here 4 GPUs on a host with none) listed its boots
    # as if they could run.
    recipe = str(MOET / "recipes" / "glm-5.2-nvfp4_pro6000x4-tp4-quality.yaml")
    base = ["tune", "--dry-run", "--json", "--config", str(HOSTS / "demo-cpu.toml"), "--recipe", recipe]
    assert main(base + ["--facts", str(tmp_path / "missing.json")]) == 2
    assert "missing.json" in capsys.readouterr().err
    code = main(base + ["--facts", str(HOSTS / "demo-cpu.facts.json")])
    captured = capsys.readouterr()
    doc = json.loads(captured.out)
    assert code == 0 and len(doc["boots"]) == 4
    assert any("[placement]" in e for e in doc["plan_errors"]), doc["plan_errors"]
    assert "warning: every boot would fail: hostctl plan reports [placement]" in captured.err
