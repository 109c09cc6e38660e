"""The `hostctl` command line: parse, call, present. Decisions live in plan/, host reads in
facts/, changes in provision/ and service/.

Results go to stdout (with --json: exactly one versioned JSON document); progress, warnings
and errors go to stderr. Exit codes: 0 ok, 1 failed, 2 bad input, 3 refused for safety, 70 an
internal error (a bug), 130 / 143 interrupted by SIGINT / SIGTERM.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from hostctl import __version__
from hostctl.errors import (
    EXIT_FAILED,
    EXIT_SIGINT,
    EXIT_SOFTWARE,
    FailedError,
    HostctlError,
    InputError,
    NoProfileError,
)

if TYPE_CHECKING:
    from hostctl.config import Config
    from hostctl.facts.model import HostFacts
    from hostctl.service.identity import RuntimeIdentity

# Start-up cost (benchmarks/doctor_quick.py): a command imports what it uses, inside its function.
# pydantic (it validates a profile the config cache does not remember), the facts, rich, the docker
# SDK, httpx, jinja2 and YAML are not imported to parse the arguments or print --help;
# tests/unit/test_cli_imports.py keeps the heavy optional modules out of --help, plan and status.


class _Console:
    """stdout or stderr for the commands: plain text (markup=False, the CLI's every own line) is
    written straight to the stream; anything else goes to a rich Console, made on first use
    (importing rich costs ~25 ms, a tenth of a read-only command's budget). The stream is looked
    up at each call, as rich does, so hostctl.secrets' redacting wrapper sees every line."""

    # Rich drops these control characters from printed text (rich.control.strip_control_codes).
    _STRIP = dict.fromkeys((7, 8, 11, 12, 13))

    def __init__(self, stderr: bool):
        self._stderr = stderr
        self._console = None

    def _rich(self):
        if self._console is None:
            from rich.console import Console

            self._console = Console(stderr=self._stderr, highlight=False, soft_wrap=True)
        return self._console

    def print(self, *objects, sep: str = " ", end: str = "\n", markup: bool | None = None, **kwargs) -> None:
        plain = markup is False and not kwargs.keys() - {"highlight"} and not kwargs.get("highlight")
        if plain and all(isinstance(o, str) for o in objects):
            stream = sys.stderr if self._stderr else sys.stdout
            stream.write(sep.join(objects).translate(self._STRIP).expandtabs(8) + end)
            return
        self._rich().print(*objects, sep=sep, end=end, markup=markup, **kwargs)

    def __getattr__(self, name: str):
        return getattr(self._rich(), name)


out = _Console(stderr=False)
err = _Console(stderr=True)

app = typer.Typer(
    name="hostctl",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help: it reads the same in a terminal, a pipe and a man page.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
store_app = typer.Typer(help="Rank stores: per-rank expert-store files on the drives the plan assigns.",
                        no_args_is_help=True, rich_markup_mode=None)
app.add_typer(store_app, name="store")
from hostctl.cache.cli import app as cache_app  # noqa: E402  (README "cache")
from hostctl.model.cli import app as model_app  # noqa: E402  (README "model")
app.add_typer(model_app, name="model")
app.add_typer(cache_app, name="cache")

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


# Choices typer checks before a command runs: a wrong value exits 2 and lists the valid ones.
# Each mirrors its owner's tuple (hostctl.provision.parts.ORDER, hostctl.doctor.LEVELS), which
# the CLI does not import to parse arguments; tests/unit/test_cli_thin.py keeps them equal.
class ProvisionPart(str, Enum):
    storage = "storage"
    system = "system"
    gpu = "gpu"


class DoctorLevel(str, Enum):
    quick = "quick"
    full = "full"


class GlobalOptions:
    """Global options, which may be given before or after the command name."""

    def __init__(self, config: Path | None, facts: Path | None):
        self.config_path = config
        self.facts_path = facts

    def merge(self, config: Path | None, facts: Path | None) -> "GlobalOptions":
        return GlobalOptions(config or self.config_path, facts or self.facts_path)

    def config(self) -> Config:
        from hostctl import paths

        if self.config_path is None and paths.searched_profile() is None:
            raise paths.no_profile_error()  # as load_config would, without importing the config models
        from hostctl.config import load_config

        cfg = load_config(self.config_path)
        for w in cfg.warnings:
            err.print(f"warning: {w}", markup=False)
        return cfg

    def identity(self) -> RuntimeIdentity:
        """The runtime's names, for the commands that need nothing else of the profile."""
        from hostctl.service import identity

        return identity.of_profile(self.config_path, self.config, lambda w: err.print(f"warning: {w}", markup=False))

    def facts(self, config: Config | None = None) -> HostFacts:
        from hostctl.facts import collect, load_snapshot

        if self.facts_path is not None:
            return load_snapshot(self.facts_path)
        if config is None:
            return collect()
        from hostctl.plan import alias_requests
        from hostctl.plan.requests import fact_requests

        # every directory a provision part decides on, so `facts --json` (read by `verify --host`
        # on another machine) holds what the parts' decisions need
        return collect(fact_requests(config), alias_paths=alias_requests(config))

    def refuse_snapshot(self, command: str) -> None:
        if self.facts_path is not None:
            raise InputError(
                f"--facts cannot be used with `{command}`: it acts on this host, and a snapshot describes another",
                fix=f"run `hostctl {command}` without --facts on the host itself",
            )


def _ctx(ctx: typer.Context, config: Path | None = None, facts: Path | None = None) -> GlobalOptions:
    base: GlobalOptions = ctx.find_root().obj or GlobalOptions(None, None)
    return base.merge(config, facts)


def typed_path(path: str | Path | None) -> Path | None:
    """A path the user typed (--out, --bundle), made absolute with its `..` taken lexically, as the
    shell's own `cd` would. hostctl.safefs refuses `..` in what it walks, because a `..` in a name
    built from outside input (a suite id) climbs out of its folder; the user's own typing is theirs."""
    return None if path is None else Path(os.path.abspath(path))


def _print_json(doc: dict) -> None:
    sys.stdout.write(json.dumps(doc, indent=2) + "\n")


def _version(value: bool) -> None:
    if value:
        out.print(f"hostctl {__version__}", markup=False)
        raise typer.Exit()


@app.callback()
def root(
    ctx: typer.Context,
    config: ConfigOpt = None,
    facts: FactsOpt = None,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Make a Linux GPU workstation a reliable local inference host for huge MoE models (vLLM-MoET).

    facts -> plan -> render/provision -> up, with `doctor` to explain what is wrong.
    --config and --facts may also be given after the command name.
    """
    ctx.obj = GlobalOptions(config, facts)


@app.command()
def facts(ctx: typer.Context, json_: JsonOpt = False, config: ConfigOpt = None, facts: FactsOpt = None) -> None:
    """Probe the host (GPUs, disks, memory, NUMA, IOMMU, Docker) and print what was found.

    With a profile (--config, ./hostctl.toml or /etc/hostctl/hostctl.toml) the directories
    it uses are described too. Whatever is absent is stated with its reason.
    """
    from hostctl.present import facts_text

    c = _ctx(ctx, config, facts)
    cfg = None
    if c.facts_path is None:
        try:
            cfg = c.config()
        except NoProfileError:
            pass  # facts describe the host without a profile
    snapshot = c.facts(cfg)
    if json_:
        sys.stdout.write(snapshot.to_json())
    else:
        out.print(facts_text(snapshot), end="", markup=False)


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

    c = _ctx(ctx, None, facts)
    if c.config_path is not None:
        raise InputError("--config names a profile to read; `hostctl init` writes one", fix="use --out PATH")
    if out_path == "-" and json_:
        raise InputError("--out - prints the profile, --json the choices: pick one")
    options = InitOptions(drives=parse_drives(drives), power_limit_w=power_limit,
                          model_dir=os.path.abspath(model_dir) if model_dir else None)
    result = init_profile(facts_path=c.facts_path, options=options, recipe_ref=recipe, force=force,
                          out=None if out_path == "-" else Path(out_path), box_path=Path(box) if box else None)
    if json_:
        _print_json(result.document())
    elif result.text is not None and result.out is None:
        sys.stdout.write(result.text)
    else:
        out.print(summary_text(result), end="", markup=False)
    for w in result.proposal.warnings + [f"hostctl plan will report: {e}" for e in result.proposal.plan_errors]:
        err.print(f"warning: {w}", markup=False)
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

        code = plan_cmd(cluster, member, json_, _ctx(ctx, config, facts).facts_path)
        if code:
            raise typer.Exit(code)
        return
    from hostctl.plan import build_plan
    from hostctl.present import plan_text

    from hostctl.doctor.redact import redact

    c = _ctx(ctx, config, facts)
    cfg = c.config()
    result = build_plan(cfg, c.facts(cfg))
    # The plan carries the recipe's env values: secrets are hidden by name and by value.
    if json_:
        sys.stdout.write(redact(result.to_json()))
    else:
        out.print(redact(plan_text(result)), end="", markup=False)
    if result.errors:
        raise typer.Exit(EXIT_FAILED)


@app.command()
def render(
    ctx: typer.Context,
    out_dir: Annotated[Optional[Path], typer.Option("--out", help="Directory to write into. Default: the profile's "
                                                    "runtime.project_dir (/var/lib/hostctl/project).",
                                                    file_okay=False)] = None,
    hostctl_bin: Annotated[str, typer.Option("--hostctl-bin", help="hostctl path the systemd units call.")]
    = "/usr/local/bin/hostctl",
    config: ConfigOpt = None,
    facts: FactsOpt = None,
    cluster: ClusterOpt = None,
    member: MemberOpt = None,
) -> None:
    """Write compose.yaml, runtime.env and the systemd units for this host and recipe.

    With --cluster: one Compose project per host (or only --member's), in each member's state
    directory or under --out DIR/<member>, each with its unit hostctl-<cluster>-<member>.service.

    Nothing is written when the plan has errors. The project is written to a temporary
    directory beside DIR and checked there (each file re-read against its template and the
    plan; `docker compose config` when Compose is installed); only a project that passes
    replaces DIR. runtime.env (it may hold the recipe's secrets) is mode 0600.
    """
    if cluster is not None:
        from hostctl.cluster.commands import render_cmd

        facts_path = _ctx(ctx, config, facts).facts_path
        for path in render_cmd(cluster, member, typed_path(out_dir), facts_path,
                               say=lambda m: err.print(m, markup=False), hostctl_bin=hostctl_bin):
            out.print(str(path), markup=False)
        if member is not None and facts_path is None:  # this host's member: its unit runs here
            _warn_boot_code(hostctl_bin)
        return
    from hostctl.plan import build_plan
    from hostctl.service.compose import compose_available
    from hostctl.service.render import compose_checked, render_files, write_project

    c = _ctx(ctx, config, facts)
    cfg = c.config()
    result = build_plan(cfg, c.facts(cfg))
    if result.errors:
        raise FailedError(
            "the plan has errors; nothing was rendered",
            details=[f"[{p.area}] {p.message}" + (f" (fix: {p.fix})" if p.fix else "") for p in result.errors],
            fix="fix the problems above (`hostctl plan` explains each decision)",
        )
    target = typed_path(out_dir) or Path(cfg.profile.runtime.project_dir)
    files = render_files(result, hostctl_bin=hostctl_bin)
    probe = compose_available()
    written = write_project(files, target, check=compose_checked if probe.ok else None)
    for path in written:
        out.print(str(path), markup=False)
    err.print("checked with docker compose config" if probe.ok
              else f"not checked with docker compose config: it is not available ({probe.why()})", markup=False)
    for p in result.problems:
        err.print(f"warning: [{p.area}] {p.message}", markup=False)
    if c.facts_path is None:  # units for this host: the hostctl they call is this host's
        _warn_boot_code(hostctl_bin)


def _warn_boot_code(hostctl_bin: str) -> None:
    from hostctl.facts.executable import read_exec_chain
    from hostctl.provision.boot_code import render_warning

    warning = render_warning(read_exec_chain(hostctl_bin))
    if warning:
        err.print(warning, markup=False)


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

    c = _ctx(ctx, config, facts)
    c.refuse_snapshot("provision")
    part = only.value if only is not None else None
    if boot and part != "gpu":
        raise InputError("--boot goes with --only gpu (it is what hostctl-power.service runs)")
    cfg = c.config()
    report = run_parts(cfg, only=part, dry_run=dry_run, yes=yes, erase=tuple(erase or ()), boot=boot,
                       out=io.StringIO() if json_ else sys.stdout)
    if json_:
        _print_json(report.document())
    report.raise_for_error()


@store_app.command("split")
def store_split(ctx: typer.Context, config: ConfigOpt = None, facts: FactsOpt = None) -> None:
    """Copy each rank's expert-store files to the drive the plan assigns, verified byte for byte.

    The originals stay in the shared store (the rollback); refused when the copy would land on
    the shared store's own filesystem.
    """
    c = _ctx(ctx, config, facts)
    c.refuse_snapshot("store split")
    from hostctl.provision.rankstores import split_rank_stores

    split_rank_stores(c.config())


@app.command()
def up(
    ctx: typer.Context,
    timeout: Annotated[Optional[int], typer.Option("--timeout", help="Seconds to wait for ready (default: the recipe's load_timeout_s).")] = None,
    keep_on_failure: Annotated[bool, typer.Option("--keep-on-failure", help="Leave a failed runtime running to inspect it.")] = False,
    foreground: Annotated[bool, typer.Option("--foreground", help="After ready, stay and supervise the runtime (what the systemd unit runs; README \"Supervision\").")] = False,
    config: ConfigOpt = None,
    facts: FactsOpt = None,
    cluster: ClusterOpt = None,
    member: MemberOpt = None,
) -> None:
    """Start the runtime and exit 0 only when it is ready and the smoke tests pass.

    With --cluster and --member: start that host's part of the cluster, in the cluster's order
    (--foreground: a replica only).

    Preflight (engine, plan, image, store directories, port) -> render -> docker compose up
    -> watch (engine events, log phases, /health, /v1/models) -> smoke suite. Prints the
    endpoint on stdout. On failure: the cause, the fix and the log lines; the project is
    taken down unless --keep-on-failure; exit 1.

    With --foreground: tell systemd READY=1 after the gate, then watch the runtime; a death or
    a hang ends it with exit 1 naming the cause (the unit restarts it), SIGTERM takes the runtime
    down and exits 0.
    """
    from hostctl.service import lifecycle

    c = _ctx(ctx, config, facts)
    c.refuse_snapshot("up")
    if timeout is not None and timeout < 1:
        raise InputError(f"--timeout: expected a positive number of seconds, got {timeout}")
    if cluster is not None:
        from hostctl.cluster import commands, run

        raise typer.Exit(run.up(cluster, commands.need_member(member, "up"), timeout=timeout,
                                keep_on_failure=keep_on_failure, say=lambda m: err.print(m, markup=False),
                                hostctl_bin=_hostctl_bin(), print_endpoint=lambda e: out.print(e, markup=False),
                                foreground=foreground))
    cfg, plan_, host = _service_plan(c)
    if foreground:
        from hostctl.service import supervise

        raise typer.Exit(supervise.foreground(cfg, plan_, host, timeout=timeout, keep_on_failure=keep_on_failure,
                                              say=lambda m: err.print(m, markup=False), hostctl_bin=_hostctl_bin(),
                                              print_endpoint=lambda e: out.print(e, markup=False)))
    outcome = lifecycle.up(cfg, plan_, host, timeout=timeout, keep_on_failure=keep_on_failure,
                           say=lambda m: err.print(m, markup=False), hostctl_bin=_hostctl_bin())
    if not outcome.ready:
        raise lifecycle.failure_error(outcome)
    t = outcome.timings
    err.print(f"ready in {t.get('total_s', 0):.1f} s (smoke {t.get('smoke_s', 0):.1f} s)", markup=False)
    out.print(outcome.endpoint, markup=False)


def _service_plan(c: GlobalOptions):
    """Config, plan and facts of this host for the lifecycle commands (facts probed live)."""
    from hostctl.plan import build_plan

    cfg = c.config()
    host = c.facts(cfg)
    return cfg, build_plan(cfg, host), host


def _hostctl_bin() -> str:
    from hostctl.paths import hostctl_for_units

    return hostctl_for_units()


def _lifecycle_plan(c: GlobalOptions):
    cfg, plan_, _host = _service_plan(c)
    return cfg, plan_


@app.command()
def down(ctx: typer.Context, config: ConfigOpt = None, facts: FactsOpt = None, cluster: ClusterOpt = None,
         member: MemberOpt = None) -> None:
    """Stop and remove the runtime; caches stay. Safe to run when nothing is running.

    With --cluster: --member's part, or without --member every member on this machine, in order.
    """
    from hostctl.service import lifecycle

    c = _ctx(ctx, config, facts)
    c.refuse_snapshot("down")
    if cluster is not None:
        from hostctl.cluster import run

        for line in run.down(cluster, member, say=lambda m: err.print(m, markup=False)):
            out.print(line, markup=False)
        return
    what = lifecycle.down(c.config(), say=lambda m: err.print(m, markup=False))
    out.print(f"down: {what}", markup=False)


@app.command()
def status(ctx: typer.Context, json_: JsonOpt = False, config: ConfigOpt = None, facts: FactsOpt = None,
           cluster: ClusterOpt = None, member: MemberOpt = None) -> None:
    """State, health, endpoint, uptime and the last smoke result of the runtime.

    Exits 0 when the runtime is running and /health answers, 1 otherwise. Reads the profile and
    the engine's view of its container, nothing else of the host.

    With --cluster: each member this machine reaches (--member: that one), and the router's
    backends, healthy or not (hostctl.cluster-status/v1); 0 when all of them serve.
    """
    if cluster is not None:
        from hostctl.cluster.status import status as cluster_status, text

        doc = cluster_status(cluster, member)
        if json_:
            _print_json(doc)
        else:
            out.print(text(doc), end="", markup=False)
        raise typer.Exit(0 if doc["ok"] else EXIT_FAILED)
    from hostctl.service.status import status as read_status, status_text

    c = _ctx(ctx, config, facts)
    c.refuse_snapshot("status")
    doc = read_status(c.identity())
    if json_:
        _print_json(doc)
    else:
        out.print(status_text(doc), end="", markup=False)
    if not (doc["state"] == "running" and doc["healthy"]):
        raise typer.Exit(EXIT_FAILED)


@app.command()
def logs(
    ctx: typer.Context,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new lines.")] = False,
    config: ConfigOpt = None,
    facts: FactsOpt = None,
) -> None:
    """The runtime's logs."""
    from hostctl.service import lifecycle

    c = _ctx(ctx, config, facts)
    c.refuse_snapshot("logs")
    name = c.identity().container

    from hostctl.interrupt import Interrupted
    from hostctl.secrets import follow_writer

    try:
        # whole lines only while following: a secret docker split across two chunks is redacted whole
        lifecycle.stream_logs(name, follow, follow_writer(sys.stdout.buffer))
    except (KeyboardInterrupt, Interrupted):
        pass  # Ctrl-C is how `logs -f` is meant to end


@app.command()
def smoke(
    ctx: typer.Context,
    url: Annotated[Optional[str], typer.Option("--url", help="Endpoint to test (default: the profile's API address).")] = None,
    json_: JsonOpt = False,
    config: ConfigOpt = None,
    facts: FactsOpt = None,
) -> None:
    """Run the recipe's smoke suite against the running endpoint (loopback only).

    Exits 0 when every test returns the expected answer, 1 otherwise; the result is kept for
    `hostctl status`.
    """
    from hostctl.service import identity, saved
    from hostctl.service.smoke import check_loopback, run_suite

    c = _ctx(ctx, config, facts)
    cfg = c.config()
    rt = identity.of_config(cfg)
    target = check_loopback(url) if url else rt.endpoint
    report = run_suite(target, cfg.recipe, api_key_env=rt.api_key_env)
    try:
        saved.save_smoke(report.to_dict())
    except OSError as exc:
        err.print(f"warning: smoke result not saved: {exc}", markup=False)
    if json_:
        _print_json(report.to_dict())
    else:
        out.print(report.text(), end="", markup=False)
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)


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
    from hostctl.bench import cli_support

    c = _ctx(ctx, config, facts)
    c.refuse_snapshot("bench")
    cfg, plan_ = _lifecycle_plan(c)
    code = cli_support.bench(cfg, plan_, suite, out_dir=typed_path(out_dir), json_=json_, out=out, err=err)
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
    from hostctl.tune import cli_support

    c = _ctx(ctx, config, facts)
    if not dry_run:
        c.refuse_snapshot("tune")
    code = cli_support.tune(c.config_path, recipe, dry_run=dry_run, json_=json_, out_dir=typed_path(out_dir), write=write,
                            facts_path=c.facts_path, out=out, err=err, hostctl_bin=_hostctl_bin())
    if code:
        raise typer.Exit(code)


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

    c = _ctx(ctx, config, facts)
    c.refuse_snapshot("verify")
    report = run_verify(c.config(), host=host, only=only, ssh_config=ssh_config)
    if json_:
        _print_json(report.document())
    else:
        out.print(report.text(), end="", markup=False)
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
    from hostctl.doctor import DoctorOptions, run

    if cluster is not None:
        from hostctl.cluster.commands import doctor_cmd

        code = doctor_cmd(cluster, json_, say=lambda m: err.print(m, markup=False), member=member, level=level.value)
        if code:
            raise typer.Exit(code)
        return
    c = _ctx(ctx, config, facts)
    code = run(DoctorOptions(config_path=c.config_path, facts_path=c.facts_path, level=level.value, json=json_, strict=strict,
                       log=log, bundle=typed_path(bundle)))
    if code:
        raise typer.Exit(code)


BUG_HINT = ("this is a bug in hostctl, not a problem with your input: please report it with this line and the "
            "command you ran (HOSTCTL_DEBUG=1 prints the traceback)")


_COMMANDS: dict[str | None, object] = {}
# The root's options that take a value (root() above): what follows them is not a command name.
_ROOT_VALUE_OPTIONS = ("--config", "-c", "--facts")


def _command_name(argv: list[str]) -> str | None:
    """The command argv names after the root's own options; None when it names none."""
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            return argv[i + 1] if i + 1 < len(argv) else None
        if not arg.startswith("-"):
            return arg
        i += 2 if arg in _ROOT_VALUE_OPTIONS else 1
    return None


def _click_command(argv: list[str] | None = None):
    """The click command typer builds from `app` for this argv: only the command it names (typer
    reads every command's signature to build the whole app, ~20-50 ms that each command would pay
    before starting); the whole app for --help, no command or a name that is none of them (so click
    lists the commands or suggests one). Built once per process and name: in-process callers such
    as the hostile-input generator would pay it per case."""
    args = sys.argv[1:] if argv is None else argv
    name = _command_name(args)
    commands = [c for c in app.registered_commands
                if (c.name or typer.main.get_command_name(c.callback.__name__)) == name]
    groups = [g for g in app.registered_groups if g.name == name]
    key = name if commands or groups else None
    if key not in _COMMANDS:
        target = app
        if key is not None:
            import copy

            target = copy.copy(app)  # the root callback and settings, with this one command
            target.registered_commands, target.registered_groups = commands, groups
        _COMMANDS[key] = typer.main.get_command(target)
    return _COMMANDS[key]


def _sigint(signum, frame) -> None:
    from hostctl.interrupt import Interrupted

    raise Interrupted(signum)


def _run(argv: list[str] | None) -> int:
    import signal
    import threading

    from hostctl.interrupt import Interrupted

    # Ctrl-C anywhere exits 130 (click would turn KeyboardInterrupt into "Aborted!" and 1);
    # `up` installs its own handler for SIGINT and SIGTERM, to take down what it started.
    previous = signal.signal(signal.SIGINT, _sigint) if threading.current_thread() is threading.main_thread() else None
    try:
        _click_command(argv)(args=argv, prog_name="hostctl")
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_FAILED)
    except HostctlError as exc:
        err.print(exc.render(), markup=False)
        return exc.exit_code
    except Interrupted as exc:
        err.print(f"interrupted by {exc.name}", markup=False)
        return exc.exit_code
    except KeyboardInterrupt:
        err.print("interrupted by SIGINT", markup=False)
        return EXIT_SIGINT
    except Exception as exc:  # a bug: one line and exit 70, so a script can tell it from a refusal (2)
        if os.environ.get("HOSTCTL_DEBUG"):
            traceback.print_exc()
        text = " ".join(str(exc).split())
        err.print(f"hostctl: internal error: {type(exc).__name__}: {text[:300]}", markup=False)
        err.print(BUG_HINT, markup=False)
        return EXIT_SOFTWARE
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def main(argv: list[str] | None = None) -> int:
    """Console entry point: maps errors to exit codes (README "Exit codes"); an unexpected
    exception is one line and exit 70, never a traceback with exit 1.

    Typer's standalone mode already exits 2 on usage errors (bad flags) and 1 on an abort.
    stdout and stderr pass through hostctl.secrets for the whole command: every value known to be
    secret (the environment's at start, the config's once loaded) is hidden in everything printed.
    """
    from hostctl import noplugins, secrets

    noplugins.disable()  # no pydantic plugin, and no scan of the installed packages for one
    secrets.remember(secrets.from_environment())
    real_out, real_err = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = secrets.RedactingStream(real_out), secrets.RedactingStream(real_err)
    try:
        code = _run(argv)
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                getattr(stream, "drain", stream.flush)()  # the partial line each one still holds, too
            except (OSError, ValueError):
                pass
        sys.stdout, sys.stderr = real_out, real_err
    if argv is None:
        sys.exit(code)
    return code


if __name__ == "__main__":
    main()
