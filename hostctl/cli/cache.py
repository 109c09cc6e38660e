"""`hostctl cache list|verify|prune`: the runtime's caches by generation. Parsing and printing only;
the work is in hostctl.cache.act (list, verify) and hostctl.cache.prune."""

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from hostctl.cli.options import global_options

app = typer.Typer(help="The runtime's caches by generation: planes, packs and rank stores, compile caches "
                       "(README \"cache\").", no_args_is_help=True, rich_markup_mode=None)

ConfigOpt = Annotated[Optional[Path], typer.Option("--config", "-c", dir_okay=False,
                                                   help="Host profile (TOML); as for every command.")]
FactsOpt = Annotated[Optional[Path], typer.Option("--facts", dir_okay=False, help="Refused: these commands read this host.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one hostctl.cache/v1 document instead of text.")]
PruneJsonOpt = Annotated[bool, typer.Option("--json", help="Print one hostctl.cache-prune/v1 document (the "
                                            "executor's report, as provision's) instead of text.")]


def _config(ctx: typer.Context, config: Path | None, facts: Path | None, command: str):
    c = global_options(ctx, config, facts)
    c.refuse_snapshot(command)
    return c.config()


@app.command("list")
def list_(ctx: typer.Context, json_: JsonOpt = False, config: ConfigOpt = None, facts: FactsOpt = None) -> None:
    """Every generation of planes, packs (with their rank-store copies) and compile cache on the
    profile's drives: its key, size, last use, whether it is complete and whether the plan uses it."""
    from hostctl.cache import act

    v = act.view(_config(ctx, config, facts, "cache list"))
    sys.stdout.write(act.dump(v.doc("list")) if json_ else act.list_text(v))


@app.command("verify")
def verify(ctx: typer.Context, json_: JsonOpt = False, config: ConfigOpt = None, facts: FactsOpt = None) -> None:
    """Check each generation against the runtime's completeness markers, and the rank-store copies
    of the packs the plan uses byte for byte against their sources.

    Exits 1 when a generation the plan uses is incomplete or a copy differs.
    """
    from hostctl.cache import act
    from hostctl.errors import EXIT_FAILED

    report = act.verify(_config(ctx, config, facts, "cache verify"), sys.stderr)
    failing = report.failing()
    if json_:
        sys.stdout.write(act.dump(report.view.doc("verify", ok=not failing, copies=report.copy_results,
                                                  failing=[g.id for g in failing])))
    else:
        sys.stdout.write(report.text())
    if failing:
        raise typer.Exit(EXIT_FAILED)


@app.command("prune")
def prune(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would be removed and the space each frees.")] = False,
    yes: Annotated[bool, typer.Option("--yes", help="Consent without being asked (read --dry-run first).")] = False,
    json_: PruneJsonOpt = False,
    config: ConfigOpt = None,
    facts: FactsOpt = None,
) -> None:
    """Remove the cache generations the current plan does not use; never one it uses or one hostctl
    cannot tell. Refused (exit 3) while the runtime runs, and without --yes or `prune` typed at a
    terminal. --json prints one hostctl.cache-prune/v1 document (the executor's report)."""
    import io

    from hostctl.cache.prune import prune as run_prune
    from hostctl.cli.options import print_json

    report = run_prune(_config(ctx, config, facts, "cache prune"), dry_run=dry_run, yes=yes,
                       out=io.StringIO() if json_ else sys.stdout)
    if json_:
        print_json(report.document())
    report.raise_for_error()
