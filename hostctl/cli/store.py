"""`hostctl store split`: per-rank expert-store files on the drives the plan assigns. Parsing only;
the work is in hostctl.provision.rankstores."""

from __future__ import annotations

import typer

from hostctl.cli.options import ConfigOpt, FactsOpt, global_options

app = typer.Typer(help="Rank stores: per-rank expert-store files on the drives the plan assigns.",
                  no_args_is_help=True, rich_markup_mode=None)


@app.command("split")
def split(ctx: typer.Context, config: ConfigOpt = None, facts: FactsOpt = None) -> None:
    """Copy each rank's expert-store files to the drive the plan assigns, verified byte for byte.

    The originals stay in the shared store (the rollback); refused when the copy would land on
    the shared store's own filesystem.
    """
    c = global_options(ctx, config, facts)
    c.refuse_snapshot("store split")
    from hostctl.provision.rankstores import split_rank_stores

    split_rank_stores(c.config())
