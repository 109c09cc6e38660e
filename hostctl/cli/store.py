"""`hostctl store split`: per-rank expert-store files on the drives the plan assigns. Parsing only;
the work is in hostctl.provision.rankstores."""

from typing import Annotated

import typer

from hostctl.cli.options import ConfigOpt, FactsOpt, global_options

app = typer.Typer(help="Rank stores: per-rank expert-store files on the drives the plan assigns.",
                  no_args_is_help=True, rich_markup_mode=None)


@app.command("split")
def split(
    ctx: typer.Context,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show each copy to make; change nothing.")] = False,
    json_: Annotated[bool, typer.Option("--json", help="Print one hostctl.store-split/v1 document (every copy "
                                        "with its status and seconds) instead of text.")] = False,
    config: ConfigOpt = None,
    facts: FactsOpt = None,
) -> None:
    """Copy each rank's expert-store files to the drive the plan assigns, verified byte for byte.

    The originals stay in the shared store (the rollback); refused when the copy would land on
    the shared store's own filesystem. A re-run copies only what is missing or changed since.
    """
    import io
    import sys

    c = global_options(ctx, config, facts)
    c.refuse_snapshot("store split")
    from hostctl.cli.options import print_json
    from hostctl.provision.rankstores import split_rank_stores

    report = split_rank_stores(c.config(), dry_run=dry_run, out=io.StringIO() if json_ else sys.stdout)
    if json_:
        print_json(report.document())
    report.raise_for_error()
