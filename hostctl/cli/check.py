"""`hostctl verify|doctor`: prove the host matches its plan, and explain what is wrong. Parsing and
printing only; the work is in hostctl.verify and hostctl.doctor, imported by each body."""

import sys
from enum import Enum
from pathlib import Path
from typing import Annotated, Optional

import typer

from hostctl.cli.options import (
    ClusterOpt,
    ConfigOpt,
    FactsOpt,
    JsonOpt,
    MemberOpt,
    global_options,
    print_json,
    say,
    typed_path,
)

app = typer.Typer()


# A choice typer checks before the command runs: a wrong value exits 2 and lists the valid ones.
# It mirrors hostctl.doctor.LEVELS, which parsing does not import; tests/unit/test_cli_thin.py
# keeps them equal.
class DoctorLevel(str, Enum):
    quick = "quick"
    full = "full"


@app.command()
def verify(
    ctx: typer.Context,
    json_: JsonOpt = False,
    host: Annotated[Optional[str], typer.Option("--host", metavar="ssh://USER@HOST[:PORT]",
                                                help="Verify that machine over SSH (the same hostctl installed "
                                                     "there, the profile at the same path). Default: this host.")] = None,
    ssh_config: Annotated[Optional[str], typer.Option("--ssh-config", metavar="FILE",
                                                      help="An ssh config file for --host (owned by root or you, "
                                                           "writable by no one else). Default: root's own.")] = None,
    only: Annotated[Optional[str], typer.Option("--only", metavar="PART[,PART]",
                                                help="storage, system, gpu, runtime (a comma list). Default: all.")] = None,
    config: ConfigOpt = None,
    facts: FactsOpt = None,
) -> None:
    """Prove the host matches its plan, read-only: each provisioned part decides no action on
    fresh facts, then testinfra checks mounts, swaps, fstab, sysctls, units, power limits and
    the runtime (container, caps, /v1/models).

    A part never provisioned here is "not provisioned" (not a failure); the runtime is judged
    when `up` passed and `down` has not run since. Exits 0 when every check passes, 1 when one fails.
    """
    from hostctl.verify import verify as run_verify

    c = global_options(ctx, config, facts)
    c.refuse_snapshot("verify")
    report = run_verify(c.config(), host=host, only=only, ssh_config=ssh_config)
    if json_:
        print_json(report.document())
    else:
        sys.stdout.write(report.text())
    if report.exit_code:
        raise typer.Exit(report.exit_code)


@app.command()
def doctor(
    ctx: typer.Context,
    level: Annotated[DoctorLevel, typer.Option("--level", help="quick (read-only) or full (adds functional tests).")]
    = DoctorLevel.quick,
    json_: JsonOpt = False,
    strict: Annotated[bool, typer.Option("--strict", help="Warnings fail too.")] = False,
    log: Annotated[Optional[Path], typer.Option("--log", help="Classify a runtime log against known failures.")] = None,
    bundle: Annotated[Optional[Path], typer.Option("--bundle", help="Write a redacted support archive.")] = None,
    config: ConfigOpt = None,
    facts: FactsOpt = None,
    cluster: ClusterOpt = None,
    member: MemberOpt = None,
) -> None:
    """Every check, with evidence and the fix, in text or versioned JSON.

    Exits 0 when no check fails, 1 when one does (with --strict also on a warning, and with
    --log when the log matches a known failure). Without a host profile the checks that need
    one skip and say so.
    """
    if cluster is not None:
        from hostctl.cluster.commands import doctor_cmd

        code = doctor_cmd(cluster, json_, say=say, member=member, level=level.value)
        if code:
            raise typer.Exit(code)
        return
    from hostctl.doctor import run
    from hostctl.doctor.options import DoctorOptions

    c = global_options(ctx, config, facts)
    code = run(DoctorOptions(config_path=c.config_path, facts_path=c.facts_path, level=level.value, as_json=json_,
                             strict=strict, log=log, bundle=typed_path(bundle)))
    if code:
        raise typer.Exit(code)
