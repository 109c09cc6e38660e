"""`hostctl bench`: run a suite against the service `up` started and write one `hostctl.bench/v1`
result: the environment fingerprint (hostctl version, GPUs with driver and power limits, the KV
capacity the runtime reported, the service fingerprint), every probe's raw samples and
aggregates, and a status (`verdict`): ok only when every enabled probe ran and passed, each of its
cases (a needle size that does not fit is a case that did not run); partial when
some passed and others failed or could not run here (those are listed, skipped ones with the
reason, under `incomplete`); failed when none passed (nothing ran, or everything that ran failed,
or the service went away); interrupted (Ctrl-C / SIGTERM; what ran is kept). A probe the suite
disables (`enabled: false`) is recorded as `disabled`, as vLLM-MoET records it, and counts for
nothing: the suite chose not to run it. A skipped probe never counts as a pass: a run whose
quality probes could not run here is not the run the suite asked for.

A `role: baseline` recipe's result says it is a baseline (`baseline`): a native reference to
compare others against, which vLLM-MoET leaves out of its tables (bench/runner/render.py: collect).

The `qualify` suite's verdict is stored as well (hostctl.bench.qualify).
"""

from __future__ import annotations

import json
import os
import random
import secrets
import socket
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import httpx

from hostctl.data import Data
from hostctl import __version__, paths
from hostctl.safefs import write_file
from hostctl.bench import probes as probes_mod
from hostctl.bench import qualify, suites, text
from hostctl.bench.client import Api, ApiError
from hostctl.bench.vllm_bench import BenchServe
from hostctl.config import Config
from hostctl.facts.records import KvAtReady
from hostctl.errors import FailedError, HostctlError
from hostctl.interrupt import Interrupted
from hostctl.plan.records import Plan
from hostctl.service import apiclient, apipeer, fingerprint, preflight, saved

SCHEMA = "hostctl.bench/v1"
Say = Callable[[str], None]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def default_out_dir() -> Path:
    return paths.state_dir() / "bench"


class Service(Data):
    """The service `up` declared ready and that still answers."""

    endpoint: str
    container: str
    image_id: str | None
    kv: KvAtReady | None
    project_dir: Path


def ready_service(config: Config, plan: Plan) -> Service:
    """The running service, or FailedError (exit 1) saying why there is none to measure."""
    from hostctl.facts.container import container_state
    from hostctl.service.lifecycle import container_name, project_dir

    name = container_name(plan)
    last = saved.load_service()
    fix = "start it with `hostctl up` (bench measures the service `up` declared ready)"
    st = container_state(name)
    if not st.running:
        raise FailedError(f"no ready service to measure: {name} is not running", fix=fix)
    if last is None or last.container != name or last.state != "ready":
        raise FailedError(f"{name} is running, but the last `hostctl up` for it did not declare it ready "
                          f"(state: {last.state if last is not None else 'unknown'})", fix=fix)
    ep = preflight.endpoint(plan)
    try:
        with apiclient.client(timeout=5.0) as h:
            healthy = apiclient.request(h, "GET", f"{ep}/health", cap=apiclient.SMALL_CAP, what="/health").status_code == 200
    except (httpx.HTTPError, apiclient.BadAnswer):
        healthy = False
    if not healthy:
        raise FailedError(f"{name} is running but {ep}/health does not answer", fix="see `hostctl status` and "
                          "`hostctl logs`; restart it with `hostctl down` and `hostctl up`")
    return Service(endpoint=ep, container=name, image_id=st.image_id, kv=last.kv,
                   project_dir=Path(last.project_dir or project_dir(config)))


def _gpus() -> dict:
    from hostctl.facts.gpu import probe_gpus

    try:
        g = probe_gpus()
    except Exception as exc:  # environment only: a broken probe must not stop the measurement
        return {"available": False, "reason": f"GPU probe failed: {exc}"}
    return {"available": g.available, "reason": g.reason, "driver_version": g.driver_version,
            "devices": [{"index": d.index, "name": d.name, "uuid": d.uuid, "memory_total_bytes": d.memory_total_bytes,
                         "power_limit_w": d.power.limit_w, "power_enforced_w": d.power.enforced_w,
                         "power_default_w": d.power.default_w} for d in g.devices]}


def _max_num_seqs(config: Config) -> int | None:
    v = config.recipe.args().get("--max-num-seqs")
    return int(v) if v and v.isdigit() else None


STATUS_RULE = ("ok only when every enabled probe ran and passed (every case of it); partial when some passed and "
               "others failed or were skipped (listed under incomplete); failed when none passed; disabled probes "
               "count for nothing")


def verdict(results: list[dict]) -> tuple[str, dict]:
    """(status, incomplete) of a run from its probes (STATUS_RULE); incomplete lists the probes
    that failed and those that could not run, with the reason, so a `partial` says what it lacks."""
    enabled = [r for r in results if r["status"] != "disabled"]
    passed = [r for r in enabled if r["status"] == "ok"]
    failed = [r["key"] for r in enabled if r["status"] == "failed"]
    skipped = [{"key": r["key"], "kind": r["kind"], "reason": r.get("reason", "")}
               for r in enabled if r["status"] == "skipped"]
    # A probe that passed with some of its cases skipped (a needle size that does not fit) did not
    # run all the suite asked for either.
    for r in passed:
        cases = [c["skipped"] for c in r.get("cases") or [] if c.get("skipped")]
        if cases:
            skipped.append({"key": r["key"], "kind": r["kind"],
                            "reason": f"{len(cases)} of its {len(r['cases'])} cases did not run: " + "; ".join(cases)})
    incomplete = {"failed": failed, "skipped": skipped}
    if not passed:
        return "failed", incomplete
    return ("partial" if failed or skipped else "ok"), incomplete


def _baseline(recipe) -> dict | None:
    if recipe.role != "baseline":
        return None
    return {"recipe": recipe.id, "note": "a role: baseline recipe: a native reference to compare other recipes "
            "against, not a candidate; vLLM-MoET leaves baselines out of its result tables"}


def _warmup(api: Api, n: int, say: Say) -> float:
    t0 = time.perf_counter()
    rng = random.Random(0xBEEF)
    for i in range(n):
        api.completion(" ".join(text.filler(rng, 24)), 128)  # vLLM-MoET's warm-up: 24 words, 128 tokens out
        say(f"warm-up {i + 1}/{n}")
    return round(time.perf_counter() - t0, 3)


def run(config: Config, plan: Plan, suite_ref: str, *, out_dir: Path | None, say: Say,
        progress: Callable[[int, int, str], None] | None = None, service: Service | None = None,
        keep_raw: bool = True, specs: list[suites.ProbeSpec] | None = None,
        store_verdict: bool = True) -> tuple[dict, Path]:
    """Run the suite (or `specs`, probes taken from it, as tune does); returns (result, path
    written). Raises Interrupted after writing an interrupted result; FailedError when there is
    no ready service (nothing written). store_verdict=False keeps a qualify run from replacing
    the stored verdict (tune qualifies its trial variants, not the service)."""
    suite = suites.load_suite(suite_ref)
    specs = specs if specs is not None else suites.merge(suite, config.recipe)
    svc = service or ready_service(config, plan)
    out_dir = out_dir or default_out_dir()
    started = _now()
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = out_dir / f"{stamp}-{suite.id}.json"
    seed = secrets.randbits(32)
    fp = fingerprint.of_project(svc.project_dir, svc.image_id)
    recipe = config.recipe
    headers = {}
    if plan.runtime.api_key_env and os.environ.get(plan.runtime.api_key_env):
        headers["Authorization"] = f"Bearer {os.environ[plan.runtime.api_key_env]}"
    doc: dict = {
        "schema": SCHEMA, "status": "running", "started_at": started, "finished_at": None, "seed": seed,
        "suite": {"id": suite.id, "source": suite.source, "allow_recipe_overrides": suite.allow_recipe_overrides},
        "service": {"endpoint": svc.endpoint, "served_name": recipe.served_name, "context": recipe.context,
                    "recipe": recipe.id, "recipe_role": recipe.role, "profile": config.profile.name,
                    "container": svc.container, "max_num_seqs": _max_num_seqs(config)},
        "baseline": _baseline(recipe), "status_rule": STATUS_RULE,
        "environment": {"hostctl_version": __version__, "hostname": socket.gethostname(), "gpus": _gpus(),
                        "kv": svc.kv.model_dump() if svc.kv else None, "image": plan.runtime.image, "image_id": svc.image_id,
                        "service_fingerprint": fp.to_dict() if fp else None},
        "warmup": None, "probes": [],
    }
    api = Api(svc.endpoint, recipe.served_name, headers=headers)
    raw_dir = (out_dir / f"{stamp}-{suite.id}.raw") if keep_raw else None
    batch = BenchServe(plan, svc.endpoint, recipe.served_name, keep_dir=raw_dir, seed=seed & 0x7FFFFFFF)
    ctx = probes_mod.ProbeContext(api=api, context=recipe.context, max_num_seqs=_max_num_seqs(config), say=say,
                                  batch_runner=_proved_first(batch, svc.endpoint), seed=seed)
    t_run = time.perf_counter()
    try:
        n_warm = int((recipe.warmup or {}).get("decode_requests") or 0)
        if n_warm:
            say(f"warm-up: {n_warm} decode request(s) (recipe warmup.decode_requests)")
            doc["warmup"] = {"decode_requests": n_warm, "seconds": _warmup(api, n_warm, say)}
        for i, spec in enumerate(specs, 1):
            if progress:
                progress(i, len(specs), spec.key)
            say(f"probe {i}/{len(specs)}: {spec.key}" + (f" ({spec.kind})" if spec.kind != spec.key else ""))
            doc["probes"].append(run_probe(ctx, spec))
            p = doc["probes"][-1]
            say(f"probe {i}/{len(specs)}: {spec.key}: {p['status']}" + (f" ({p['reason']})" if p.get("reason") else ""))
        doc["status"], doc["incomplete"] = verdict(doc["probes"])
    except Interrupted as exc:
        doc["status"] = "interrupted"
        doc["interrupted"] = {"signal": exc.signal_name, "during": specs[len(doc["probes"])].key
                              if len(doc["probes"]) < len(specs) else None}
        batch.remove()
        exc.result_path = path  # type: ignore[attr-defined]
        raise
    finally:
        api.close()
        if doc["status"] == "running":  # an unexpected error: what ran is still written
            doc["status"] = "failed"
        doc["finished_at"] = _now()
        doc["seconds"] = round(time.perf_counter() - t_run, 3)
        doc["summary"] = {s: sum(1 for p in doc["probes"] if p["status"] == s)
                          for s in ("ok", "failed", "skipped", "disabled")}
        write_file(path, json.dumps(doc, indent=2) + "\n")
        if suite.id == qualify.QUALIFY_SUITE and doc["status"] != "interrupted":
            v = qualify.store(doc, str(path)) if store_verdict else qualify.verdict(doc, str(path))
            doc["qualify"] = v.model_dump(mode="json")
            write_file(path, json.dumps(doc, indent=2) + "\n")
    return doc, path


def _proved_first(batch: BenchServe, endpoint: str) -> Callable[..., dict]:
    """vllm bench serve's container sends the key itself, on connections hostctl cannot check:
    prove the listener is the runtime's (apiclient) just before each run. What remains is the
    container's start-up, a window in which the runtime would have to stop and another user bind."""
    def run(**kw) -> dict:
        try:
            with apiclient.client(timeout=5.0) as h:
                apiclient.request(h, "GET", f"{endpoint}/health", cap=apiclient.SMALL_CAP, what="/health")
        except httpx.HTTPError as exc:
            raise ApiError(f"/health before vllm bench serve: {exc.__class__.__name__}: {str(exc)[:200]}") from exc
        return batch(**kw)
    return run


def run_probe(ctx: probes_mod.ProbeContext, spec: suites.ProbeSpec) -> dict:
    base = {"key": spec.key, "kind": spec.kind, "params": spec.params, "overridden": list(spec.overridden)}
    if not spec.enabled:
        return {**base, "status": "disabled", "reason": "disabled in the suite (enabled: false)"}
    fn = probes_mod.PROBES.get(spec.kind)
    if fn is None:
        return {**base, "status": "skipped", "reason": f"hostctl has no probe of kind {spec.kind!r} (known: "
                f"{', '.join(probes_mod.PROBES)})"}
    t0 = time.perf_counter()
    try:
        fields = fn(ctx, spec)
    except probes_mod.Skip as exc:
        return {**base, "status": "skipped", "reason": str(exc), "seconds": round(time.perf_counter() - t0, 3)}
    except apipeer.ListenerRefused:
        raise  # the API port is not the runtime's: no probe can measure it, and none may send it the key
    except (ApiError, HostctlError, ValueError, KeyError) as exc:
        msg = exc.message if isinstance(exc, HostctlError) else str(exc)
        return {**base, "status": "failed", "reason": f"{exc.__class__.__name__}: {msg}"[:500],
                "seconds": round(time.perf_counter() - t0, 3)}
    ok = fields.pop("ok")
    out = {**base, "status": "ok" if ok else "failed", "seconds": round(time.perf_counter() - t0, 3), **fields}
    if not ok:
        out["reason"] = _why_failed(spec.kind, fields)
    return out


def _why_failed(kind: str, f: dict) -> str:
    if kind == "arithmetic":
        return f"score {f.get('score')}/{f.get('of')} is below min_score {f.get('min_score')}"
    if kind == "needle":
        return f"{f.get('ran', 0) - f.get('passed', 0)} of {f.get('ran')} needle(s) not recalled"
    if kind == "coherence":
        return (f"{f.get('degenerate')} looping and {f.get('empty')} empty answer(s) of {f.get('of')}"
                + ("; the same answer to every prompt" if f.get("same_answer_to_all") else ""))
    if kind == "boundary":
        return "not every boundary request got its full input and output"
    return "no valid samples"


# ---------------------------------------------------------------- presentation


def text_report(doc: dict, path: Path) -> str:
    svc = doc["service"]
    role = " (a baseline recipe)" if doc.get("baseline") else ""
    lines = [f"bench {doc['suite']['id']} on {svc['served_name']} ({svc['context']:,}-token context, recipe "
             f"{svc['recipe']}{role}): {doc['status']}"]
    for p in doc["probes"]:
        lines.append(f"  {p['status']:<8} {p['key']:<14} {summary(p)}")
    inc = doc.get("incomplete") or {}
    if doc["status"] == "partial" and inc.get("skipped"):
        lines.append(f"  partial, not ok: {', '.join(p['key'] for p in inc['skipped'])} could not run here")
    q = doc.get("qualify")
    if q:
        lines.append(f"  qualify: {'PASSED' if q['passed'] else 'FAILED'} "
                     + ", ".join(f"{r['name']} {'ok' if r['pass'] else 'FAIL'}" for r in q["rungs"]))
    lines.append(f"result: {path}")
    return "\n".join(lines) + "\n"


def summary(p: dict) -> str:
    """One line per probe: its headline numbers, or why it did not pass or run."""
    k = p["kind"]
    if p["status"] in ("skipped", "disabled") or "reason" in p and k not in ("arithmetic", "needle", "coherence", "boundary"):
        return p.get("reason", "")
    if k == "decode":
        return (f"median {p['median_tok_s']:.1f} tok/s (min {p['min_tok_s']:.1f}, max {p['max_tok_s']:.1f}, spread "
                f"{p['spread_pct']}%), {p['distinct_outputs']} distinct outputs")
    if k == "batch_decode":
        return "; ".join(f"c={n}: {lv['aggregate_tok_s']:.1f} tok/s" for n, lv in p["levels"].items())
    if k == "prefill":
        return f"median {p['median_tok_s']:,.0f} tok/s, first token after {p['median_ttft_s']:.2f} s"
    if k == "needle":
        cases = ", ".join((f"{c['prompt_tokens']:,} tok {'pass' if c['pass'] else 'FAIL'}" if c["pass"] is not None
                           else "skipped") for c in p["cases"])
        return f"{p['passed']}/{p['ran']} recalled ({cases})"
    if k == "arithmetic":
        return f"score {p['score']}/{p['of']} (min {p['min_score']})"
    if k == "coherence":
        return (f"{'pass' if p['pass'] else 'FAIL'}: {p['degenerate']} looping, {p['empty']} empty of {p['of']}"
                + ("; one answer to every prompt" if p.get("same_answer_to_all") else ""))
    if k == "boundary":
        return (f"{p['concurrency']} x ({p['input_tokens']:,} in + {p['output_tokens']} out): "
                f"{'all complete' if p['pass'] else 'INCOMPLETE'}, {'overlapping' if p['overlapped'] else 'serial'}")
    return ""
