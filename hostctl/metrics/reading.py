"""One reading of the host and its runtime, for `hostctl metrics` and `status --watch`: the GPUs
now (NVML), what earlier hostctl runs left (verdicts, provisioned parts, restarts), each storage
role's room, and the runtime's state as `hostctl status` judges it, with its /metrics sample.

Everything is read through hostctl.facts and hostctl.service.status, which own those reads; the
profile is optional (without one: the GPUs and the state files only).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pydantic import Field

from hostctl.data import Data
from hostctl.facts.gpu_telemetry import GpuTelemetry
from hostctl.facts.records import PathFacts, StateFacts
from hostctl.service.runtime_metrics import RuntimeSample

if TYPE_CHECKING:
    from hostctl.config import Config
    from hostctl.facts.gpu_telemetry import GpuWatch


class RolePath(Data):
    role: str
    room: PathFacts


class HostReading(Data):
    read_at: float  # unix time
    gpus: GpuTelemetry
    planned_limits_w: dict[int, float] = Field(default_factory=dict)  # GPU index -> the limit the profile sets
    state: StateFacts = Field(default_factory=StateFacts)
    roles: list[RolePath] = Field(default_factory=list)
    runtime: dict[str, Any] | None = None  # `hostctl status --json`'s document; None without a profile
    load_timeout_s: int | None = None  # the recipe's: how long a start may load before it is stuck
    sample: RuntimeSample | None = None  # the runtime's /metrics, while it runs


def planned_limits(config: Config | None, gpus: GpuTelemetry) -> dict[int, float]:
    from hostctl.plan.power import desired_limit

    if config is None:
        return {}
    out = {}
    for g in gpus.gpus:
        want = desired_limit(config, g.index, g.uuid)
        if want is not None:
            out[g.index] = want
    return out


def role_rooms(config: Config | None) -> list[RolePath]:
    from hostctl.facts.mounts import probe_paths, read_mountinfo
    from hostctl.plan import role_paths

    if config is None:
        return []
    places = role_paths(config)
    rooms = probe_paths([(path, False) for _, path in places], read_mountinfo())
    return [RolePath(role=role, room=room) for (role, _), room in zip(places, rooms)]


def runtime_part(config: Config | None) -> tuple[dict[str, Any] | None, RuntimeSample | None]:
    """`hostctl status`'s document (state, health, the engine's progress, last up, smoke, qualify)
    and, while the runtime runs, its /metrics sample."""
    if config is None:
        return None, None
    from hostctl.service import apiclient, identity, runtime_metrics
    from hostctl.service.status import status

    rt = identity.of_config(config)
    doc = status(rt)
    sample = None
    if doc.get("state") == "running":
        with apiclient.client(timeout=3.0) as c:
            sample = runtime_metrics.read(c, rt.endpoint)
    return doc, sample


def read(config: Config | None, watch: GpuWatch) -> HostReading:
    """The whole reading; `watch` is an open NVML session (hostctl.facts.gpu_telemetry.GpuWatch)."""
    from hostctl.facts.state import probe_state

    gpus = watch.read()
    state, _notes = probe_state()  # a state file that cannot be read is as none: doctor names it
    runtime, sample = runtime_part(config)
    return HostReading(read_at=time.time(), gpus=gpus, planned_limits_w=planned_limits(config, gpus), state=state,
                       roles=role_rooms(config), runtime=runtime, sample=sample,
                       load_timeout_s=None if config is None else config.recipe.load_timeout_s)
