"""`hostctl up|down|status|logs|smoke`: the runtime's lifecycle. Parsing and printing only; the work
is in hostctl.service (and hostctl.cluster with --cluster), imported by each body."""

import sys
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
)
from hostctl.errors import EXIT_FAILED, InputError

app = typer.Typer()


@app.command()
def up(
    ctx: typer.Context,
    timeout: Annotated[Optional[int], typer.Option("--timeout", help="Seconds to wait for ready (default: the recipe's load_timeout_s).")] = None,
    keep_on_failure: Annotated[bool, typer.Option("--keep-on-failure", help="Leave a failed runtime running to inspect it.")] = False,
    foreground: Annotated[bool, typer.Option("--foreground", help="After ready, stay and supervise the runtime (what the systemd unit runs; README \"Supervision\").")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the project files that would change (diffs) and the compose command; write and start nothing (no preflight).")] = False,
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
    from hostctl.paths import hostctl_for_units
    from hostctl.service import lifecycle

    c = global_options(ctx, config, facts)
    c.refuse_snapshot("up")
    if timeout is not None and timeout < 1:
        raise InputError(f"--timeout: expected a positive number of seconds, got {timeout}")
    if dry_run and (foreground or cluster is not None):
        raise InputError("--dry-run cannot be combined with --foreground or --cluster")
    if cluster is not None:
        from hostctl.cluster import commands, run

        raise typer.Exit(run.up(cluster, commands.need_member(member, "up"), timeout=timeout,
                                keep_on_failure=keep_on_failure, say=say, hostctl_bin=hostctl_for_units(),
                                print_endpoint=print, foreground=foreground))
    from hostctl.plan import build_plan

    cfg = c.config()
    host = c.facts(cfg)
    plan = build_plan(cfg, host)
    if dry_run:
        lifecycle.preview(cfg, plan, say=say, hostctl_bin=hostctl_for_units())
        return
    if foreground:
        from hostctl.provision.power_watch import PowerWatch
        from hostctl.service import supervise

        raise typer.Exit(supervise.foreground(cfg, plan, host, timeout=timeout, keep_on_failure=keep_on_failure,
                                              say=say, hostctl_bin=hostctl_for_units(), print_endpoint=print,
                                              power=PowerWatch(cfg, plan.power.gpus, say)))
    outcome = lifecycle.up(cfg, plan, host, timeout=timeout, keep_on_failure=keep_on_failure, say=say,
                           hostctl_bin=hostctl_for_units())
    if not outcome.ready:
        raise lifecycle.failure_error(outcome)
    t = outcome.timings
    say(f"ready in {t.get('total_s', 0):.1f} s (smoke {t.get('smoke_s', 0):.1f} s)")
    print(outcome.endpoint)


@app.command()
def down(ctx: typer.Context, config: ConfigOpt = None, facts: FactsOpt = None, cluster: ClusterOpt = None,
         member: MemberOpt = None) -> None:
    """Stop and remove the runtime; caches stay. Safe to run when nothing is running.

    With --cluster: --member's part, or without --member every member on this machine, in order.
    """
    from hostctl.service import lifecycle

    c = global_options(ctx, config, facts)
    c.refuse_snapshot("down")
    if cluster is not None:
        from hostctl.cluster import run

        for line in run.down(cluster, member, say=say):
            print(line)
        return
    what = lifecycle.down(c.config(), say=say)
    print(f"down: {what}")


@app.command()
def status(ctx: typer.Context, json_: JsonOpt = False,
           watch: Annotated[bool, typer.Option("--watch", help="A live view, redrawn every --interval seconds until "
                                               "Ctrl-C: GPU power, temperature, utilisation, memory and what holds "
                                               "the clocks down; requests, KV cache, tokens per second, prefix-cache "
                                               "hits and spec-decode acceptance; restarts and the last smoke. Only "
                                               "reads (no canary). Not a terminal: one view is printed.")] = False,
           interval: Annotated[float, typer.Option("--interval", min=0.2, help="With --watch: seconds between "
                                                   "redraws.")] = 1.0,
           config: ConfigOpt = None, facts: FactsOpt = None,
           cluster: ClusterOpt = None, member: MemberOpt = None) -> None:
    """State, health, endpoint, uptime and the last smoke result of the runtime.

    Exits 0 when the runtime is running and healthy (/health answers and the engine works: a
    busy one moves its counters, an idle one completes a canary), 1 otherwise. Reads the profile and
    the engine's view of its container, nothing else of the host. With --watch: 0 when the watch
    ends (Ctrl-C, or the one view printed when the output is not a terminal).

    With --cluster: each member this machine reaches (--member: that one), and the router's
    backends, healthy or not (hostctl.cluster-status/v1); 0 when all of them serve.
    """
    if watch and (json_ or cluster is not None):
        raise InputError("--watch is a view for a terminal: it cannot be combined with --json or --cluster",
                         fix="use `hostctl metrics` for machines, `hostctl status --cluster` for a cluster")
    if cluster is not None:
        from hostctl.cluster.status import status as cluster_status, text

        doc = cluster_status(cluster, member)
        if json_:
            print_json(doc)
        else:
            sys.stdout.write(text(doc))
        raise typer.Exit(0 if doc["ok"] else EXIT_FAILED)
    from hostctl.service.status import status as read_status, status_text

    c = global_options(ctx, config, facts)
    c.refuse_snapshot("status")
    if watch:
        from hostctl.metrics import watch as live

        live.run(c.identity(), interval, interactive=sys.stdout.isatty())
        return
    doc = read_status(c.identity())
    if json_:
        print_json(doc)
    else:
        sys.stdout.write(status_text(doc))
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
    from hostctl.interrupt import Interrupted
    from hostctl.secrets import follow_writer
    from hostctl.facts.container import stream_logs

    c = global_options(ctx, config, facts)
    c.refuse_snapshot("logs")
    name = c.identity().container
    try:
        # whole lines only while following: a secret docker split across two chunks is redacted whole
        stream_logs(name, follow, follow_writer(sys.stdout.buffer))
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

    c = global_options(ctx, config, facts)
    cfg = c.config()
    rt = identity.of_config(cfg)
    target = check_loopback(url) if url else rt.endpoint
    report = run_suite(target, cfg.recipe, api_key_env=rt.api_key_env)
    try:
        saved.save_smoke(report)
    except OSError as exc:
        say(f"warning: smoke result not saved: {exc}")
    if json_:
        print_json(report.to_dict())
    else:
        sys.stdout.write(report.text())
    if not report.ok:
        raise typer.Exit(EXIT_FAILED)
