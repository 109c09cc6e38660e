"""`hostctl tune` between the CLI and the sweep: load the profile with the recipe to tune, plan
(and stop there with --dry-run), hold the tune lock, stop the service that was up, sweep, bring
that service back, write the results, print the table (or the hostctl.tune/v1 document)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml
from rich.console import Console

from hostctl import paths
from hostctl.config import Config, find_profile, load_config, parse_recipe, recipe_path
from hostctl.errors import EXIT_FAILED, FailedError, InputError
from hostctl.interrupt import Interrupted, signals_raise
from hostctl.service.lock import LifecycleLock
from hostctl.tune import runner

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
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise InputError(f"{path} is not valid YAML", details=[str(exc)]) from None
    recipe = parse_recipe(data, str(path))
    return Config(profile=cfg.profile, recipe=recipe, source=cfg.source, warnings=cfg.warnings), data, str(path)


def _service_before(cfg: Config, plan) -> dict:
    from hostctl.service import state
    from hostctl.service.engine import container_state
    from hostctl.service.lifecycle import container_name

    name = container_name(plan)
    st = container_state(name)
    doc = state.load_service() or {}
    up = st.running and doc.get("container") == name and doc.get("state") == "ready"
    return {"running": bool(st.running), "ready": up, "container": name, "recipe": doc.get("recipe")}


def tune(config_path: Path | None, recipe_ref: str | None, *, dry_run: bool, json_: bool, out_dir: Path | None,
         write: bool, facts_path: Path | None, out: Console, err: Console, hostctl_bin: str) -> int:
    cfg, data, source = load(config_path, recipe_ref)
    for w in cfg.warnings:
        err.print(f"warning: {w}", markup=False)
    tp = runner.plan_for(data, cfg.recipe)
    if dry_run:
        doc = runner.dry_run_doc(cfg, source, tp)
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
    with LifecycleLock("tune", paths.state_dir() / TUNE_LOCK):
        facts = collect(path_requests(cfg))
        # The service as the profile serves it (its own recipe), to bring back afterwards.
        home = load_config(config_path)
        home_plan = build_plan(home, facts)
        before = _service_before(home, home_plan)
        sweep = runner.Sweep(cfg, data, source, tp, facts=facts, out_dir=target, say=say, hostctl_bin=hostctl_bin)
        interrupted: Interrupted | None = None
        try:
            with signals_raise():
                if before["running"]:
                    say(f"stopping {before['container']} for the sweep (it is brought back afterwards)")
                    lifecycle.down(home, say=say)
                sweep.run()
        except Interrupted as exc:
            interrupted = exc
        finally:
            sweep.doc["restore"] = _restore(before, home, home_plan, facts, interrupted, say, hostctl_bin)
            path = sweep.write(write_recipe=write)
    if interrupted is not None:
        err.print(f"tune interrupted by {interrupted.signal_name}: the boot in progress was taken down; results so "
                  f"far in {path}", markup=False)
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


def _restore(before: dict, cfg: Config, plan, facts, interrupted, say, hostctl_bin: str) -> dict:
    from hostctl.errors import HostctlError
    from hostctl.service import lifecycle

    if not before["running"]:
        return {"needed": False, "summary": "none was running; none is running now"}
    if interrupted is not None:
        return {"needed": True, "done": False, "summary": f"{before['container']} (recipe {before['recipe']}) was "
                f"stopped for the sweep and NOT brought back: tune was interrupted; run `hostctl up`"}
    say(f"bringing {before['container']} back (recipe {cfg.recipe.id})")
    try:
        outcome = lifecycle.up(cfg, plan, facts, timeout=None, keep_on_failure=False, say=say,
                               hostctl_bin=hostctl_bin)
    except HostctlError as exc:
        return {"needed": True, "done": False, "failed": True, "summary": f"up failed: {exc.message}"}
    if not outcome.ready:
        return {"needed": True, "done": False, "failed": True,
                "summary": f"up failed [{outcome.cause.id if outcome.cause else '?'}]"}
    return {"needed": True, "done": True, "summary": f"{before['container']} is up again (recipe {cfg.recipe.id})"}
