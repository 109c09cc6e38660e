"""Differential: a suite means in hostctl what it means in vLLM-MoET (issue 27, "Suites and probes").

For every recipe x suite of the copy in ../shared/vllm-moet-bench (and hostctl's bundled suites),
both sides plan and run their probes against one stand-in server (no runtime here): vLLM-MoET
through its own functions (bench/runner/common.py: merge_suite, load_recipe; probes.py: warmup,
PROBES, probe_succeeded, with its one network call `_post` answered by the stand-in), in the order
bench/runner/bench.py: run_one drives them; hostctl through hostctl.bench.suites.merge and
runner.run_probe. What each side *sends* is recorded (which endpoint, how many requests, their
max_tokens, how many filler words) and what each side *decides* (pass or fail), for a server that
answers right and for one that answers wrong.

Every field that differs must be in DELIBERATE with its reason (and in docs/vllm-moet-differences.md
under "## Suites and probes"); a new difference fails. A probe kind that one side cannot run here is
in INCOMPARABLE with its reason, asserted, never skipped.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
import threading
from functools import lru_cache
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

import moet_runner
from hostctl.bench import probes as hprobes
from hostctl.bench import runner as hrunner
from hostctl.bench import suites, text, vllm_bench
from hostctl.bench.client import Api, Timed
from hostctl.config import load_recipe, parse_recipe
from hostctl.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "vllm-moet-differences.md"
SECTION = "## Suites and probes"
MODES = ("right", "wrong", "one_right")

# (probe kind, field) -> why hostctl differs from vLLM-MoET there. Fields: api (which endpoint),
# requests (how many), max_tokens, sizes (filler words per request), ok (the verdict).
DELIBERATE = {
    ("coherence", "api"): "hostctl's coherence prompts are instructions sent through the chat template "
                          "(/v1/chat/completions); vLLM-MoET's are raw completion prompts",
    ("batch_decode", "sizes"): "hostctl measures batch decode with `vllm bench serve` (random dataset, 32 input "
                               "tokens); vLLM-MoET sends 32 random words per stream itself",
    ("needle", "skipped"): "when no needle size fits the served context hostctl skips the probe with the "
                           "reason; vLLM-MoET sends them all and the probe fails",
    ("needle", "sizes"): "sizes_frac is a fraction of the served context counted in the server's tokens "
                         "(through the chat template); vLLM-MoET guesses words = frac x context / 1.35, "
                         "rounded down to thousands, at least 1,000",
    ("prefill", "sizes"): "hostctl's own suites size prefill by `context_frac` (tokens of the served "
                          "context, a hostctl parameter); vLLM-MoET's prefill does not read it and sends 8,000 words",
    ("coherence", "ok"): "hostctl's loop detector tries tails of 1-16 characters (vLLM-MoET's only 4, 8 and 16, "
                         "so a 3-character loop such as 'la la la' passes there), and hostctl also fails an empty "
                         "answer or one answer to every prompt",
}

# Probe kinds one side cannot run here: asserted per pair (hostctl says `skipped` with the reason).
INCOMPARABLE = {
    "quality": "vLLM-MoET's dataset evals run llm-inference-bench on GSM8K/GPQA, which this host does not have; "
               "hostctl records the probe as skipped with that reason, never as a pass",
    "boundary": "a hostctl-only probe (its qualify suite): vLLM-MoET has no probe of this kind",
}


# ---------------------------------------------------------------- the stand-in server


def _answer(content: str, mode: str, state: dict) -> str:
    """What the stand-in says: arithmetic computed (right), the context's upper-case code words
    (the needle), a distinct plain sentence per prompt; `wrong` answers 7, no code, a loop."""
    m = re.search(r"What is ([0-9+\-*/ ]+)\?", content)
    if m:
        state["arith"] = state.get("arith", 0) + 1
        right = mode == "right" or (mode == "one_right" and state["arith"] == 1)
        return str(int(eval(m.group(1)))) if right else "7"  # noqa: S307 - digits and operators only
    if mode == "wrong":
        return "la " * 60
    codes = re.findall(r"\b[A-Z][A-Z0-9-]{3,}\b", content)
    if codes:
        return " ".join(codes)
    return f"A plain answer, number {hashlib.sha1(content.encode()).hexdigest()[:8]}, in one sentence."


def _serve(body: dict, mode: str, state: dict) -> dict:
    """One completion or chat answer: prompt tokens = whitespace words; ignore_eos gives max_tokens."""
    if "messages" in body:
        content = body["messages"][0]["content"]
        prompt_tokens = len(content.split()) + 8
    else:
        prompt = body["prompt"]
        content = prompt if isinstance(prompt, str) else ""
        prompt_tokens = len(prompt.split()) if isinstance(prompt, str) else len(prompt)
    said = _answer(content, mode, state)
    out = body["max_tokens"] if body.get("ignore_eos") else min(body["max_tokens"], len(said.split()))
    choice = {"message": {"content": said}} if "messages" in body else {"text": said}
    return {"choices": [{**choice, "finish_reason": "length"}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": out}}


def _request(body: dict, words: set[str]) -> tuple:
    """What one request is, in both sides' terms: endpoint, max_tokens, filler words it carries."""
    if "messages" in body:
        api, said = "chat", body["messages"][0]["content"]
    else:
        api, said = "completion", body["prompt"]
    size = sum(1 for w in said.split() if w in words) if isinstance(said, str) else f"{len(said)} token ids"
    return api, body["max_tokens"], size


class Recorder:
    def __init__(self, mode: str, words: set[str]):
        self.mode, self.words, self.state = mode, words, {}
        self.sent: list[tuple] = []
        self.lock = threading.Lock()

    def take(self) -> list[tuple]:
        out, self.sent = self.sent, []
        self.state = {}
        return out

    def answer(self, body: dict) -> dict:
        with self.lock:
            self.sent.append(_request(body, self.words))
            return _serve(body, self.mode, self.state)


class StandInApi(Api):
    """hostctl's client with its transport answered by the stand-in (there is no server here)."""

    def __init__(self, rec: Recorder):  # no httpx client: nothing is sent anywhere
        self.base, self.model, self.rec = "http://127.0.0.1:1", "stand-in", rec

    def close(self) -> None:
        pass

    def _post(self, path: str, body: dict, cap: int) -> dict:
        if path == "/tokenize":
            if "messages" in body:
                return {"count": len(body["messages"][0]["content"].split()) + 8}
            return {"tokens": list(range(len(body["prompt"].split())))}
        return self.rec.answer(body)

    def completion_streamed(self, prompt, max_tokens: int, *, ignore_eos: bool = True) -> Timed:
        doc = self.rec.answer({"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": ignore_eos})
        return Timed(doc=doc, wall_s=0.01, ttft_s=0.005)


def _bench_serve_requests(rec: Recorder):
    """hostctl's batch runner: the `vllm bench serve` argv it would run (vllm_bench.level_argv),
    read back as the requests that tool sends: num-prompts of random-input-len tokens each."""
    plan = SimpleNamespace(runtime=SimpleNamespace(command=[]))

    def run(*, levels, input_tokens, output_tokens, runs):
        out = {}
        for n in levels:
            argv = vllm_bench.level_argv(plan, "http://127.0.0.1:1", "stand-in", concurrency=n,
                                         input_tokens=input_tokens, output_tokens=output_tokens, runs=runs, seed=1)
            flag = lambda f: int(argv[argv.index(f) + 1])  # noqa: E731
            count = flag("--num-prompts")
            rec.sent += [("completion", flag("--random-output-len"), f"{flag('--random-input-len')} random tokens")
                         for _ in range(count)]
            out[str(n)] = {"completed": count, "max_concurrency": flag("--max-concurrency")}
        return {"levels": out}
    return run


# ---------------------------------------------------------------- both sides


def moet():
    return moet_runner.runner()


def _moet_suite(ref: str) -> dict:
    common = moet()["common"]
    if ref.startswith("hostctl:"):
        return common._load_yaml(str(suites.suite_path(ref.split(":", 1)[1])))
    return common.load_suite(ref)


def _hostctl_suite(ref: str) -> suites.Suite:
    if ref.startswith("hostctl:"):
        return suites.load_suite(ref.split(":", 1)[1])
    return suites.load_suite(str(moet_runner.bench_copy("suites") / f"{ref}.yaml"))


@lru_cache(maxsize=None)
def moet_side(recipe_id: str, suite_ref: str, mode: str) -> dict:
    """What vLLM-MoET's bench.py (run_one) would send and decide: warm-up, then each merged probe."""
    r = moet()
    common, probes = r["common"], r["probes"]
    recipe = common.load_recipe(recipe_id)
    effective = common.merge_suite(_moet_suite(suite_ref), recipe)
    rec = Recorder(mode, set(probes.WORDS))
    real_post = probes._post
    probes._post = lambda url, payload, timeout: rec.answer(payload)
    noop = lambda *a, **k: None  # noqa: E731
    out: dict = {"order": [], "params": {}, "probes": {}}
    try:
        probes.warmup("http://127.0.0.1:1", "stand-in", recipe.get("warmup", {}).get("decode_requests", 0), log=noop)
        out["warmup"] = rec.take()
        for configured in effective:
            p = dict(configured)
            kind = p.pop("kind")
            key = p.pop("id", None) or kind
            enabled = p.pop("enabled")
            out["order"].append((key, kind, enabled))
            out["params"][key] = dict(p)
            if not enabled or kind in INCOMPARABLE:
                continue
            res = probes.PROBES[kind]("http://127.0.0.1:1", "stand-in", log=noop, context=recipe.get("context"), **p)
            out["probes"][key] = {"kind": kind, "sent": rec.take(), "ok": probes.probe_succeeded(kind, res, p)}
    finally:
        probes._post = real_post
    return out


@lru_cache(maxsize=None)
def hostctl_side(recipe_id: str, suite_ref: str, mode: str) -> dict:
    recipe = load_recipe(moet_runner.bench_copy("recipes") / f"{recipe_id}.yaml")
    specs = suites.merge(_hostctl_suite(suite_ref), recipe)
    rec = Recorder(mode, set(text.WORDS))
    api = StandInApi(rec)
    ctx = hprobes.ProbeContext(api=api, context=recipe.context, max_num_seqs=None, say=lambda s: None,
                               batch_runner=_bench_serve_requests(rec), seed=1)
    out: dict = {"order": [], "params": {}, "probes": {}, "status": {}}
    hrunner._warmup(api, int((recipe.warmup or {}).get("decode_requests") or 0), lambda s: None)
    out["warmup"] = rec.take()
    for spec in specs:
        out["order"].append((spec.key, spec.kind, spec.enabled))
        out["params"][spec.key] = dict(spec.params)
        if not spec.enabled:
            continue
        got = hrunner.run_probe(ctx, spec)
        out["status"][spec.key] = got
        if spec.kind not in INCOMPARABLE:
            out["probes"][spec.key] = {"kind": spec.kind, "sent": rec.take(), "ok": got["status"] == "ok"}
        rec.take()
    return out


def differences(recipe_id: str, suite_ref: str) -> dict[tuple[str, str], str]:
    """(kind, field) -> both sides' values, for every field in which they differ (all modes)."""
    diffs: dict[tuple[str, str], str] = {}
    for mode in MODES:
        a, b = moet_side(recipe_id, suite_ref, mode), hostctl_side(recipe_id, suite_ref, mode)
        if mode == MODES[0]:
            for field in ("order", "params", "warmup"):
                if a[field] != b[field]:
                    diffs[("suite", field)] = f"vLLM-MoET {a[field]!r} / hostctl {b[field]!r}"
        for key in a["probes"].keys() | b["probes"].keys():
            pa, pb = a["probes"].get(key), b["probes"].get(key)
            if pa is None or pb is None:
                diffs[(key, "present")] = f"vLLM-MoET {pa!r} / hostctl {pb!r}"
                continue
            kind = pa["kind"]
            if b["status"][key]["status"] == "skipped":
                diffs.setdefault((kind, "skipped"), b["status"][key]["reason"])
                continue
            views = {
                "api": lambda s: sorted({r[0] for r in s}),
                "requests": len,
                "max_tokens": lambda s: [r[1] for r in s],
                "sizes": lambda s: [r[2] for r in s],
            }
            for field, view in views.items():
                if view(pa["sent"]) != view(pb["sent"]):
                    diffs.setdefault((kind, field), f"vLLM-MoET {view(pa['sent'])!r} / hostctl {view(pb['sent'])!r}")
            if pa["ok"] != pb["ok"]:
                diffs.setdefault((kind, "ok"), f"server answering {mode}: vLLM-MoET {pa['ok']} / hostctl {pb['ok']}")
    return diffs


PAIRS = [(r, s) for r in moet_runner.recipe_ids() for s in moet_runner.suite_names()]
PAIRS += [(r, f"hostctl:{s}") for r in moet_runner.recipe_ids() for s in suites.BUNDLED]


def test_the_copy_has_every_recipe_and_suite():
    # CI has ../shared: an empty list would make every parametrised test below vanish.
    moet_runner.bench_dir()
    assert len(moet_runner.recipe_ids()) >= 26 and len(moet_runner.suite_names()) >= 5


@pytest.mark.parametrize("recipe_id, suite_ref", PAIRS)
def test_hostctl_plans_and_judges_each_suite_as_vllm_moet_does(recipe_id, suite_ref):
    unlisted = {k: v for k, v in differences(recipe_id, suite_ref).items() if k not in DELIBERATE}
    assert not unlisted, "\n".join(f"{k}: {v}" for k, v in unlisted.items())


@pytest.mark.parametrize("recipe_id, suite_ref", PAIRS)
def test_incomparable_probes_are_skipped_by_hostctl_with_a_reason(recipe_id, suite_ref):
    for mode in MODES[:1]:
        b = hostctl_side(recipe_id, suite_ref, mode)
        for key, kind, enabled in b["order"]:
            if kind in INCOMPARABLE and enabled:
                got = b["status"][key]
                if kind == "quality":
                    assert got["status"] == "skipped" and "llm-inference-bench" in got["reason"], got
                else:
                    assert kind not in moet()["probes"].PROBES


def test_every_deliberate_difference_is_seen_and_written_down():
    seen = set()
    for recipe_id, suite_ref in PAIRS:
        seen |= differences(recipe_id, suite_ref).keys()
    assert set(DELIBERATE) <= seen, f"listed but never seen (remove them): {set(DELIBERATE) - seen}"
    incomparable_seen = {kind for r, s in PAIRS for _k, kind, _e in hostctl_side(r, s, MODES[0])["order"]}
    assert set(INCOMPARABLE) <= incomparable_seen
    doc = DOC.read_text()
    assert SECTION in doc
    section = doc.split(SECTION, 1)[1].split("\n## ", 1)[0]
    for kind, field in DELIBERATE:
        assert f"`{kind}` {field}" in section, f"docs/vllm-moet-differences.md {SECTION}: no bullet for `{kind}` {field}"
    for kind in INCOMPARABLE:
        assert f"`{kind}` not compared" in section


# ---------------------------------------------------------------- the fixes, one by one


def _probe(kind: str, **params) -> suites.ProbeSpec:
    return suites.ProbeSpec(key=kind, kind=kind, params=params)


def _ctx(rec: Recorder, context: int = 131072) -> hprobes.ProbeContext:
    return hprobes.ProbeContext(api=StandInApi(rec), context=context, max_num_seqs=None, say=lambda s: None, seed=1)


def test_arithmetic_gives_the_model_vllm_moets_4096_tokens_to_answer():
    rec = Recorder("right", set(text.WORDS))
    hprobes.arithmetic(_ctx(rec), _probe("arithmetic"))
    assert [r[1] for r in rec.sent] == [4096] * 5


def test_coherence_asks_as_many_prompts_as_vllm_moet_at_128_tokens():
    rec = Recorder("right", set(text.WORDS))
    hprobes.coherence(_ctx(rec), _probe("coherence"))
    assert [r[1] for r in rec.sent] == [128] * len(moet()["probes"].COHERENCE_PROMPTS) == [128] * 12


def test_needle_sizes_words_replace_the_suites_sizes_frac():
    # standard has sizes_frac; a recipe's suite_params give sizes_words: vLLM-MoET runs those only.
    rec = Recorder("right", set(text.WORDS))
    got = hprobes.needle(_ctx(rec), _probe("needle", sizes_frac=[0.03, 0.25], sizes_words=[6000, 9000]))
    assert [c["size"] for c in got["cases"]] == [6000, 9000]
    assert [r[2] for r in rec.sent] == [6000, 9000]


def test_warmup_sends_vllm_moets_128_token_requests():
    rec = Recorder("right", set(text.WORDS))
    hrunner._warmup(StandInApi(rec), 3, lambda s: None)
    assert [(r[0], r[1], r[2]) for r in rec.sent] == [("completion", 128, 24)] * 3


@pytest.mark.parametrize("value", ["no", 0, "false", None])
def test_a_non_boolean_enabled_in_suite_params_is_bad_input_as_in_vllm_moet(value):
    common = moet()["common"]
    suite_doc = {"id": "s", "allow_recipe_overrides": True, "probes": [{"kind": "decode"}]}
    with pytest.raises(ValueError):
        common.merge_suite(suite_doc, {"suite_params": {"decode": {"enabled": value}}})
    path = moet_runner.bench_copy("recipes") / f"{moet_runner.recipe_ids()[0]}.yaml"
    data = yaml.safe_load(path.read_text())
    recipe = parse_recipe({**data, "suite_params": {"decode": {"enabled": value}}}, str(path))
    with pytest.raises(InputError) as e:
        suites.merge(suites.parse_suite(suite_doc, "s.yaml"), recipe)
    assert e.value.exit_code == 2 and any("suite_params.decode.enabled" in d for d in e.value.details)


# ---------------------------------------------------------------- tuning: sweep.py next to hostctl tune

# (what, field) -> why hostctl tune differs from vLLM-MoET's bench/runner/sweep.py there.
DELIBERATE_TUNE = {
    ("tune", "refused"): "a recipe whose tuning has no axes (`axes: []`) is run once as it is by hostctl tune (one "
                         "boot, one trial: its constraints checked, its objective measured); sweep.py refuses it "
                         "('declares no tuning.axes')",
    ("tune", "suite"): "hostctl tune takes its probes from hostctl's bundled `standard` suite (it ships no copy of "
                       "vLLM-MoET's); sweep.py from vLLM-MoET's `standard`. Both merge the recipe's suite_params "
                       "and thin the same way, so the recipe's own overrides mean the same",
    ("constraint", "bool as a number"): "`PATH OP NUMBER` on a true/false value is false in hostctl (needle.all_pass>=1 "
                                        "is not a number comparison); Python's True >= 1 makes it true in sweep.py",
    ("constraint", "negative number"): "hostctl reads `PATH OP -NUMBER`; sweep.py's pattern has no minus sign, so it "
                                       "reads the whole text as a path that is not there: false",
    ("rank", "unmeasured objective"): "a trial whose objective was not measured is never valid and never the "
                                      "winner in hostctl; sweep.py ranks a valid row without it as 0",
}
HOSTS = ROOT / "runtime" / "hosts"


def _tuned_recipes() -> list[str]:
    copy = moet_runner.bench_copy("recipes")
    return [rid for rid in moet_runner.recipe_ids() if yaml.safe_load((copy / f"{rid}.yaml").read_text()).get("tuning")]


TUNED = _tuned_recipes()


def _same_params(params: list[dict]) -> list[tuple]:
    return [(p["kind"], {k: v for k, v in p.items() if k not in ("kind", "id", "enabled")}) for p in params]


def moet_tune(recipe_id: str) -> dict:
    """sweep.py's plan (bench/runner/sweep.py: main, up to --dry-run, and its boot materialisation)."""
    r = moet()
    sweep, common = r["sweep"], r["common"]
    recipe = common.load_recipe(recipe_id)
    tuning = recipe.get("tuning")
    if not tuning or not tuning.get("axes"):
        return {"refused": "declares no tuning.axes"}
    kinds = sweep.needed_probes(tuning)
    runtime_axes = [a for a in tuning["axes"] if a.get("restart") is False and a.get("file_env")]
    restart_axes = [a for a in tuning["axes"] if a not in runtime_axes]
    combos = list(itertools.product(*[a["values"] for a in restart_axes])) or [()]
    rt_combos = list(itertools.product(*[a["values"] for a in runtime_axes])) or [()]
    boots, trials = [], []
    for combo in combos:
        env, args, knobs = dict(recipe["env"]), list(recipe["serve_args"]), {}
        for axis, val in zip(restart_axes, combo):
            if axis["kind"] == "env":
                env[axis["name"]] = str(val)
                knobs[axis["name"]] = val
            elif axis["kind"] == "serve_json":
                args = sweep.apply_serve_json(args, axis["arg"], axis["key"], val)
                knobs[f"{axis['arg']}:{axis['key']}"] = val
        boots.append({"knobs": knobs, "env": env, "serve_args": args,
                      "knob_files": sorted(a["file_env"] for a in runtime_axes)})
        for rt in rt_combos:
            trials.append({**knobs, **dict(zip([a["name"] for a in runtime_axes], rt))})
    bundled = common._load_yaml(str(suites.suite_path("standard")))
    return {"refused": None, "probes": kinds, "boots": boots, "trials": trials,
            "params_own_suite": _same_params(sweep.sweep_probe_params(recipe, common.load_suite("standard"), kinds)),
            "params": _same_params(sweep.sweep_probe_params(recipe, bundled, kinds))}


def hostctl_tune(recipe_id: str, capsys) -> dict:
    """`hostctl tune --dry-run --json` (hostctl.tune/v1), and the probes a trial runs (tune_specs)."""
    from hostctl.cli import main
    from hostctl.tune import runner as trunner

    path = moet_runner.bench_copy("recipes") / f"{recipe_id}.yaml"
    code = main(["tune", "--dry-run", "--json", "--config", str(HOSTS / "demo-cpu.toml"), "--recipe", str(path)])
    out = capsys.readouterr().out
    assert code == 0, out
    doc = json.loads(out)
    assert doc["schema"] == "hostctl.tune/v1" and doc["dry_run"] is True
    recipe = load_recipe(path)
    specs = trunner.tune_specs(recipe, trunner.plan_for(yaml.safe_load(path.read_text()), recipe).tuning)
    boots = []
    for b in doc["boots"]:
        env = {k: v for k, v in b["env"].items() if k not in b["knob_files"]}
        boots.append({"knobs": b["knobs"], "env": env, "serve_args": b["serve_args"],
                      "knob_files": sorted(b["knob_files"])})
    return {"refused": None, "probes": doc["probes"], "boots": boots, "trials": [t["knobs"] for t in doc["trials"]],
            "params": [(s.kind, dict(s.params)) for s in specs]}


@pytest.mark.parametrize("recipe_id", TUNED)
def test_hostctl_tune_plans_what_sweep_py_plans(recipe_id, capsys):
    a, b = moet_tune(recipe_id), hostctl_tune(recipe_id, capsys)
    diffs = {}
    if a["refused"]:
        diffs[("tune", "refused")] = f"sweep.py: {a['refused']} / hostctl: {len(b['trials'])} trial(s)"
        assert (len(b["boots"]), len(b["trials"])) == (1, 1)  # the recipe as it is, once
    else:
        for field in ("probes", "boots", "trials", "params"):
            if a[field] != b[field]:
                diffs[("tune", field)] = f"sweep.py {a[field]!r}\n  hostctl {b[field]!r}"
        if a["params_own_suite"] != a["params"]:
            diffs[("tune", "suite")] = f"vLLM-MoET's standard {a['params_own_suite']!r} / hostctl's {a['params']!r}"
    unlisted = {k: v for k, v in diffs.items() if k not in DELIBERATE_TUNE}
    assert not unlisted, "\n".join(f"{k}: {v}" for k, v in unlisted.items())


_RESULTS = [
    {}, {"decode": {"median_tok_s": 12.5}}, {"decode": {"median_tok_s": 0}}, {"arithmetic": {"score": 2, "of": 5}},
    {"arithmetic": {"score": 1}}, {"needle": {"all_pass": True}}, {"needle": {"all_pass": False}},
    {"coherence": {"pass": True}}, {"kv": {"full_context_requests": 3}}, {"decode": {"median_tok_s": None}},
    {"arithmetic": {"score": 2.0}}, {"needle": {"all_pass": None}},
]
_EXTRA_CONSTRAINTS = ["decode.median_tok_s>=10", "decode.median_tok_s > 12.5", "decode.median_tok_s<0.5",
                      "arithmetic.score==2", "needle.all_pass", "coherence.pass", "kv.full_context_requests>=2",
                      "needle.all_pass>=1", "decode.median_tok_s>=-1"]


def _constraints() -> list[str]:
    copy = moet_runner.bench_copy("recipes")
    seen = []
    for rid in TUNED:
        for c in (yaml.safe_load((copy / f"{rid}.yaml").read_text())["tuning"].get("constraints") or []):
            if c not in seen:
                seen.append(c)
    return seen + [c for c in _EXTRA_CONSTRAINTS if c not in seen]


def constraint_differences() -> dict:
    sweep = moet()["sweep"]
    from hostctl.tune import plan as tplan

    diffs = {}
    for expr in _constraints():
        c = tplan.parse_constraint(expr, "tuning.constraints[0]")
        for res in _RESULTS:
            theirs, ours = bool(sweep.check_constraint(res, expr)), c.check(res) is True
            if theirs != ours:
                value = tplan.dig(res, c.path)
                what = "bool as a number" if isinstance(value, bool) and c.op else (
                    "negative number" if c.number is not None and c.number < 0 else f"{expr} on {res}")
                diffs[("constraint", what)] = f"{expr} on {res}: sweep.py {theirs} / hostctl {ours}"
    return diffs


def test_constraints_mean_what_check_constraint_means():
    # Every constraint of the copy's recipes and a few more, on results with the value there, missing,
    # null, true/false: a missing value is false on both sides.
    diffs = constraint_differences()
    unlisted = {k: v for k, v in diffs.items() if k not in DELIBERATE_TUNE}
    assert not unlisted, "\n".join(f"{k}: {v}" for k, v in unlisted.items())
    assert set(diffs) == {k for k in DELIBERATE_TUNE if k[0] == "constraint"}


def test_the_winner_is_ranked_as_sweep_py_ranks_it():
    from hostctl.tune import plan as tplan

    rows = [{"id": "t1", "valid": True, "objective": 10.0}, {"id": "t2", "valid": False, "objective": 99.0},
            {"id": "t3", "valid": True, "objective": 12.0}, {"id": "t4", "valid": True, "objective": 10.0},
            {"id": "t5", "valid": True, "objective": None}, {"id": "t6", "valid": True, "objective": -1.0}]
    # bench/runner/sweep.py: main ranks valid rows by -objective (ties keep their order).
    theirs = [r["id"] for r in sorted((r for r in rows if r.get("valid")), key=lambda r: -(r["objective"] or 0))]
    ours = [r["id"] for r in tplan.rank(rows)]
    assert theirs == ["t3", "t1", "t4", "t5", "t6"]
    assert [i for i in theirs if i != "t5"] == ours  # ("rank", "unmeasured objective")
    assert ("rank", "unmeasured objective") in DELIBERATE_TUNE


def test_every_deliberate_tuning_difference_is_seen_and_written_down(capsys):
    seen = set(constraint_differences()) | {("rank", "unmeasured objective")}
    for rid in TUNED:
        a, b = moet_tune(rid), hostctl_tune(rid, capsys)
        if a["refused"]:
            seen.add(("tune", "refused"))
        elif a["params_own_suite"] != a["params"]:
            seen.add(("tune", "suite"))
    assert set(DELIBERATE_TUNE) <= seen, f"listed but never seen (remove them): {set(DELIBERATE_TUNE) - seen}"
    section = DOC.read_text().split(SECTION, 1)[1].split("\n## ", 1)[0]
    for what, field in DELIBERATE_TUNE:
        assert f"`{what}` {field}" in section, f"docs/vllm-moet-differences.md {SECTION}: no bullet for `{what}` {field}"
