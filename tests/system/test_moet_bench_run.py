"""vLLM-MoET's own `runner/bench.py` against the demo that `hostctl up` serves, next to `hostctl bench`
with the same recipe and suite (vLLM-MoET's `quick`): the same probes run, each one's verdict the
same or a listed, deliberate difference (docs/vllm-moet-differences.md, "Running a suite"), and the
numbers side by side. What bench.py needs and how it gets it: tests/moet_bench_run.py.

hostctl bench measures the session's shared demo runtime; bench.py boots its own through the box's
`vllm` (hostctl up --foreground on port 8123, project hc5-moet-run) and stops it with SIGINT, after
which nothing of that project may be left.
"""

import json
import subprocess

import pytest

import moet_bench_run as mb
import moet_runner
from conftest import needs_compose, needs_root
from runtime_fixtures import Host

pytestmark = [pytest.mark.system, needs_root, needs_compose]

QUICK = "quick"

# Where the two verdicts may differ, and how each side must say it (docs/vllm-moet-differences.md,
# "Running a suite"). Any other pair of differing verdicts fails the test.
DELIBERATE = {
    # A probe that does not fit the served context: hostctl skips it before sending anything;
    # vLLM-MoET sends it and records the server's refusal as a failure.
    ("skipped", "failed"): ("do not fit the served context", "served context is", "HTTP Error 400"),
}


def _project_left(project: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"label=com.docker.compose.project={project}",
                          "--format", "{{.Names}}"], capture_output=True, text=True, check=True).stdout
    return out.split()


def test_vllm_moets_bench_py_and_hostctl_bench_agree_on_the_demo(shared_runtime, demo_image, tmp_path):
    copy = moet_runner.bench_dir()
    shared_runtime.require_ready()

    # hostctl bench: vLLM-MoET's quick suite, unchanged, on the shared demo runtime.
    rc, out, err, _ = shared_runtime.run("bench", "--suite", str(copy / "suites" / f"{QUICK}.yaml"), "--json",
                                         "--out", str(tmp_path / "hostctl-results"), timeout=600)
    mine = json.loads(out)
    assert rc == (0 if mine["status"] == "ok" else 1), err

    # vLLM-MoET's bench.py: its own boot of the demo, through hostctl, on its default port.
    (tmp_path / "host").mkdir()
    host = Host(tmp_path / "host", mb.PROJECT, mb.MOET_PORT)
    image_id = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", demo_image], capture_output=True,
                              text=True, check=True).stdout.strip()
    repo, revision = "hostctl/demo-tiny-moe", image_id.split(":", 1)[1][:40]  # pinned to the image it came from
    model = mb.extract_model(demo_image, tmp_path / "models-tiny-moe")
    mb.write_snapshot_marker(model, repo, revision)
    b = mb.make_bench(tmp_path, copy, model, repo=repo, revision=revision, profile=host.profile,
                      sysroot=host.sysroot)
    try:
        # vLLM-MoET's own check accepts hostctl's marker (common.compat -> model_snapshot_error).
        moet = _common_of(b)
        assert moet.compat(moet.load_recipe(mb.RECIPE_ID), moet.load_box(str(b.box))) is None
        rc_m, log = mb.run_moet(b, QUICK)
    finally:
        host.cleanup()
    theirs = mb.load_json(b.result_path())
    assert rc_m == (0 if theirs["status"] == "ok" else 1), log
    assert theirs["complete"] is True and "load_time_s" in theirs, log

    # bench.py ran `vllm serve MODEL --served-model-name tiny-moe --port 8123 <the recipe's serve_args>`,
    # hostctl served it, and SIGINT took the project down.
    argv = json.loads(b.argv_file.read_text())
    assert argv[:6] == ["serve", str(model), "--served-model-name", "tiny-moe", "--port", str(mb.MOET_PORT)]
    assert argv[6:] == [w for a in mb.moet_recipe()["serve_args"] for w in a.split(" ", 1)]
    served = b.log_path().read_text()
    assert "preflight ok" in served and f"started {host.project}-runtime" in served, served[-3000:]
    assert "FAIL " not in served and "smoke gate failed" not in served, served[-3000:]
    # bench.py waits for /health (runner/serverctl.py), not for hostctl's smoke gate, and sends SIGINT
    # once its own suite is done: its short suite and the gate race on the CPU, so the SIGINT lands
    # after "ready in" (the supervisor takes the project down) or while the gate still runs (CI saw both).
    if "ready in" in served:
        assert "SIGINT: taking the project down (no restart)" in served, served[-3000:]
    else:
        assert "interrupted by SIGINT: taking the project down" in served, served[-3000:]
    assert "took the project down (ok)" in served, served[-3000:]
    assert _project_left(host.project) == [], served[-3000:]

    # Same probes, in the same order; each verdict the same or a deliberate difference.
    rows = mb.side_by_side(mine, theirs)
    assert [r["key"] for r in rows] == list(theirs["probes"]) == ["decode", "prefill", "needle", "arithmetic"]
    for r in rows:
        if r["hostctl"] == r["vllm_moet"]:
            continue
        pair = (r["hostctl"], r["vllm_moet"])
        assert pair in DELIBERATE, f"an unlisted difference: {r}"
        fit, ctx, refused = DELIBERATE[pair]
        assert fit in r["hostctl_reason"] or ctx in r["hostctl_reason"], r
        assert refused in (r["vllm_moet_error"] or ""), r
    by = {r["key"]: r for r in rows}
    # decode fits and runs on both: both pass, both measure.
    assert by["decode"]["hostctl"] == by["decode"]["vllm_moet"] == "ok"
    assert by["decode"]["hostctl_numbers"]["median_tok_s"] > 0 and by["decode"]["vllm_moet_numbers"]["median_tok_s"] > 0
    # 4,000 prefill words and a 6,000-word needle cannot fit 2,048 tokens.
    assert (by["prefill"]["hostctl"], by["needle"]["hostctl"]) == ("skipped", "skipped")
    # vLLM-MoET's arithmetic asks for 4,096 tokens, more than the context: refused by the server.
    assert by["arithmetic"]["vllm_moet"] == "failed" and "HTTP Error 400" in by["arithmetic"]["vllm_moet_error"]
    # The suite verdicts: hostctl's is partial (decode passed, the rest did not run or failed), as is
    # vLLM-MoET's (it calls any failed probe partial).
    assert mine["status"] == "partial" and theirs["status"] == "partial"
    assert {s["key"] for s in mine["incomplete"]["skipped"]} == {"prefill", "needle"}
    print(mb.table(rows))


def _common_of(b: "mb.MoetBench"):
    """vLLM-MoET's common module as bench.py sees it in this bench folder (BENCH_DIR is the folder)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("moet_common_here", b.root / "runner" / "common.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert mod.BENCH_DIR == str(b.root)
    return mod
