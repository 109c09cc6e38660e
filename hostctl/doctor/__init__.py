"""`hostctl doctor`: every check with its evidence and fix, in text or versioned JSON.

run() is what the CLI calls: it loads the profile when there is one (without one, the checks
that need it skip and say so), reads the facts (live, or a --facts snapshot), builds the plan,
runs the registered checks (registry.py, checks/), classifies a --log, writes a --bundle and
prints the report (report.py). Checks only read facts and the plan; nothing here changes the
host. For `up`: hostctl.doctor.diagnose.diagnose() classifies a failed start's log.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from hostctl import paths
from hostctl.errors import InputError, NoProfileError

if TYPE_CHECKING:  # the CLI imports this package to parse: pydantic only when doctor runs
    from hostctl.doctor.options import DoctorOptions

LEVELS = ("quick", "full")


def _load_config(opts: DoctorOptions):
    """(config or None, why there is none)."""
    if opts.config_path is None and paths.searched_profile() is None:
        return None, "no host profile"  # what load_config would raise, without importing the config models
    from hostctl.config import load_config

    try:
        return load_config(opts.config_path), None
    except NoProfileError:
        return None, "no host profile"


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:
        return False


def port_requests(config) -> list[tuple[str, int]]:
    rt = config.profile.runtime
    return [(rt.api_host, rt.api_port)]


def image_requests(config) -> list[str]:
    """The runtime image the plan will name (as hostctl/plan/runtime.py picks it), resolved to its
    image id for the service fingerprint."""
    ref = config.profile.runtime.image or config.recipe.image
    return [ref] if ref else []


def _boot_code():
    """The code behind the hostctl the boot units call, and which of those units are installed."""
    from hostctl.facts.executable import BOOT_UNITS, read_exec_chain

    installed = tuple(u for u in BOOT_UNITS if paths.system_path(u).is_file())
    return read_exec_chain(paths.INSTALLED_HOSTCTL), installed


def _engine_progress(config, facts):
    """The profile's runtime, running, not reported unhealthy by its healthcheck and answering
    /health, asked once whether its engine works (hostctl.service.liveness.check_once: a frozen
    engine answers /health); None when there is nothing to ask, or it is still loading."""
    if config is None or not facts.engine.available:
        return None
    from hostctl.service import identity

    rt = identity.of_config(config)
    running = [c for c in facts.engine.containers if c.name == rt.container and c.state == "running"
               and c.health != "unhealthy"]
    if not running:
        return None
    from hostctl.service import liveness, status

    # Loading is told by /health itself, as status tells it: Docker's healthcheck says "starting"
    # until its first probe passes, up to its 30 s interval after the engine is ready
    # (templates/compose.yaml.j2), and a frozen engine in that window went unjudged.
    if not status.health_of(rt.endpoint)[0]:
        return None
    return liveness.check_once(rt.endpoint, rt.served_name, rt.api_key_env, rt.hang_timeout_s)


def build_report(opts: DoctorOptions, err: TextIO | None = None):
    """Everything but printing: (report, config, facts, plan)."""
    from hostctl.doctor.checks import all_checks
    from hostctl.doctor.registry import CheckContext, run_checks
    from hostctl.doctor.report import DoctorReport

    if opts.level not in LEVELS:
        raise InputError(f"--level: expected quick or full, got {opts.level!r}")
    if opts.bundle is not None:
        from hostctl.doctor.bundle import check_target

        check_target(opts.bundle)
    if opts.log is not None and not _is_file(opts.log):
        raise InputError(f"--log {opts.log}: no such file", fix="save the runtime's log first, e.g. "
                         "`docker logs hostctl-runtime > runtime.log 2>&1`")
    # In-process phases; interpreter start-up and imports are what a process's wall time adds
    # (benchmarks/doctor_quick.py measures both).
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    config, why = _load_config(opts)
    for w in config.warnings if config is not None else []:
        if err is not None:
            err.write(f"warning: {w}\n")
    t1 = time.perf_counter()
    timings["config"] = t1 - t0
    if opts.facts_path is not None:
        from hostctl.facts import load_snapshot

        facts, source = load_snapshot(opts.facts_path), str(opts.facts_path)
    else:
        from hostctl.facts import collect
        from hostctl.plan import alias_requests, path_requests

        facts = collect(path_requests(config) if config else (), port_requests(config) if config else (),
                        alias_requests(config) if config else (),
                        image_requests(config) if config else ())
        source = "live"
    checkpoint = None
    if config is not None and config.profile.runtime.model_dir and opts.facts_path is None:
        from hostctl.facts.checkpoint import probe_checkpoint  # sizes and hostctl's manifest; nothing is hashed

        checkpoint = probe_checkpoint(config.profile.runtime.model_dir)
    boot_code, boot_units = _boot_code() if opts.facts_path is None else (None, ())
    engine_progress = _engine_progress(config, facts) if opts.facts_path is None else None
    t2 = time.perf_counter()
    timings["facts"] = t2 - t1
    plan = None
    if config is not None:
        from hostctl.plan import build_plan

        plan = build_plan(config, facts)
        if config.profile.drives:  # what provision's storage part would refuse is a plan error too
            from hostctl.provision.storage_part import add_refusals

            add_refusals(plan, config, facts, snapshot=source != "live")
    t3 = time.perf_counter()
    timings["plan"] = t3 - t2
    ctx = CheckContext(facts=facts, config=config, plan=plan, level=opts.level, facts_source=source,
                  no_config_reason=why or "no host profile", checkpoint=checkpoint, boot_code=boot_code,
                  boot_units=boot_units, engine_progress=engine_progress)
    outcomes = run_checks(ctx, all_checks())
    t4 = time.perf_counter()
    timings["checks"] = t4 - t3
    log = None
    if opts.log is not None:  # the log's classifier is imported only for a log
        from hostctl.doctor.diagnose import diagnose_file

        log = diagnose_file(opts.log, facts)
    timings["log"] = time.perf_counter() - t4
    report = DoctorReport(
        host=facts.hostname, level=opts.level, strict=opts.strict, facts_source=source, collected_at=facts.collected_at,
        outcomes=outcomes, profile=config.profile.name if config else None, recipe=config.recipe.id if config else None,
        phase=config.profile.phase if config else None, no_config_reason=why, notes=list(facts.notes), log=log,
        timings=timings,
    )
    return report, config, facts, plan


def run(opts: DoctorOptions, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run doctor and print its report; returns the exit code (0 ok, 1 a check failed)."""
    from hostctl.doctor import report as rep

    out, err = out or sys.stdout, err or sys.stderr

    start = time.perf_counter()
    report, config, facts, plan = build_report(opts, err)
    if opts.bundle is not None:
        from hostctl.doctor import bundle

        report.bundle = str(opts.bundle)
        contents = bundle.gather(doctor_json=rep.json_text(report), facts=facts, plan=plan, config=config,
                                 live=opts.facts_path is None, log_path=opts.log)
        redactions = bundle.write(opts.bundle, contents)
        err.write(f"wrote {opts.bundle} ({len(contents.files) + 1} files, {sum(redactions.values())} secret(s) "
                  "redacted)\n")
    report.timings["total"] = time.perf_counter() - start
    if opts.as_json:
        out.write(rep.json_text(report))
    else:
        out.write(rep.text(report, colour=rep.use_colour(out)))
    return report.exit_code
