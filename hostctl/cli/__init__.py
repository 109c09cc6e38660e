"""The `hostctl` command line: parse, call, present. This module holds the root app (its global
options and --version), the command modules it is made of, and main(), which maps what a command
raises to an exit code. Decisions live in plan/, host reads in facts/, changes go through act/'s
executor.

Results go to stdout (with --json: exactly one versioned JSON document); progress, warnings
and errors go to stderr. Exit codes: 0 ok, 1 failed, 2 bad input, 3 refused for safety, 70 an
internal error (a bug), 130 / 143 interrupted by SIGINT / SIGTERM.

The command modules write their annotations to be evaluated where they are defined (no
`from __future__ import annotations`): typer reads the signature of every command on every run,
and compiling postponed annotation strings for it cost 16 ms of the 115 ms that importing the CLI
and building its commands took on the 2-CPU machine. A type only imported for the type checker
is written as a string there.
"""

import functools
import gc
import os
import sys
import traceback
from typing import Annotated

import typer

from hostctl import __version__
from hostctl.cli import cache, check, client, measure, model, observe, prepare, runtime, store
from hostctl.cli.options import ConfigOpt, FactsOpt, GlobalOptions, say
from hostctl.errors import EXIT_FAILED, EXIT_SIGINT, EXIT_SOFTWARE, HostctlError

app = typer.Typer(
    name="hostctl",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Plain help: it reads the same in a terminal, a pipe and a man page.
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
# Added without a name, a module's commands are the root's own; --help lists them in this order.
for commands in (prepare, runtime, measure, check, observe, client):
    app.add_typer(commands.app)
app.add_typer(store.app, name="store")
app.add_typer(model.app, name="model")  # README "model"
app.add_typer(cache.app, name="cache")  # README "cache"


def _version(value: bool) -> None:
    if value:
        print(f"hostctl {__version__}")
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


BUG_HINT = ("this is a bug in hostctl, not a problem with your input: please report it with this line and the "
            "command you ran (HOSTCTL_DEBUG=1 prints the traceback)")


@functools.cache
def _click_command():
    """The click command typer builds from `app`, once per process: in-process callers (the
    hostile-input generator runs thousands of commands) would otherwise build it per call."""
    return typer.main.get_command(app)


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
        _click_command()(args=argv, prog_name="hostctl")
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else EXIT_FAILED)
    except HostctlError as exc:
        say(exc.render())
        return exc.exit_code
    except Interrupted as exc:
        say(f"interrupted by {exc.name}")
        return exc.exit_code
    except KeyboardInterrupt:
        say("interrupted by SIGINT")
        return EXIT_SIGINT
    except Exception as exc:  # a bug: one line and exit 70, so a script can tell it from a refusal (2)
        if os.environ.get("HOSTCTL_DEBUG"):
            traceback.print_exc()
        text = " ".join(str(exc).split())
        say(f"hostctl: internal error: {type(exc).__name__}: {text[:300]}")
        say(BUG_HINT)
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
    from hostctl import secrets

    # pydantic's own switch: no third-party plugin observes or alters hostctl's validation.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
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
        # The process ends here, and CPython's finalization then runs full collections over every
        # object still alive: the modules, classes and pydantic validators a command built. One
        # collection now (cyclic garbage is freed and its finalizers run, as before), then
        # gc.freeze() keeps the survivors, which the teardown frees by reference count, out of
        # those scans. A read-only command's exit took 40-60 ms of its ~450 ms on the 2-CPU
        # machine with Python 3.11, 15-30 ms with 3.12 (benchmarks/results/doctor_quick_ab-2vcpu-exit.txt).
        gc.collect()
        gc.freeze()
        sys.exit(code)
    return code
