"""`hostctl model pull|verify`: the checkpoint the recipe names. Parsing and printing only; the work
is in hostctl.model.pull and hostctl.model.verify."""

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from hostctl.cli.options import global_options

app = typer.Typer(help="The checkpoint the recipe names: pulled at its pinned commit and checked (README \"model\").",
                  no_args_is_help=True, rich_markup_mode=None)

ConfigOpt = Annotated[Optional[Path], typer.Option("--config", "-c", dir_okay=False,
                                                   help="Host profile (TOML); as for every command.")]
FactsOpt = Annotated[Optional[Path], typer.Option("--facts", dir_okay=False, help="Refused: these commands read this host.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one hostctl.model/v1 document instead of text.")]


def _context(ctx: typer.Context, config: Path | None, facts: Path | None, command: str):
    c = global_options(ctx, config, facts)
    c.refuse_snapshot(command)
    return c


@app.command("pull")
def pull(
    ctx: typer.Context,
    revision: Annotated[Optional[str], typer.Option("--revision", metavar="SHA",
                                                    help="Pin this commit (40 hex) instead of the recipe's.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Ask the hub what would be downloaded and whether it "
                                          "fits; write nothing.")] = False,
    json_: JsonOpt = False,
    config: ConfigOpt = None,
    facts: FactsOpt = None,
) -> None:
    """Download the recipe's model at its pinned commit into runtime.model_dir, checking every file.

    A branch or tag name is refused (exit 2) unless --revision pins a commit. The space needed is
    checked against the model directory's filesystem before the first byte (exit 1 when short).
    Resumes an interrupted pull. The token comes from HF_TOKEN or the hub's token file and is
    never printed or stored.
    """
    from hostctl.model.pull import run_pull

    c = _context(ctx, config, facts, "model pull")
    report = run_pull(c.config(), revision=revision, dry_run=dry_run, err=sys.stderr)
    if json_:
        sys.stdout.write(json.dumps(report.to_dict(), indent=2) + "\n")
    else:
        sys.stdout.write(report.text())


@app.command("verify")
def verify(
    ctx: typer.Context,
    quick: Annotated[bool, typer.Option("--quick", help="Presence and sizes only; without it every hash is "
                                        "recomputed too.")] = False,
    json_: JsonOpt = False,
    config: ConfigOpt = None,
    facts: FactsOpt = None,
) -> None:
    """Check the checkpoint on this host offline: config.json, every indexed shard with the manifest's
    size, the pinned revision, and (without --quick) every file's sha256.

    Exits 0 when it passes, 1 naming the missing or corrupt files.
    """
    from hostctl.errors import EXIT_FAILED
    from hostctl.model.pull import MODEL_SCHEMA
    from hostctl.model.resolve import load_ref
    from hostctl.model.verify import run_verify, verdict_text

    c = _context(ctx, config, facts, "model verify")
    ref = load_ref(c.config())
    level = "quick" if quick else "full"
    if ref.kind != "image" and not ref.model_dir:
        from hostctl.errors import InputError

        raise InputError("runtime.model_dir is not set: hostctl does not know where the checkpoint is",
                         fix="set runtime.model_dir in the profile (`hostctl model pull` downloads into it)")
    if ref.kind == "image":
        doc = {"schema": MODEL_SCHEMA, "action": "verify", "ok": True, "level": level, "model": ref.to_dict(),
               "verdict": None, "note": ref.describe()}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n" if json_ else ref.describe() + "\n")
        return
    verdict = run_verify(ref, level, err=sys.stderr)
    if json_:
        doc = {"schema": MODEL_SCHEMA, "action": "verify", "ok": verdict.ok, "level": level, "model": ref.to_dict(),
               "verdict": verdict.to_dict()}
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(verdict_text(ref, verdict))
    if not verdict.ok:
        raise typer.Exit(EXIT_FAILED)
