"""`hostctl bench` between the CLI and the runner: progress on stderr (a bar on a terminal, one
line per step otherwise), the result on stdout (text, or the hostctl.bench/v1 document with
--json), Ctrl-C / SIGTERM turned into an interrupted result and exit 130 / 143."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console

from hostctl.config import Config
from hostctl.errors import EXIT_FAILED
from hostctl.interrupt import Interrupted, signals_raise
from hostctl.plan.records import Plan


class ProbeProgress:
    """A rich progress bar over the probes when stderr is a terminal; plain lines otherwise."""

    def __init__(self, err: Console):
        self.err = err
        self.bar = None
        self.task = None
        if err.is_terminal:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress as Bar, TextColumn, TimeElapsedColumn

            self.bar = Bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                           console=err, transient=True)

    def __enter__(self) -> "ProbeProgress":
        if self.bar is not None:
            self.bar.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.bar is not None:
            self.bar.stop()

    def say(self, msg: str) -> None:
        self.err.print(msg, markup=False, highlight=False)

    def step(self, i: int, n: int, what: str) -> None:
        if self.bar is None:
            return
        if self.task is None:
            self.task = self.bar.add_task("probes", total=n)
        self.bar.update(self.task, completed=i - 1, description=f"probe {i}/{n}: {what}")


def bench(cfg: Config, plan: Plan, suite: str, *, out_dir: Path | None, json_: bool, out: Console,
          err: Console) -> int:
    from hostctl.bench import runner

    progress = ProbeProgress(err)
    try:
        with signals_raise(), progress:
            doc, path = runner.run(cfg, plan, suite, out_dir=out_dir, say=progress.say, progress=progress.step)
    except Interrupted as exc:
        where = getattr(exc, "result_path", None)
        err.print(f"bench interrupted by {exc.signal_name}: what ran is recorded as interrupted"
                  + (f" in {where}" if where else "") + "; the bench container was removed", markup=False)
        return exc.exit_code
    if json_:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        out.print(runner.text_report(doc, path), end="", markup=False, highlight=False)
    err.print(f"wrote {path}", markup=False)
    return 0 if doc["status"] == "ok" else EXIT_FAILED
