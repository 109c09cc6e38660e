"""`hostctl facts|init|plan|render|provision`: read the host, write its profile, plan, render the
runtime's files and make the host ready. Parsing and printing only; each body imports the module
that does the work."""

import os
import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from hostctl.cli.options import (
    ClusterOpt,
    ConfigOpt,
    FactsOpt,
    GlobalOptions,
    JsonOpt,
    MemberOpt,
    global_options,
    print_json,
    say,
    typed_path,
)
from hostctl.errors import EXIT_FAILED, FailedError, InputError, NoProfileError

if TYPE_CHECKING:
    from hostctl.config import Config
    from hostctl.plan.records import Plan

app = typer.Typer()


# A choice typer checks before the command runs: a wrong value exits 2 and lists the valid ones.
# It mirrors hostctl.provision.parts.ORDER, which parsing does not import;
# tests/unit/test_cli_thin.py keeps them equal.
class ProvisionPart(str, Enum):
    storage = "storage"
    system = "system"
    gpu = "gpu"


@app.command()
def facts(ctx: typer.Context, json_: JsonOpt = False, config: ConfigOpt = None, facts: FactsOpt = None) -> None:
    """Probe the host (GPUs, disks, memory, NUMA, IOMMU, Docker) and print what was found.

    With a profile (--config, ./hostctl.toml or /etc/hostctl/hostctl.toml) the directories
    it uses are described too. Whatever is absent is stated with its reason.
    """
    from hostctl.present import facts_text

    c = global_options(ctx, config, facts)
    cfg = None
    if c.facts_path is None:
        try:
            cfg = c.config()
        except NoProfileError:
            pass  # facts describe the host without a profile
    snapshot = c.facts(cfg)
    sys.stdout.write(snapshot.model_dump_json(indent=2) + "\n" if json_ else facts_text(snapshot))


@app.command()
def init(
    ctx: typer.Context,
    recipe: Annotated[Optional[str], typer.Option("--recipe", help="Bundled recipe name or YAML path (with --box, also a recipe id of the box's bench). Default: the "
                                                  "bundled recipe whose requires fit this host best.")] = None,
    out_path: Annotated[str, typer.Option("--out", help="Profile to write ('-': print it).")] = "hostctl.toml",
    drives: Annotated[Optional[list[str]], typer.Option("--drives", metavar="IDENTITY,...", help="Use these drives "
                                                        "(serial:, wwn:, by-id:, path:; 'none' for none). Default: "
                                                        "propose the free ones, marked for you to confirm.")] = None,
    power_limit: Annotated[Optional[float], typer.Option("--power-limit", metavar="W", help="Cap every GPU at W "
                                                         "watts (checked against each GPU's range). Default: none.")] = None,
    model_dir: Annotated[Optional[str], typer.Option("--model-dir", help="The checkpoint's directory on this host.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace the file at --out if it exists.")] = False,
    box: Annotated[Optional[str], typer.Option("--box", metavar="BOX.yaml", help="Write the profile from a vLLM-MoET "
                                               "box (bench/boxes/*.yaml): its GPUs, RAM, image, env, models and "
                                               "planes caches; this host's facts for the rest.")] = None,
    json_: JsonOpt = False,
    facts: FactsOpt = None,
) -> None:
    """Write a commented host profile from this host's facts: recipe, drives, swap, storage roles,
    memory reserve, phase, power limits, API on 127.0.0.1; each value with its reason.

    Only reads (never touches a disk). Refuses to write over an existing file without --force
    (exit 3). Works on a snapshot with --facts. Next: hostctl plan, provision --dry-run, provision, up.
    """
    from hostctl.profile_init import InitOptions, init_profile, parse_drives, summary_text

    c = global_options(ctx, None, facts)
    if c.config_path is not None:
        raise InputError("--config names a profile to read; `hostctl init` writes one", fix="use --out PATH")
    if out_path == "-" and json_:
        raise InputError("--out - prints the profile, --json the choices: pick one")
    options = InitOptions(drives=parse_drives(drives), power_limit_w=power_limit,
                          model_dir=os.path.abspath(model_dir) if model_dir else None)
    result = init_profile(facts_path=c.facts_path, options=options, recipe_ref=recipe, force=force,
                          out=None if out_path == "-" else Path(out_path), box_path=Path(box) if box else None)
    if json_:
        print_json(result.document())
    elif result.text is not None and result.out is None:
        sys.stdout.write(result.text)
    else:
        sys.stdout.write(summary_text(result))
    for w in result.proposal.warnings + [f"hostctl plan will report: {e}" for e in result.proposal.plan_errors]:
        say(f"warning: {w}")
    if result.proposal.recipe is None:
        raise FailedError(f"no profile written: {result.proposal.recipe_reason}",
                          fix="choose one anyway with --recipe NAME|PATH")


@app.command()
def plan(ctx: typer.Context, json_: JsonOpt = False, config: ConfigOpt = None, facts: FactsOpt = None,
         cluster: ClusterOpt = None, member: MemberOpt = None) -> None:
    """Explain every decision for this host and recipe, with its reason. Changes nothing.

    Exits 1 when the plan has errors (the host cannot serve the recipe as configured).
    With --cluster: the cross-host plan (hostctl.cluster-plan/v1).
    """
    if cluster is not None:
        from hostctl.cluster.commands import plan_cmd

        code = plan_cmd(cluster, member, json_, global_options(ctx, config, facts).facts_path)
        if code:
            raise typer.Exit(code)
        return
    from hostctl.secrets import redact
    from hostctl.present import plan_text

    c = global_options(ctx, config, facts)
    cfg = c.config()
    result = _plan_with_drives(c, cfg)
    # The plan carries the recipe's env values: secrets are hidden by name and by value.
    sys.stdout.write(redact(result.model_dump_json(indent=2) + "\n" if json_ else plan_text(result)))
    if result.errors:
        raise typer.Exit(EXIT_FAILED)


def _plan_with_drives(c: GlobalOptions, cfg: "Config") -> "Plan":
    """The plan, with what provision's storage part would refuse on these facts as its problems
    (a drive a snapshot of another host does not hold is a warning there)."""
    from hostctl.plan import build_plan

    facts_now = c.facts(cfg, for_plan=True)
    result = build_plan(cfg, facts_now)
    if cfg.profile.drives:
        from hostctl.provision.storage_part import add_refusals

        add_refusals(result, cfg, facts_now, snapshot=c.facts_path is not None)
    return result


@app.command()
def render(
    ctx: typer.Context,
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="Directory to write into. Default: the profile's "
                                                    "runtime.project_dir (/var/lib/hostctl/project).",
                                                    file_okay=False)] = None,
    hostctl_bin: Annotated[str, typer.Option("--hostctl-bin", help="hostctl path the systemd units call.")]
    = "/usr/local/bin/hostctl",
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be written (a diff per file; "
                                          "runtime.env only named); write nothing.")] = False,
    config: ConfigOpt = None,
    facts: FactsOpt = None,
    cluster: ClusterOpt = None,
    member: MemberOpt = None,
) -> None:
    """Write compose.yaml, runtime.env and the systemd units for this host and recipe.

    With --cluster: one Compose project per host (or only --member's), in each member's state
    directory or under --out DIR/<member>, each with its unit hostctl-<cluster>-<member>.service.

    Nothing is written when the plan has errors, nor when DIR already holds the project as
    rendered (reported unchanged). The project is written to a temporary directory beside DIR
    and checked there (each file re-read against its template and the plan; `docker compose
    config` when Compose is installed); only a project that passes replaces DIR. runtime.env (it
    may hold the recipe's secrets) is mode 0600. Prints the project's files, one per line.
    """
    if cluster is not None:
        from hostctl.cluster.commands import render_cmd

        facts_path = global_options(ctx, config, facts).facts_path
        for path in render_cmd(cluster, member, typed_path(out_dir), facts_path, say=say, hostctl_bin=hostctl_bin,
                               dry_run=dry_run):
            print(path)
        if member is not None and facts_path is None:  # this host's member: its unit runs here
            _warn_boot_code(hostctl_bin)
        return
    from hostctl.service.compose import compose_available
    from hostctl.service.project_part import project_paths, render_project
    from hostctl.service.render import compose_checked, render_files

    c = global_options(ctx, config, facts)
    cfg = c.config()
    result = _plan_with_drives(c, cfg)
    if result.errors:
        raise FailedError(
            "the plan has errors; nothing was rendered",
            details=[f"[{p.area}] {p.message}" + (f" (fix: {p.fix})" if p.fix else "") for p in result.errors],
            fix="fix the problems above (`hostctl plan` explains each decision)",
        )
    target = typed_path(out_dir) or Path(cfg.profile.runtime.project_dir)
    files = render_files(result, hostctl_bin=hostctl_bin)
    probe = None if dry_run else compose_available()  # a dry run writes, so checks, nothing
    check = compose_checked if probe is not None and probe.ok else None
    report = render_project(files, target, check=check, say=say, dry_run=dry_run)
    if not dry_run:
        for path in project_paths(files, target):
            print(path)
    if report.changed and probe is not None:
        say("checked with docker compose config" if probe.ok
            else f"not checked with docker compose config: it is not available ({probe.why()})")
    for p in result.problems:
        say(f"warning: [{p.area}] {p.message}")
    if c.facts_path is None:  # units for this host: the hostctl they call is this host's
        _warn_boot_code(hostctl_bin)


def _warn_boot_code(hostctl_bin: str) -> None:
    from hostctl.facts.executable import read_exec_chain
    from hostctl.provision.boot_code import render_warning

    warning = render_warning(read_exec_chain(hostctl_bin))
    if warning:
        say(warning)


@app.command()
def provision(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the exact commands and file edits; change nothing.")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Consent to destructive steps on blank or hostctl-laid-out drives.")] = False,
    erase: Annotated[Optional[list[str]], typer.Option("--erase", metavar="IDENTITY",
                                                       help="Also allow erasing this drive's foreign contents.")] = None,
    only: Annotated[Optional[ProvisionPart], typer.Option("--only", help="Run only this part.")] = None,
    boot: Annotated[bool, typer.Option("--boot", help="With --only gpu, as hostctl-power.service runs it at boot: "
                                       "wait up to 60 s for the driver, then apply only the power limits.")] = False,
    json_: Annotated[bool, typer.Option("--json", help="Print one hostctl.provision/v1 document (every action with "
                                        "its status, argv or diff, seconds; the warnings) instead of text.")] = False,
    config: ConfigOpt = None,
    facts: FactsOpt = None,
) -> None:
    """Make the host ready: NVMe swap and cache partitions, sysctl, GPU power limits, units.

    Parts run in order (storage, system, gpu), each until a fresh look at the host needs
    nothing more. Prints every command and file edit first; --dry-run stops there. Destructive
    steps need --yes or the drive's identity typed at a terminal; foreign contents also --erase
    IDENTITY.
    """
    import io

    from hostctl.provision.parts import provision as run_parts

    c = global_options(ctx, config, facts)
    c.refuse_snapshot("provision")
    part = only.value if only is not None else None
    if boot and part != "gpu":
        raise InputError("--boot goes with --only gpu (it is what hostctl-power.service runs)")
    cfg = c.config()
    report = run_parts(cfg, only=part, dry_run=dry_run, yes=yes, erase=tuple(erase or ()), boot=boot,
                       out=io.StringIO() if json_ else sys.stdout)
    if json_:
        print_json(report.document())
    report.raise_for_error()
