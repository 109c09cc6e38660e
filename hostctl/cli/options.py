"""The options the commands share (--config, --facts, --json, --cluster, --member), GlobalOptions
that a command reads them through, and how a command prints: results on stdout, progress,
warnings and errors on stderr (`say`).

Only typer is imported here: a command imports what it uses inside its function, so parsing the
arguments and printing --help cost no more than typer itself.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from hostctl.errors import InputError

if TYPE_CHECKING:
    from hostctl.config import Config
    from hostctl.facts.records import HostFacts
    from hostctl.service.identity import RuntimeIdentity

ConfigOpt = Annotated[
    Optional[Path],
    typer.Option("--config", "-c", help="Host profile (TOML). Default: ./hostctl.toml, then /etc/hostctl/hostctl.toml.",
                 dir_okay=False),
]
FactsOpt = Annotated[
    Optional[Path],
    typer.Option("--facts", help="Use this facts snapshot (from `hostctl facts --json`) instead of probing the host.",
                 dir_okay=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one versioned JSON document instead of text.")]
# More than one host (README "More than one host"): hostctl.cluster does the work.
ClusterOpt = Annotated[Optional[Path], typer.Option("--cluster", help="A cluster profile (cluster.toml): more than one "
                                                    "host (replicas behind a router, or one model across hosts).",
                                                    dir_okay=False)]
MemberOpt = Annotated[Optional[str], typer.Option("--member", help="With --cluster: which host of the cluster this is.")]


def say(message: str) -> None:
    """One line of progress, a warning or an error, on stderr (stdout holds only the result)."""
    print(message, file=sys.stderr)


def print_json(doc: dict) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def typed_path(path: str | Path | None) -> Path | None:
    """A path the user typed (--out, --bundle), made absolute with its `..` taken lexically, as the
    shell's own `cd` would. hostctl.safefs refuses `..` in what it walks, because a `..` in a name
    built from outside input (a suite id) climbs out of its folder; the user's own typing is theirs."""
    return None if path is None else Path(os.path.abspath(path))


class GlobalOptions:
    """Global options, which may be given before or after the command name."""

    def __init__(self, config: Path | None, facts: Path | None):
        self.config_path = config
        self.facts_path = facts

    def config(self) -> Config:
        from hostctl import paths

        if self.config_path is None and paths.searched_profile() is None:
            raise paths.no_profile_error()  # as load_config would, without importing the config models
        from hostctl.config import load_config

        cfg = load_config(self.config_path)
        for w in cfg.warnings:
            say(f"warning: {w}")
        return cfg

    def identity(self) -> RuntimeIdentity:
        """The runtime's names, for the commands that need nothing else of the profile."""
        from hostctl.service import identity

        return identity.of_config(self.config())

    def facts(self, config: Config | None = None, *, for_plan: bool = False) -> HostFacts:
        """The snapshot given, else this host's facts; for_plan: only what `plan` decides on."""
        from hostctl.facts import ALL_READS, PLAN_READS, collect, load_snapshot

        if self.facts_path is not None:
            return load_snapshot(self.facts_path)
        if config is None:
            return collect()
        from hostctl.plan import alias_requests
        from hostctl.plan.requests import fact_requests

        # every directory a provision part decides on, so `facts --json` (read by `verify --host`
        # on another machine) holds what the parts' decisions need
        return collect(fact_requests(config), alias_paths=alias_requests(config),
                       reads=PLAN_READS if for_plan else ALL_READS)

    def refuse_snapshot(self, command: str) -> None:
        if self.facts_path is not None:
            raise InputError(
                f"--facts cannot be used with `{command}`: it acts on this host, and a snapshot describes another",
                fix=f"run `hostctl {command}` without --facts on the host itself",
            )


def global_options(ctx: typer.Context, config: Path | None = None, facts: Path | None = None) -> GlobalOptions:
    """The global options as given before the command name (the root's, in ctx.obj), overridden
    by those given after it."""
    root: GlobalOptions = ctx.find_root().obj or GlobalOptions(None, None)
    return GlobalOptions(config or root.config_path, facts or root.facts_path)
