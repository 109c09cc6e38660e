"""The Compose project as a part of the one executor (hostctl.act): the files `up` starts
(compose.yaml, runtime.env, the systemd units), rendered from the plan by hostctl.service.render,
and what `render` (one host or --cluster, each member's project) and `up --cluster` write.

read: the project's files as they are (render.read_project, through the trusted folder fd that
writing uses). decide (pure): every file already as rendered, with its mode, is settled; otherwise
one action writes the whole project (render.write_project: a temporary folder, checked, then put
in place, so the files never disagree with one another), with the diff of every file that changes
but runtime.env, whose text holds the recipe's secrets and is only named. Reading again after the
write is the verification.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hostctl.act.actions import Action, Assessment, Settled
from hostctl.act.consent import Request
from hostctl.act.executor import Context
from hostctl.act.files import FileNow, preview
from hostctl.act.inline import Say, run_inline
from hostctl.act.report import Report
from hostctl.errors import FailedError, HostctlError

NAME = "project"
SECRET_FILES = ("runtime.env",)
SCHEMA = "hostctl.render/v1"  # `render`'s report; `up` keeps its own (hostctl.up/v1)


class ProjectPart:
    name = NAME
    record = False  # the project is `up`'s own, not a provisioned part

    def __init__(self, files: dict[str, str], target: Path, *, check: Callable[[Path], None] | None = None,
                 why: str = "the plan's runtime") -> None:
        self.files, self.target, self.check, self.why = files, target, check, why

    def read(self, ctx: Context) -> Any:
        from hostctl.service.render import read_project

        return read_project(self.target, list(self.files))

    def decide(self, snapshot: Any) -> Assessment:
        return decide(self.files, snapshot, self.target, write=self._write, why=self.why)

    def _write(self) -> None:
        from hostctl.service.render import write_project

        write_project(self.files, self.target, check=self.check)

    def plan_text(self, d: Assessment, round_no: int) -> str:
        return ""

    def done_text(self, first: Assessment, final: Assessment, ran: list[Action], *, dry_run: bool) -> str:
        if dry_run and first.actions:
            return f"would render {self.target}: {first.actions[0].describe}\n" + (first.actions[0].diff or "")
        return f"rendered {self.target}" + ("" if ran or first.actions else " (unchanged)") + "\n"

    def refusal(self, d: Assessment, ran: int) -> HostctlError:
        return FailedError("project part refused", details=[r.reason for r in d.refusals])

    def consent(self, d: Assessment) -> list[Request]:
        return []


def render_project(files: dict[str, str], target: Path, *, check: Callable[[Path], None] | None, say: Say,
                   dry_run: bool = False, command: str = "hostctl render", schema: str = SCHEMA) -> Report:
    """Write the rendered project through the executor: written when a file differs, then read
    back. The caller holds its own lock, if any (`up` the lifecycle's); the text goes to `say`
    (stdout is the caller's result). Raises what the run stopped at."""
    return run_inline([ProjectPart(files, target, check=check)], command=command, schema=schema, say=say,
                      dry_run=dry_run)


def project_paths(files: dict[str, str], target: Path) -> list[Path]:
    """The project's files as `render` prints them: absolute, one per file."""
    return [Path(os.path.abspath(target)) / name for name in files]


def decide(files: dict[str, str], on_disk: list, target: Path, *, write: Callable[[], None],
           why: str = "the plan's runtime") -> Assessment:
    """Pure: the action that writes the project when any file differs from its rendering (text or
    mode), else the project settled (one item: the action writes every file)."""
    from hostctl.service.render import file_mode

    d = Assessment(NAME)
    now = {f.name: f for f in on_disk}
    changed, diffs = [], []
    for name, text in files.items():
        have = now.get(name) or FileNow(name=name)
        if have.text == text and have.mode == file_mode(name):
            continue
        changed.append(name)
        diffs.append(preview(name, have, text, file_mode(name),
                             hidden="it holds the recipe's secrets" if name in SECRET_FILES else None,
                             labels=(f"{target / name} (now)", f"{target / name} (rendered)")))
    if changed:
        d.add(Action(step=f"{NAME}/write", describe=f"write {', '.join(changed)} into {target}", run=write,
                     diff="".join(diffs) or None, changes=str(target), why=why))
    else:
        d.add(Settled(id=NAME, what=f"{', '.join(files)} in {target} as rendered"))
    return d
