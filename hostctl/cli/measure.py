"""`hostctl bench|tune`: measure the running service, and tune a recipe by booting it once per
combination. Parsing only; the work and its printing (rich: a progress bar on a terminal) are in
hostctl.bench.command and hostctl.tune.command."""

from pathlib import Path
from typing import Annotated, Optional

import typer

from hostctl.cli.options import ConfigOpt, FactsOpt, JsonOpt, global_options, typed_path

app = typer.Typer()


def _consoles():
    """stdout and stderr as rich consoles: plain text as given (no highlighting, no wrapping)."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=True), Console(stderr=True, highlight=False, soft_wrap=True)


@app.command()
def bench(
    ctx: typer.Context,
    suite: Annotated[str, typer.Option("--suite", help="quick, standard, qualify, or the PATH of a suite file "
                                       "(vLLM-MoET's bench/suites format).")] = "quick",
    json_: JsonOpt = False,
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="Directory for the result file. Default: "
                                                    "/var/lib/hostctl/bench.", file_okay=False)] = None,
    config: ConfigOpt = None,
    facts: FactsOpt = None,
) -> None:
    """Measure the running service with a bench suite; write one hostctl.bench/v1 result.

    Needs the service `hostctl up` declared ready (exit 1 otherwise). Probes that do not fit
    the served context, or need what hostctl does not have, are kept as skipped with the
    reason. `--suite qualify` runs the context ladder and stores its verdict for `status` and
    `doctor`. Exits 0 when every probe that ran passed, 1 otherwise, 130/143 when interrupted.
    """
    from hostctl.bench import command
    from hostctl.plan import build_plan

    c = global_options(ctx, config, facts)
    c.refuse_snapshot("bench")
    cfg = c.config()
    plan = build_plan(cfg, c.facts(cfg))
    out, err = _consoles()
    code = command.bench(cfg, plan, suite, out_dir=typed_path(out_dir), json_=json_, out=out, err=err)
    if code:
        raise typer.Exit(code)


@app.command()
def tune(
    ctx: typer.Context,
    recipe: Annotated[Optional[str], typer.Option("--recipe", help="Recipe to tune (bundled name or path). Default: "
                                                  "the profile's.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List the trials and boots; start nothing.")] = False,
    json_: JsonOpt = False,
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="Directory for the results. Default: "
                                                    "/var/lib/hostctl/tune/<time>-<recipe>.", file_okay=False)] = None,
    write: Annotated[bool, typer.Option("--write", help="Also write the tuned recipe next to the results "
                                        "(the winner is never applied).")] = False,
    config: ConfigOpt = None,
    facts: FactsOpt = None,
) -> None:
    """Run the recipe's tuning block: one boot per combination of its restart axes.

    Each boot goes through `up`'s lifecycle (preflight, gate, diagnosis, nothing left running);
    a trial that fails is recorded with its diagnosis and the sweep goes on. Prints the table of
    trials, the winner and the recipe diff; writes a PNG chart when matplotlib is installed
    (`pip install 'hostctl[charts]'`). The service that was up before is brought back as it was.
    """
    from hostctl.paths import hostctl_for_units
    from hostctl.tune import command

    c = global_options(ctx, config, facts)
    if not dry_run:
        c.refuse_snapshot("tune")
    out, err = _consoles()
    code = command.tune(c.config_path, recipe, dry_run=dry_run, json_=json_, out_dir=typed_path(out_dir), write=write,
                            facts_path=c.facts_path, out=out, err=err, hostctl_bin=hostctl_for_units())
    if code:
        raise typer.Exit(code)
