"""Running parts inside a command that is already under way: `up` writing its project, tune
writing its knob files, `model pull` fetching the checkpoint. The command holds its own lock
(the lifecycle's, the pull's), speaks through a `say` callback (its stdout is its result: an
endpoint, a JSON document), and consents by running; so the executor runs with no lock of its
own, `--yes`, and its text goes line by line to `say`.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

from hostctl.act.executor import Executor
from hostctl.act.report import Report

Say = Callable[[str], None]


class SayStream:
    """A text stream whose whole lines go to `say` (the rest on flush)."""

    def __init__(self, say: Say) -> None:
        self.say, self.buf = say, ""

    def write(self, text: str) -> int:
        self.buf += text
        *lines, self.buf = self.buf.split("\n")
        for line in lines:
            self.say(line)
        return len(text)

    def flush(self) -> None:
        if self.buf:
            self.say(self.buf)
            self.buf = ""


def run_inline(parts: list[Any], *, command: str, schema: str, say: Say, dry_run: bool = False,
               profile: str = "") -> Report:
    """Run `parts` through the executor; the report, or what the run stopped at raised."""
    out, err = SayStream(say), SayStream(say)
    report = Report(schema_tag=schema, dry_run=dry_run, profile=profile)
    try:
        Executor(command=command, lock=nullcontext, dry_run=dry_run, yes=True, stdin=io.StringIO(), out=out,
                 err=err).run(parts, report)
    finally:
        out.flush()
        err.flush()
    report.raise_for_error()
    return report
