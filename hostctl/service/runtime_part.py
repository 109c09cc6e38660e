"""The runtime container as a part of the one executor (hostctl.act): `docker compose up` of the
project `up` rendered, and `docker compose down` of the profile's project.

read: the container's state in the engine (hostctl.facts.container). decide (pure):
  start - the first look always decides `compose up` (Compose itself recreates what the project
          changed and leaves the rest); the look after it verifies that the container exists.
          Whether it then becomes ready is the watch's and the smoke gate's (lifecycle.py), not
          this part's: a container that dies while loading is diagnosed there, with its log.
  stop  - `compose down` while the container exists; a fresh look that finds none verifies it.

Every take-down goes through here: `down`, and `up`'s own after a failed start, an interrupt, a
hang or a stop while supervising (take_down), so each one is verified by the fresh look.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from hostctl.act.actions import Action, Assessment, Settled
from hostctl.act.consent import Request
from hostctl.act.executor import Context
from hostctl.data import Data
from hostctl.errors import FailedError, HostctlError
from hostctl.facts.container import ContainerState

NAME = "runtime"


class Look(Data):
    state: ContainerState
    started: bool  # this run's compose up already ran
    down_owed: bool = False  # a take-down runs `compose down` once even when no container is seen


class RuntimePart:
    record = False

    def __init__(self, goal: Literal["start", "stop"], *, project_dir: Path | None, project: str, container: str,
                 new_session: bool = False, stop_timeout_s: int = 30, down_even_if_gone: bool = False) -> None:
        self.name = NAME
        self.goal, self.project_dir, self.project, self.container = goal, project_dir, project, container
        self.new_session, self.stop_timeout_s = new_session, stop_timeout_s
        self.started = False
        # An interrupt can land while `compose up` is still creating the container: the look finds
        # none yet, and the one the engine creates a moment later would be left running.
        self.down_owed = down_even_if_gone
        self.before: ContainerState | None = None  # the first look (down says what it stopped)

    def read(self, ctx: Context) -> Any:
        from hostctl.facts.container import container_state

        state = container_state(self.container)
        self.before = self.before or state
        return Look(state=state, started=self.started, down_owed=self.down_owed)

    def decide(self, look: Any) -> Assessment:
        return decide(self.goal, look, container=self.container, up=self._up, down=self._down)

    def _up(self) -> None:
        from hostctl.service.compose import compose_down, compose_up

        self.started = True
        res = compose_up(self.project_dir, self.project, new_session=self.new_session)
        if not res.ok:
            compose_down(self.project_dir, self.project)
            raise FailedError("docker compose up failed",
                              details=(res.stderr or res.stdout).strip().splitlines()[-10:],
                              fix="read the error above; the project was taken down again")

    def _down(self) -> None:
        from hostctl.service.compose import compose_down

        self.down_owed = False
        target = self.project_dir if self.project_dir is not None and self.project_dir.is_dir() else None
        res = compose_down(target, self.project, stop_timeout_s=self.stop_timeout_s, new_session=self.new_session)
        if not res.ok:
            raise FailedError("docker compose down failed", details=(res.stderr or res.stdout).strip().splitlines()[-10:])

    def plan_text(self, d: Assessment, round_no: int) -> str:
        return ""

    def done_text(self, first: Assessment, final: Assessment, ran: list[Action], *, dry_run: bool) -> str:
        return "".join(f"would {a.describe}\n" for a in first.actions) if dry_run else ""

    def refusal(self, d: Assessment, ran: int) -> HostctlError:
        return FailedError("runtime part refused", details=[r.reason for r in d.refusals])

    def consent(self, d: Assessment) -> list[Request]:
        return []


def take_down(project_dir: Path | None, project: str, container: str, *, command: str, schema: str,
              say: Callable[[str], None], stop_timeout_s: int = 30, new_session: bool = False) -> str | None:
    """`compose down` of the project through the executor (run once even when no container is seen
    yet), verified by a fresh look at the engine: None when the container is gone, else why not.
    For a command taking its runtime down on its way out (a failed start, an interrupt, a hang):
    the caller reports the reason beside its own cause rather than raising over it. A second signal
    (interrupt.Hurry) passes through to the caller."""
    from hostctl.act.inline import run_inline

    try:
        run_inline([RuntimePart("stop", project_dir=project_dir, project=project, container=container,
                                new_session=new_session, stop_timeout_s=stop_timeout_s, down_even_if_gone=True)],
                   command=command, schema=schema, say=say)
    except HostctlError as exc:
        return f"{exc.message}: {exc.details[0]}" if exc.details else exc.message
    return None


def decide(goal: str, look: Look, *, container: str, up, down) -> Assessment:
    """Pure: the compose command still needed for `goal`, or the container settled."""
    d = Assessment(NAME)
    st = look.state
    if goal == "start":
        if not look.started or not st.exists:
            d.add(Action(step=f"{NAME}/up", describe=f"docker compose up {container} (detached)", run=up,
                         changes=container, why="start the runtime from the rendered project"))
        else:
            d.add(Settled(id=NAME, what=f"{container} created ({st.status})"))
    elif st.exists or look.down_owed:
        d.add(Action(step=f"{NAME}/down", describe=f"docker compose down {container} (caches stay)", run=down,
                     changes=container, why="`down`: stop and remove the runtime"))
    else:
        d.add(Settled(id=NAME, what=f"{container} does not exist"))
    return d
