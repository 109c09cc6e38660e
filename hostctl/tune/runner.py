"""`hostctl tune`: run a recipe's tuning block. One boot per combination of the restart axes,
each through `up`'s own lifecycle (hostctl.service.lifecycle.up: preflight, render, watch,
smoke gate, diagnosis, taken down on failure); the trials of a boot differ only in knob files
rewritten while it runs. Each trial runs the probes the objective and constraints read (from
the `standard` suite with the recipe's suite_params, thinned for ranking as vLLM-MoET's sweep
does) and the qualify ladder when a constraint names qualify.pass.

A boot that fails is recorded with its diagnosis and the sweep goes on. Every boot is taken
down after its trials. The winner is never applied; the tuned recipe is written next to the
results only when asked. The service that was up before is stopped for the sweep and brought
back afterwards, as it was (hostctl/tune/restore.py; after a failed or interrupted sweep too).
"""

from __future__ import annotations

import difflib
import json
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import yaml

from hostctl import paths
from hostctl.safefs import sudo_owner
from hostctl.bench import runner as bench_runner
from hostctl.bench import suites
from hostctl.config import Config, parse_recipe
from hostctl.errors import HostctlError
from hostctl.interrupt import Interrupted
from hostctl.plan.records import Plan, Volume
from hostctl.tune import plan as tplan

SCHEMA = "hostctl.tune/v1"
TUNE_SUITE = "standard"
KNOB_SETTLE_S = 2.0  # let the runtime notice a rewritten knob file (vLLM-MoET's sweep waits as long)
Say = Callable[[str], None]


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def default_out_dir(recipe_id: str) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    return paths.state_dir() / "tune" / f"{stamp}-{recipe_id.replace('/', '__')}"


def tune_specs(recipe, tuning: tplan.Tuning) -> list[suites.ProbeSpec]:
    """The probes a trial runs: those the objective and constraints name, thinned for ranking."""
    merged = {p.key: p for p in suites.merge(suites.load_suite(TUNE_SUITE), recipe)}
    out = []
    for key in tuning.probe_keys():
        spec = merged[key]
        params = dict(spec.params)
        if spec.kind == "decode":
            params["runs"] = min(int(params.get("runs", 5)), 3)
        elif spec.kind == "needle" and params.get("sizes_words"):
            params["sizes_words"] = [min(params["sizes_words"])]
        elif spec.kind == "batch_decode":
            params["runs"] = 1
        out.append(spec.model_copy(update={"params": params, "enabled": True}))
    return out


def suite_keys(recipe) -> list[str]:
    return [p.key for p in suites.merge(suites.load_suite(TUNE_SUITE), recipe)]


def plan_for(recipe_data: dict, recipe) -> tplan.TunePlan:
    tuning = tplan.parse_tuning(recipe.tuning, probe_keys=suite_keys(recipe))
    return tplan.plan_trials(recipe_data, tuning)


def dry_run_doc(cfg: Config, recipe_source: str, tp: tplan.TunePlan) -> dict:
    return {"schema": SCHEMA, "dry_run": True, "recipe": {"id": cfg.recipe.id, "source": recipe_source},
            "profile": cfg.profile.name, "suite": TUNE_SUITE,
            "probes": [s.key for s in tune_specs(cfg.recipe, tp.tuning)] + (["qualify"] if tp.tuning.needs_qualify
                                                                            else []),
            **tp.to_dict()}


def _with_knob_files(plan: Plan, boot: tplan.Boot, knob_dir: Path) -> Plan:
    """The boot's plan plus a read-only bind of each knob file at the path its variable names."""
    if not boot.knob_files:
        return plan
    rt = plan.runtime.model_copy(deep=True)
    for var, target in boot.knob_files.items():
        rt.volumes.append(Volume(source=str(knob_dir / var), target=target, read_only=True,
                                 why=f"tune knob file ({var})"))
    return plan.model_copy(update={"runtime": rt})


def _write_knobs(knob_dir: Path, values: dict, say: Say) -> None:
    """The knob files the runtime reads while it runs, through the executor (each file that
    differs is replaced, then read back)."""
    from hostctl.act.files import FilesPart, Want
    from hostctl.act.inline import run_inline

    wants = [Want(path=str(knob_dir / var), text=f"{value}\n", why=f"the trial's value of {var}")
             for var, value in values.items()]
    run_inline([FilesPart("tune-knobs", wants)], command="hostctl tune", schema=SCHEMA, say=say)


class Sweep:
    """One tune run. `up`/`down` are hostctl.service.lifecycle's (a test may hand in others with the
    same signatures); `facts` and `build_plan` make each boot's plan as `up` would."""

    def __init__(self, cfg: Config, recipe_data: dict, recipe_source: str, tp: tplan.TunePlan, *, facts,
                 out_dir: Path, say: Say, hostctl_bin: str, up=None, down=None, build_plan=None):
        from hostctl.plan import build_plan as _build
        from hostctl.service import lifecycle

        self.cfg, self.recipe_data, self.recipe_source, self.tp = cfg, recipe_data, recipe_source, tp
        self.facts, self.out_dir, self.say, self.hostctl_bin = facts, out_dir, say, hostctl_bin
        self.up, self.down = up or lifecycle.up, down or lifecycle.down
        self.build_plan = build_plan or _build
        self.specs = tune_specs(cfg.recipe, tp.tuning)
        self.doc: dict = {
            "schema": SCHEMA, "dry_run": False, "status": "running", "started_at": _now(), "finished_at": None,
            "recipe": {"id": cfg.recipe.id, "source": recipe_source}, "profile": cfg.profile.name,
            "suite": TUNE_SUITE, "probes": [s.key for s in self.specs] + (["qualify"] if tp.tuning.needs_qualify
                                                                           else []),
            **tp.to_dict(), "winner": None, "boot_count": 0, "out_dir": str(out_dir),
        }
        for b in self.doc["boots"]:
            b["status"] = "not_run"
        for t in self.doc["trials"]:
            t.update({"status": "not_run", "objective": None, "constraints": {}, "valid": False})

    # ------------------------------------------------------------ the sweep

    def _boot_doc(self, boot_id: str) -> dict:
        return next(b for b in self.doc["boots"] if b["id"] == boot_id)

    def _trial_doc(self, trial_id: str) -> dict:
        return next(t for t in self.doc["trials"] if t["id"] == trial_id)

    def run(self) -> dict:
        try:
            for i, boot in enumerate(self.tp.boots, 1):
                self.say(f"boot {i}/{len(self.tp.boots)}: {_knobs_text(boot.knobs) or 'the recipe as it is'}")
                self._run_boot(boot)
        except Interrupted as exc:
            self.doc["status"] = "interrupted"
            self.doc["interrupted"] = {"signal": exc.signal_name}
            for t in self.doc["trials"]:
                if t["status"] == "running":
                    t["status"] = "interrupted"
            self._finish()
            raise
        self._finish()
        return self.doc

    def _run_boot(self, boot: tplan.Boot) -> None:
        bdoc = self._boot_doc(boot.id)
        trials = [t for t in self.tp.trials if t.boot == boot.id]
        knob_dir = self.out_dir / "knobs" / boot.id
        try:
            recipe = parse_recipe(boot.recipe, f"{self.recipe_source} ({boot.id})")
        except HostctlError as exc:
            self._boot_failed(bdoc, trials, "recipe-invalid", exc.message, "; ".join(exc.details), exc.fix)
            return
        cfg = Config(profile=self.cfg.profile, recipe=recipe, source=self.cfg.source,
                     source_text=self.cfg.source_text)
        plan = _with_knob_files(self.build_plan(cfg, self.facts), boot, knob_dir)
        if trials and trials[0].runtime_knobs:
            _write_knobs(knob_dir, trials[0].runtime_knobs, lambda m: self.say("  " + m))
        bdoc["status"] = "starting"
        t0 = time.monotonic()
        started = False
        try:
            self.doc["boot_count"] += 1
            started = True
            try:
                outcome = self.up(cfg, plan, self.facts, timeout=None, keep_on_failure=False,
                                  say=lambda m: self.say("  " + m), hostctl_bin=self.hostctl_bin)
            except HostctlError as exc:  # preflight refused: nothing was started
                started = False
                self._boot_failed(bdoc, trials, "preflight", exc.message, "; ".join(exc.details), exc.fix)
                return
            bdoc["seconds"] = round(time.monotonic() - t0, 1)
            bdoc["timings"] = outcome.timings
            if not outcome.ready:
                started = False  # up took it down itself
                c = outcome.cause
                self._boot_failed(bdoc, trials, c.id if c else "failed", c.title if c else "not ready",
                                  c.cause if c else "", c.fix if c else None, lines=(c.lines if c else []) +
                                  [f"log: {ln}" for ln in outcome.log_tail[-5:]])
                return
            bdoc["status"] = "ready"
            kv = outcome.kv.model_dump(mode="json") if outcome.kv is not None else None
            bdoc["kv"] = kv
            service = bench_runner.ready_service(cfg, plan)
            fp = bench_runner.fingerprint.of_project(service.project_dir, service.image_id)
            bdoc["service_fingerprint"] = fp.digest if fp else None
            for trial in trials:
                self._run_trial(cfg, plan, trial, service, kv, knob_dir)
        finally:
            if started:
                self.say(f"  taking {boot.id} down")
                try:
                    self.down(cfg, say=lambda m: self.say("  " + m))
                except HostctlError as exc:
                    bdoc["down_error"] = exc.message
                    self.say(f"  warning: could not take {boot.id} down: {exc.message}")

    def _boot_failed(self, bdoc: dict, trials, cause_id: str, title: str, cause: str, fix: str | None,
                     lines: list[str] | None = None) -> None:
        bdoc.update({"status": "failed", "cause": {"id": cause_id, "title": title, "cause": cause, "fix": fix,
                                                   "lines": lines or []}})
        self.say(f"  boot failed [{cause_id}]: {title}" + (f" (fix: {fix})" if fix else ""))
        for t in trials:
            self._trial_doc(t.id).update({"status": "failed", "cause": bdoc["cause"]})

    def _run_trial(self, cfg: Config, plan: Plan, trial: tplan.Trial, service, kv: dict | None,
                   knob_dir: Path) -> None:
        tdoc = self._trial_doc(trial.id)
        tdoc["status"] = "running"
        if trial.runtime_knobs:
            _write_knobs(knob_dir, trial.runtime_knobs, lambda m: self.say("    " + m))
            self.say(f"  {trial.id}: knob files -> {_knobs_text(trial.runtime_knobs)}")
            time.sleep(KNOB_SETTLE_S)
        results: dict = {"kv": kv or {}}
        trial_dir = self.out_dir / trial.id
        files = []
        if self.specs:
            doc, path = bench_runner.run(cfg, plan, TUNE_SUITE, out_dir=trial_dir, say=lambda m: self.say("    " + m),
                                         service=service, specs=self.specs, keep_raw=True)
            files.append(str(path))
            results.update({p["key"]: p for p in doc["probes"]})
            tdoc["bench_status"] = doc["status"]
        if self.tp.tuning.needs_qualify:
            qdoc, qpath = bench_runner.run(cfg, plan, "qualify", out_dir=trial_dir, say=lambda m: self.say("    " + m),
                                           service=service, store_verdict=False)
            files.append(str(qpath))
            verdict = qdoc.get("qualify") or {}
            results["qualify"] = {"pass": bool(verdict.get("passed")) if verdict else None,
                                  "rungs": verdict.get("rungs") or [], "result": str(qpath),
                                  "status": qdoc.get("status")}
        checks = {c.text: c.check(results) for c in self.tp.tuning.constraints}
        objective = tplan.dig(results, self.tp.tuning.objective)
        tdoc.update({"status": "ok", "objective": objective if isinstance(objective, (int, float)) else None,
                     "constraints": checks, "constraint_reasons": {c.text: constraint_reason(c, results, checks[c.text])
                                                                   for c in self.tp.tuning.constraints},
                     "valid": all(v is True for v in checks.values()) and isinstance(objective, (int, float)),
                     "results": files})
        self.say(f"  {trial.id}: {self.tp.tuning.objective} = {objective}; "
                 + ", ".join(f"{k}: {'pass' if v else ('n/a' if v is None else 'FAIL')}"
                             + ("" if v else f" ({tdoc['constraint_reasons'][k]})") for k, v in checks.items()))

    def _finish(self) -> None:
        ranked = tplan.rank(self.doc["trials"])
        if ranked:
            best = ranked[0]
            self.doc["winner"] = {"trial": best["id"], "knobs": best["knobs"], "objective": best["objective"]}
        if self.doc["status"] == "running":
            self.doc["status"] = "ok" if ranked else "no_winner"
        self.doc["finished_at"] = _now()
        tuned = self.tuned_recipe()
        if tuned is not None:
            before = yaml.safe_dump(self.recipe_data, sort_keys=False)
            after = yaml.safe_dump(tuned, sort_keys=False)
            self.doc["recipe_diff"] = "".join(difflib.unified_diff(
                before.splitlines(True), after.splitlines(True), fromfile=f"{self.recipe_source}",
                tofile=f"{self.cfg.recipe.id} (tuned)"))
        else:
            self.doc["recipe_diff"] = None

    def tuned_recipe(self) -> dict | None:
        """The recipe with the winner's knobs (a knob-file axis sets its variable to the value)."""
        win = self.doc.get("winner")
        if not win:
            return None
        axes = list(self.tp.tuning.axes)
        values = tuple(win["knobs"][a.label] for a in axes)
        env_axes = [tplan.Axis(index=a.index, kind="env", values=a.values, restart=True, name=a.name) if not a.restart and a.kind == "env"
                    else a for a in axes]
        return tplan.apply(self.recipe_data, env_axes, values)

    def write(self, *, write_recipe: bool) -> Path:
        """tune.json (and the chart, and the tuned recipe with write_recipe) in out_dir."""
        from hostctl.act.files import FilesPart, Want
        from hostctl.act.inline import run_inline
        from hostctl.tune import chart

        png, why = chart.draw(self.doc)
        chart_path = self.out_dir / "objective.png"
        self.doc["chart"] = str(chart_path) if png else None
        self.doc["chart_skipped"] = why
        # Written as the other results are (safefs): savefig on the path would follow a link
        # another user planted where --out points.
        wants = [] if png is None else [Want(path=str(chart_path), text=png, why="the objective per trial")]
        tuned = self.tuned_recipe()
        self.doc["tuned_recipe"] = None
        # The whole recipe, its env with it (an HF_TOKEN the recipe holds reaches the runtime only
        # through the 0600 runtime.env): the user's alone, as tune.json, whose diff quotes it.
        if write_recipe and tuned is not None:
            target = self.out_dir / f"{self.cfg.recipe.id.replace('/', '__')}.tuned.yaml"
            header = (f"# {self.cfg.recipe.id} tuned by hostctl tune ({self.doc['finished_at']}): winner "
                      f"{self.doc['winner']['trial']}, {self.tp.tuning.objective} = {self.doc['winner']['objective']}\n"
                      f"# from {self.recipe_source}; results in {self.out_dir}/tune.json. Review, then copy it over "
                      "the recipe yourself: tune never applies it.\n")
            wants.append(Want(path=str(target), text=header + yaml.safe_dump(tuned, sort_keys=False), mode=0o600,
                              owner=sudo_owner(), secret=True, why="--write: the recipe with the winner's knobs"))
            self.doc["tuned_recipe"] = str(target)
        path = self.out_dir / "tune.json"
        wants.append(Want(path=str(path), text=json.dumps(self.doc, indent=2, default=str) + "\n", mode=0o600,
                          owner=sudo_owner(), secret=True, why="the sweep's results"))
        run_inline([FilesPart("tune-results", wants)], command="hostctl tune", schema=SCHEMA, say=self.say)
        return path


def constraint_reason(c: tplan.Constraint, results: dict, ok: bool | None) -> str:
    """What a constraint was judged on, in words: the value found, or for qualify.pass the rungs
    that failed (each with its detail) and the result file they come from."""
    if c.root == "qualify":
        q = results.get("qualify") or {}
        if q.get("pass") is None:
            return f"the qualify run gave no verdict (status {q.get('status')}); {q.get('result')}"
        if q["pass"]:
            return f"every rung passed ({len(q['rungs'])}); {q.get('result')}"
        bad = [r for r in q["rungs"] if not r.get("pass")]
        return (f"{len(bad)} of {len(q['rungs'])} rung(s) failed: "
                + "; ".join(f"{r.get('name')}: {r.get('detail')}" for r in bad) + f"; {q.get('result')}")
    value = tplan.dig(results, c.path)
    if ok is None:
        return f"{c.path} was not measured"
    return f"{c.path} = {value}"


def _knobs_text(knobs: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in knobs.items())


def text_report(doc: dict) -> str:
    t = doc
    lines = [f"tune {t['recipe']['id']}: objective {t['objective']} (higher is better)"
             + (f"; constraints: {', '.join(t['constraints'])}" if t["constraints"] else "")]
    if t.get("dry_run"):
        lines.append(f"{len(t['boots'])} boot(s), {len(t['trials'])} trial(s); probes per trial: "
                     f"{', '.join(t['probes']) or 'none'}")
        for b in t["boots"]:
            lines.append(f"  {b['id']}: {_knobs_text(b['knobs']) or 'the recipe as it is'}")
            for tr in t["trials"]:
                if tr["boot"] == b["id"] and tr["runtime_knobs"]:
                    lines.append(f"    {tr['id']}: knob files {_knobs_text(tr['runtime_knobs'])}")
        return "\n".join(lines) + "\n"
    labels = [a["label"] for a in t["axes"]]
    head = ["trial"] + labels + [t["objective"]] + t["constraints"] + ["result"]
    rows = []
    for tr in t["trials"]:
        res = ("winner" if t.get("winner") and t["winner"]["trial"] == tr["id"] else
               ("pass" if tr["valid"] else ("FAILED: " + (tr.get("cause") or {}).get("id", tr["status"])
                                            if tr["status"] != "ok" else "fail")))
        rows.append([tr["id"]] + [str(tr["knobs"].get(lb)) for lb in labels]
                    + [f"{tr['objective']:.2f}" if isinstance(tr["objective"], (int, float)) else "-"]
                    + [{True: "pass", False: "FAIL", None: "-"}[tr["constraints"].get(c)] for c in t["constraints"]]
                    + [res])
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    for r in [head] + rows:
        lines.append("  " + "  ".join(str(x).ljust(w) for x, w in zip(r, widths)))
    for tr in t["trials"]:
        for c, ok in tr["constraints"].items():
            if ok is not True and (tr.get("constraint_reasons") or {}).get(c):
                lines.append(f"  {tr['id']} {c}: {'FAIL' if ok is False else 'n/a'}: {tr['constraint_reasons'][c]}")
    for b in t["boots"]:
        if b.get("status") == "failed":
            c = b["cause"]
            lines.append(f"  {b['id']} failed [{c['id']}]: {c['title']}" + (f"; fix: {c['fix']}" if c.get("fix") else ""))
    w = t.get("winner")
    lines.append(f"winner: {w['trial']} ({_knobs_text(w['knobs'])}), {t['objective']} = {w['objective']}" if w
                 else "no trial met every constraint: no winner")
    if t.get("recipe_diff"):
        lines.append("recipe diff (not applied):")
        lines += ["  " + ln for ln in t["recipe_diff"].rstrip("\n").splitlines()]
    lines.append(f"chart: {t['chart']}" if t.get("chart") else f"chart: not written ({t.get('chart_skipped')})")
    if t.get("tuned_recipe"):
        lines.append(f"tuned recipe: {t['tuned_recipe']}")
    r = t.get("restore")
    if r:
        lines.append(f"service before tune: {r['summary']}")
    lines.append(f"boots: {t['boot_count']}; results: {t['out_dir']}/tune.json")
    return "\n".join(lines) + "\n"
