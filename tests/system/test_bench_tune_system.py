"""`hostctl bench` and `hostctl tune` for real, on the CPU demo (vLLM's CPU build, the tiny MoE).

bench, qualify, status and doctor read the session's shared runtime. The two tune sweeps run on the
shared runtime's own profile, so each also proves that the service up before tune comes back as it
was (one boot each to bring it back; the 2 x 2 sweep boots 4 times; the qualify sweep boots twice,
its first boot failing at engine config, and is interrupted as its third boot starts); the
memory-cap trial boots its own host and dies in seconds.
"""

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from hostctl.bench import text as bench_text

from conftest import needs_compose, needs_root
from runtime_fixtures import SHARED_PORT, demo_recipe

pytestmark = [pytest.mark.system, needs_root, needs_compose]


def _result(out_dir: Path, suite: str) -> dict:
    (path,) = sorted(out_dir.glob(f"*-{suite}.json"))
    return json.loads(path.read_text())


def test_bench_quick_json_is_one_valid_result_with_every_probe(shared_runtime, tmp_path):
    h = shared_runtime
    h.require_ready()
    rc, out, err, _ = h.run("bench", "--suite", "quick", "--json", "--out", str(tmp_path), timeout=600)
    doc = json.loads(out)  # exactly one document on stdout
    assert doc == _result(tmp_path, "quick")
    assert doc["schema"] == "hostctl.bench/v1" and doc["suite"]["id"] == "quick"
    assert [p["key"] for p in doc["probes"]] == ["decode", "prefill", "needle", "arithmetic"]
    assert rc == (0 if doc["status"] == "ok" else 1), err
    assert "probe 1/4: decode" in err and "probe 4/4: arithmetic" in err  # progress on stderr
    env = doc["environment"]
    assert env["hostctl_version"] and env["image_id"].startswith("sha256:")
    assert env["kv"]["full_context_requests"] >= 1 and env["gpus"]["available"] is False
    fp = env["service_fingerprint"]
    assert len(fp["digest"]) == 64 and "VLLM_CPU_KVCACHE_SPACE" in fp["env_names"]
    decode, prefill, needle, arithmetic = doc["probes"]
    assert decode["status"] == "ok" and len(decode["samples_tok_s"]) == 3 and decode["median_tok_s"] > 0
    assert all(n == 128 for n in decode["completion_tokens"])
    assert prefill["status"] == "ok" and prefill["samples"][0]["prompt_tokens"] == 1024  # 0.5 of 2,048, exact
    assert prefill["median_ttft_s"] > 0
    (case,) = needle["cases"]
    assert needle["status"] in ("ok", "failed") and 900 <= case["prompt_tokens"] <= 1024 and case["code"]
    assert needle["status"] == ("ok" if case["pass"] else "failed")
    # hostctl's own arithmetic questions: the tiny model was never taught them; scored honestly.
    assert arithmetic["of"] == 5 and arithmetic["status"] == ("ok" if arithmetic["score"] >= 2 else "failed")


def test_vllm_moet_suite_runs_with_what_does_not_fit_skipped(shared_runtime, tmp_path):
    # vLLM-MoET's own standard suite, unchanged: its 95% needle with 512 output tokens and nothing
    # else fit a 2,048-token context; batch_decode runs vLLM's `vllm bench serve` from the image.
    suite = Path(__file__).resolve().parents[1] / "unit" / "data" / "vllm-moet" / "suites" / "standard.yaml"
    # Only its sizes are cut to CI's time (fewer decode runs and levels); the format is theirs.
    text = suite.read_text().replace("concurrency: [1, 4, 8, 16, 32]", "concurrency: [1, 2]")
    text = text.replace("max_tokens: 384\n    runs: 3", "max_tokens: 32\n    runs: 1")
    text = text.replace("runs: 5\n    max_tokens: 512", "runs: 2\n    max_tokens: 64")
    assert text.count("concurrency: [1, 2]") == 1 and "runs: 2\n    max_tokens: 64" in text
    small = tmp_path / "standard-small.yaml"
    small.write_text(text)
    h = shared_runtime
    h.require_ready()
    rc, out, err, _ = h.run("bench", "--suite", str(small), "--json", "--out", str(tmp_path), timeout=900)
    doc = json.loads(out)
    probes = {p["key"]: p for p in doc["probes"]}
    assert list(probes) == ["decode", "batch_decode", "prefill", "needle", "arithmetic", "coherence"], err
    assert probes["prefill"]["status"] == "skipped" and "8,000 words" in probes["prefill"]["reason"]
    bd = probes["batch_decode"]
    assert bd["status"] == "ok", bd
    assert bd["tool"] == "vllm bench serve" and set(bd["levels"]) == {"1", "2"}
    for n, level in bd["levels"].items():
        assert level["completed"] == int(n) and level["aggregate_tok_s"] > 0
        assert json.loads(Path(level["raw"]).read_text())["max_concurrency"] == int(n)
    cases = probes["needle"]["cases"]
    # 3% of 2,048 is 61 tokens: less than the sentence and question themselves; 95% + 512 out is too long.
    assert [c.get("skipped") is not None for c in cases] == [True, False, False, True], cases
    assert "the needle sentence and question alone take" in cases[0]["skipped"]
    assert "do not fit the served context of 2,048 tokens" in cases[3]["skipped"]
    assert len(probes["coherence"]["rows"]) == len(bench_text.COHERENCE) == 12 and all("text" in r for r in probes["coherence"]["rows"])
    assert subprocess.run(["docker", "ps", "-aq", "--filter", "name=hostctl-bench-"], capture_output=True,
                          text=True).stdout.strip() == ""


def test_qualify_runs_every_rung_and_status_and_doctor_show_the_verdict(shared_runtime, tmp_path):
    h = shared_runtime
    h.require_ready()
    rc, out, err, _ = h.run("bench", "--suite", "qualify", "--json", "--out", str(tmp_path), timeout=900)
    doc = json.loads(out)
    q = doc["qualify"]
    names = [r["name"] for r in q["rungs"]]
    assert names == ["needle 25%", "needle 50%", "needle 95%", "boundary 2x(1,920+128)"], q
    boundary = doc["probes"][1]
    assert boundary["requests"][0]["prompt_tokens"] == 1920 and boundary["overlapped"] is True
    assert boundary["status"] == "ok", boundary  # two exact-boundary requests at once fit and complete
    assert q["passed"] == all(r["pass"] for r in q["rungs"]) and rc == (0 if doc["status"] == "ok" else 1)
    stored = json.loads((h.state / "qualify.json").read_text())
    assert stored["fingerprint"] == doc["environment"]["service_fingerprint"] and stored["passed"] == q["passed"]
    rc, out, err, _ = h.run("status", "--json", timeout=60)
    st = json.loads(out)["qualify"]
    assert st["this_service"] is True and st["passed"] == q["passed"], st
    rc, out, err, _ = h.run("doctor", "--json", timeout=120)
    check = next(c for c in json.loads(out)["checks"] if c["id"] == "service.qualified")
    assert check["status"] == ("pass" if q["passed"] else "fail"), check


def test_bench_interrupted_takes_down_its_container_and_records_it(shared_runtime, tmp_path):
    h = shared_runtime
    h.require_ready()
    suite = tmp_path / "slow.yaml"
    suite.write_text("id: slow\nprobes:\n  - kind: batch_decode\n    concurrency: [1]\n    max_tokens: 1500\n"
                     "    runs: 4\n")
    p = h.popen("bench", "--suite", str(suite), "--out", str(tmp_path))
    name = f"hostctl-bench-{p.pid}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and subprocess.run(
                ["docker", "inspect", name], capture_output=True).returncode != 0:
            time.sleep(0.5)
        assert p.poll() is None, p.communicate()
        time.sleep(3)
        p.send_signal(signal.SIGTERM)
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 143, err
    assert "interrupted by SIGTERM" in err
    assert subprocess.run(["docker", "inspect", name], capture_output=True).returncode != 0  # removed
    doc = _result(tmp_path, "slow")
    assert doc["status"] == "interrupted" and doc["interrupted"] == {"signal": "SIGTERM", "during": "batch_decode"}


def test_bench_refuses_when_no_service_is_ready(demo_image, host_factory):
    h = host_factory("nobench", 18570)
    rc, out, err, took = h.run("bench", timeout=60)
    assert rc == 1 and out == "" and "no ready service to measure: hc5-nobench-runtime is not running" in err
    assert "hostctl up" in err and took < 30


def _running(h) -> tuple[str, str]:
    """(container id, service fingerprint) of the shared runtime as it runs now, computed here from
    the project `up` rendered and the image id the engine reports (not read from tune's output)."""
    from hostctl.service.fingerprint import of_project

    cid, image_id = subprocess.run(["docker", "inspect", "-f", "{{.Id}} {{.Image}}", h.container], capture_output=True,
                                   text=True, check=True).stdout.split()
    project = Path(json.loads((h.state / "service.json").read_text())["project_dir"])
    return cid, of_project(project, image_id).digest


def _assert_brought_back(h, doc: dict, before: tuple[str, str], after: str) -> None:
    r = doc["restore"]
    assert r["needed"] is True and r["done"] is True and r["after"] == after, r
    assert r["same_fingerprint"] is True and r["fingerprint_before"]["digest"] == before[1], r
    assert doc["service_before"]["fingerprint"]["digest"] == before[1] and doc["service_before"]["state"] == "ready"
    cid, digest = _running(h)
    assert cid != before[0] and digest == before[1]  # a new container of the same configuration
    rc, out, err, _ = h.run("status", "--json", timeout=60)
    st = json.loads(out)
    assert rc == 0 and st["state"] == "running" and st["healthy"] is True, out + err
    assert json.loads((h.state / "service.json").read_text())["state"] == "ready"  # ready again through the gate


def test_tune_two_by_two_boots_four_times_reports_a_winner_and_brings_the_service_back(shared_runtime, tmp_path):
    # Tune on the shared runtime's own profile: the service up before is stopped for the sweep and
    # brought back as it was, so the tests after this one read it again (one boot more, no other).
    h = shared_runtime
    h.require_ready()
    before = _running(h)
    recipe_before = (h.tmp / "recipe.yaml").read_text()
    out_dir = tmp_path / "tune"
    rc, out, err, took = h.run("tune", "--json", "--write", "--out", str(out_dir), timeout=1500)
    assert rc == 0, err[-3000:]
    doc = json.loads(out)
    assert doc == json.loads((out_dir / "tune.json").read_text())
    assert doc["schema"] == "hostctl.tune/v1" and doc["boot_count"] == 4 and len(doc["trials"]) == 4
    assert all(b["status"] == "ready" for b in doc["boots"]), doc["boots"]
    for t in doc["trials"]:
        assert t["status"] == "ok" and t["objective"] > 0 and t["constraints"] == {"kv.full_context_requests>=2": True}
        assert t["constraint_reasons"]["kv.full_context_requests>=2"].startswith("kv.full_context_requests = ")
        assert Path(t["results"][0]).is_file()
    w = doc["winner"]
    assert w["objective"] == max(t["objective"] for t in doc["trials"])
    assert (out_dir / "objective.png").read_bytes()[:4] == b"\x89PNG" and doc["chart"] == str(out_dir / "objective.png")
    tuned = Path(doc["tuned_recipe"])
    assert tuned.parent == out_dir and "never applies" in tuned.read_text()
    assert f"--max-num-seqs {w['knobs']['--max-num-seqs']}" in tuned.read_text()
    assert (h.tmp / "recipe.yaml").read_text() == recipe_before  # the winner is never applied
    assert "stopping hc5-shared-runtime for the sweep" in err
    _assert_brought_back(h, doc, before, "ended")


def test_a_failing_trial_qualify_pass_and_an_interrupt_in_a_real_sweep_then_the_service_comes_back(
        shared_runtime, tmp_path):
    # Boot 1 cannot start (vLLM refuses max_num_batched_tokens below max_num_seqs at engine config,
    # before loading anything); the sweep goes on to boot 2, whose trial runs the qualify ladder for
    # real: qualify.pass is judged from that run (the tiny model fails the needle rungs, README
    # "bench, qualify and tune") and the winner respects it. Boot 3 is interrupted (SIGTERM) once
    # its container is started: it is taken down and the service up before comes back as it was.
    h = shared_runtime
    h.require_ready()
    before = _running(h)
    recipe = tmp_path / "qualify-tune.yaml"
    recipe.write_text(yaml.safe_dump(demo_recipe(tuning={
        "objective": "decode.median_tok_s", "constraints": ["qualify.pass"],
        "axes": [{"kind": "serve_arg", "arg": "--max-num-batched-tokens", "values": [1, 2048, 4096]}]}),
        sort_keys=False))
    out_dir = tmp_path / "t"
    p = h.popen("tune", "--recipe", str(recipe), "--json", "--out", str(out_dir))
    seen: list[str] = []
    try:
        for line in p.stderr:  # progress, line by line, until boot 3's container is started
            seen.append(line)
            if any("boot 3/3" in ln for ln in seen) and f"started {h.container}" in line:
                break
        assert p.poll() is None, "".join(seen)[-3000:]
        p.send_signal(signal.SIGTERM)
        out, rest = p.communicate(timeout=600)
    finally:
        if p.poll() is None:
            p.kill()
    err = "".join(seen) + rest
    assert p.returncode == 143 and out == "", err[-3000:]  # interrupted: no document on stdout, tune.json kept
    assert "tune interrupted by SIGTERM" in err and "service before tune: " in err
    doc = json.loads((out_dir / "tune.json").read_text())
    assert doc["status"] == "interrupted" and doc["interrupted"] == {"signal": "SIGTERM"}
    assert doc["probes"] == ["decode", "qualify"] and doc["boot_count"] == 3, err[-3000:]
    failed, ok, cut = doc["trials"]
    assert doc["boots"][0]["status"] == "failed" and failed["status"] == "failed", doc["boots"][0]
    assert failed["cause"]["id"] and failed["cause"]["title"] and failed["objective"] is None
    assert ok["status"] == "ok" and ok["objective"] > 0, ok
    assert doc["boots"][2]["status"] == "starting" and cut["status"] in ("not_run", "interrupted"), doc["boots"][2]
    (qpath,) = [Path(q) for q in ok["results"] if q.endswith("-qualify.json")]
    verdict = json.loads(qpath.read_text())["qualify"]
    assert [r["name"] for r in verdict["rungs"]] == ["needle 25%", "needle 50%", "needle 95%",
                                                   "boundary 2x(1,920+128)"]
    assert ok["constraints"] == {"qualify.pass": verdict["passed"]}  # judged from this trial's own run
    reason = ok["constraint_reasons"]["qualify.pass"]
    bad = [r["name"] for r in verdict["rungs"] if not r["pass"]]
    if verdict["passed"]:
        assert doc["winner"]["trial"] == ok["id"]
    else:
        assert all(name in reason for name in bad) and str(qpath) in reason, reason
        assert doc["winner"] is None, doc["winner"]
        assert f"qualify.pass: FAIL ({len(bad)} of 4 rung(s) failed: " in err  # the reason in the progress too
    _assert_brought_back(h, doc, before, "interrupted")


def test_a_trial_that_cannot_start_is_recorded_with_its_diagnosis(demo_image, host_factory, tmp_path):
    # 700 MiB cannot even import vLLM: the boot dies in seconds, the sweep records it and ends.
    recipe = demo_recipe(tuning={"objective": "decode.median_tok_s", "constraints": [],
                                 "axes": [{"kind": "serve_arg", "arg": "--max-num-seqs", "values": [2]}]})
    h = host_factory("tunefail", 18590, recipe=recipe, container_ram="700m")
    rc, out, err, took = h.run("tune", "--json", "--out", str(tmp_path / "t"), timeout=300)
    assert rc == 1, err[-3000:]
    doc = json.loads(out)
    (boot,) = doc["boots"]
    (trial,) = doc["trials"]
    assert boot["status"] == "failed" and boot["cause"]["id"] == "container-oom", boot
    assert "2 GiB steps" in boot["cause"]["fix"]
    assert trial["status"] == "failed" and trial["cause"]["id"] == "container-oom"
    assert doc["winner"] is None and doc["status"] == "no_winner"
    assert (tmp_path / "t" / "objective.png").is_file()  # the chart shows the failed trial too
    assert not h.container_exists() and took < 120
