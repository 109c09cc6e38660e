"""`hostctl tune` between the CLI and the sweep: load the profile with the recipe to tune, list
its trials and boots (and stop there with --dry-run; with --facts, also the plan's errors on that
snapshot, which every boot would fail with), plan, hold the tune lock, stop the service that was
up, sweep, bring that service back, write the results, print the table (or the hostctl.tune/v1
document)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console

from hostctl import paths
from hostctl.config import Config, find_profile, load_config, parse_recipe, recipe_path
from hostctl.errors import EXIT_FAILED, FailedError, InputError
from hostctl.interrupt import Interrupted, signals_raise
from hostctl.safeload import load_yaml
from hostctl.act.lock import HostLock
from hostctl.tune import restore, runner

TUNE_LOCK = "tune.lock"


def load(config_path: Path | None, recipe_ref: str | None) -> tuple[Config, dict, str]:
    """(config with the recipe to tune, that recipe as loaded from YAML, its path)."""
    cfg = load_config(config_path)
    if recipe_ref is None:
        path = recipe_path(cfg.profile.recipe, find_profile(config_path).parent)
    else:
        path = recipe_path(recipe_ref, Path.cwd())
    if not path.is_file():
        raise InputError(f"--recipe {recipe_ref}: no such recipe ({path})",
                         fix="name a bundled recipe or a YAML path (vLLM-MoET recipes load unchanged)")
    # The one safe loader, as `plan` reads a recipe: an alias bomb here took 30 s and a MemoryError.
    data = load_yaml(path, "recipe").data
    recipe = parse_recipe(data, str(path))
    return Config(profile=cfg.profile, recipe=recipe, source=cfg.source, warnings=cfg.warnings,
                  source_text=cfg.source_text), data, str(path)


def tune(config_path: Path | None, recipe_ref: str | None, *, dry_run: bool, json_: bool, out_dir: Path | None,
         write: bool, facts_path: Path | None, out: Console, err: Console, hostctl_bin: str) -> int:
    cfg, data, source = load(config_path, recipe_ref)
    for w in cfg.warnings:
        err.print(f"warning: {w}", markup=False)
    tp = runner.plan_for(data, cfg.recipe)
    if dry_run:
        doc = runner.dry_run_doc(cfg, source, tp)
        if facts_path is not None:
            # The recipe to tune, planned on the snapshot as each boot would be: what `plan` would
            # refuse, every boot would fail with. Said, not refused: the trials are still listed.
            from hostctl.facts import load_snapshot
            from hostctl.plan import build_plan

            plan = build_plan(cfg, load_snapshot(facts_path))
            doc["plan_errors"] = [f"[{e.area}] {e.message}" + (f" (fix: {e.fix})" if e.fix else "")
                                  for e in plan.errors]
            for e in doc["plan_errors"]:
                err.print(f"warning: every boot would fail: hostctl plan reports {e}", markup=False)
        if json_:
            sys.stdout.write(json.dumps(doc, indent=2) + "\n")
        else:
            out.print(runner.text_report(doc), end="", markup=False, highlight=False)
        return 0
    if facts_path is not None:
        raise InputError("--facts cannot be used with `tune` (without --dry-run): it boots the runtime on this host")

    from hostctl.facts import collect
    from hostctl.plan import build_plan, path_requests
    from hostctl.service import lifecycle

    say = lambda m: err.print(m, markup=False, highlight=False)  # noqa: E731
    target = out_dir or runner.default_out_dir(cfg.recipe.id)
    with HostLock("tune", paths.state_dir() / TUNE_LOCK):
        facts = collect(path_requests(cfg))
        # The service as the profile serves it (its own recipe), to bring back afterwards.
        home = load_config(config_path)
        home_plan = build_plan(home, facts)
        before = restore.observe(home, home_plan, hostctl_bin=hostctl_bin)
        refusal = restore.decide(before)
        if refusal is not None:
            raise refusal
        sweep = runner.Sweep(cfg, data, source, tp, facts=facts, out_dir=target, say=say, hostctl_bin=hostctl_bin)
        sweep.doc["service_before"] = before.to_dict()
        interrupted: Interrupted | None = None
        why = "failed"  # until the sweep returns: an exception on the way still brings the service back
        try:
            with signals_raise():
                if before.running:
                    say(f"stopping {before.container} for the sweep (it is brought back afterwards)")
                    lifecycle.down(home, say=say)
                sweep.run()
                why = "ended"
        except Interrupted as exc:
            interrupted, why = exc, "interrupted"
        finally:
            try:
                sweep.doc["restore"] = restore.bring_back(before, home, home_plan, facts, why=why, say=say,
                                                          hostctl_bin=hostctl_bin)
            finally:
                path = sweep.write(write_recipe=write)
    if interrupted is not None:
        err.print(f"tune interrupted by {interrupted.signal_name}: the boot in progress was taken down; results so "
                  f"far in {path}", markup=False)
        err.print(f"service before tune: {sweep.doc['restore']['summary']}", markup=False)
        return interrupted.exit_code
    doc = sweep.doc
    if json_:
        sys.stdout.write(json.dumps(doc, indent=2, default=str) + "\n")
    else:
        out.print(runner.text_report(doc), end="", markup=False, highlight=False)
    if doc["restore"].get("failed"):
        raise FailedError(f"the service that was up before tune did not come back: {doc['restore']['summary']}",
                          fix="run `hostctl up` and read its diagnosis")
    return 0 if doc.get("winner") else EXIT_FAILED
