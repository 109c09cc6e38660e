"""`hostctl metrics`: the host and its runtime for Prometheus (README "Watching the host").
Parsing and printing only; the reading and the exposition are hostctl.metrics'."""

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from hostctl.cli.options import ConfigOpt, global_options, say, typed_path
from hostctl.errors import InputError, NoProfileError

app = typer.Typer()


@app.command()
def metrics(
    ctx: typer.Context,
    textfile_dir: Annotated[Optional[Path], typer.Option(
        "--textfile-dir", file_okay=False,
        help="Write hostctl.prom into this folder, atomically, for node_exporter's textfile collector. "
             "Default: /var/lib/prometheus/node-exporter (Debian's).")] = None,
    print_: Annotated[bool, typer.Option("--print", help="Print the metrics on stdout instead of writing a file.")]
    = False,
    listen: Annotated[Optional[str], typer.Option(
        "--listen", metavar="ADDRESS:PORT",
        help="Serve the metrics for Prometheus to scrape (e.g. 127.0.0.1:9835), reading the host at each scrape, "
             "until Ctrl-C or SIGTERM.")] = None,
    alert_rules: Annotated[bool, typer.Option(
        "--alert-rules", help="Print the shipped Prometheus alerting rules (hang, restart loop, power limit drift, "
                              "cache drive nearly full, KV cache saturated, qualify failed) and exit.")] = False,
    config: ConfigOpt = None,
) -> None:
    """Export GPU power, limits and temperature, hostctl's verdicts, restarts, provisioned parts,
    each cache drive's room and the runtime's state as Prometheus metrics.

    Without a host profile: the GPUs and what earlier hostctl runs recorded. The runtime's health
    is judged as `hostctl status` judges it: an idle runtime gets one canary request per reading
    (with the key in the variable runtime.api_key_env names). Exit 0 when the metrics were written,
    or when serving ends on SIGTERM (Ctrl-C: 130, as every command); it does not judge them
    (alerting rules do).
    """
    chosen = [name for name, given in (("--textfile-dir", textfile_dir is not None), ("--print", print_),
                                       ("--listen", listen is not None), ("--alert-rules", alert_rules)) if given]
    if len(chosen) > 1:
        raise InputError(f"{' and '.join(chosen)} cannot be combined: choose where the metrics go")
    if alert_rules:
        from hostctl import paths

        sys.stdout.write(paths.alert_rules_path().read_text())
        return
    address = None
    if listen is not None:
        from hostctl.metrics.exposition import parse_listen

        address = parse_listen(listen)
    c = global_options(ctx, config)
    try:
        cfg = c.config()
    except NoProfileError:
        cfg = None  # the GPUs and the state files still say something
    from hostctl.facts.gpu_telemetry import GpuWatch
    from hostctl.metrics import exposition, reading

    def read() -> reading.HostReading:
        # NVML is opened per reading, not held while serving: an open session keeps a driver
        # reload or a GPU reset waiting
        with GpuWatch() as watch:
            return reading.read(cfg, watch)

    if address is not None:
        import signal
        import threading

        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())  # systemd's stop: end cleanly, exit 0
        say(f"serving metrics on http://{address[0] if ':' not in address[0] else f'[{address[0]}]'}:"
            f"{address[1]}/metrics (Ctrl-C or SIGTERM stops)")
        exposition.serve(*address, read, stop)
        return
    data = exposition.exposition(read)
    if print_:
        sys.stdout.write(data.decode())
        return
    from hostctl import paths

    folder = typed_path(textfile_dir) or paths.TEXTFILE_DIR
    say(f"wrote {exposition.write_textfile(folder, data)}")
