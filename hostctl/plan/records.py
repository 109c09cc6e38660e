"""The Plan: every decision hostctl makes for a (config, facts) pair, each with its reason.

Plans are values. The planners in this package build them from a Config and HostFacts
without any I/O; renderers, provision steps and doctor checks read them.

They are records (hostctl/data.py), validated as the planners make them.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from hostctl.data import Data, Document
from hostctl.plan.codes import CODES
from hostctl.storage_roles import Role

PLAN_SCHEMA = "hostctl.plan/v1"


class Decision(Data):
    key: str
    value: str
    reason: str


class Problem(Data):
    """Something that stops (error) or weakens (warn) the plan, with what to do about it."""

    code: str  # stable: what is wrong (hostctl/plan/codes.py); doctor routes by it, never by the wording
    severity: Literal["error", "warn"]
    area: str
    message: str
    fix: str | None = None


class Section(Data):
    decisions: list[Decision] = Field(default_factory=list)
    problems: list[Problem] = Field(default_factory=list)

    def decide(self, key: str, value: object, reason: str) -> None:
        self.decisions.append(Decision(key=key, value=str(value), reason=reason))

    def problem(self, code: str, severity: Literal["error", "warn"], message: str, fix: str | None = None) -> None:
        if code not in CODES:
            raise ValueError(f"unknown plan problem code {code!r}: declare it in hostctl/plan/codes.py")
        self.problems.append(Problem(code=code, severity=severity, area=self.area(), message=message, fix=fix))

    @classmethod
    def area(cls) -> str:
        return cls.__name__.removesuffix("Plan").lower()


class MemoryPlan(Section):
    host_ram_bytes: int
    host_swap_bytes: int
    host_reserve_bytes: int
    limit_bytes: int | None = None  # container RAM hard cap (docker --memory)
    reservation_bytes: int | None = None  # soft limit (docker --memory-reservation)
    ram_swap_bytes: int | None = None  # container RAM+swap cap (docker --memory-swap)
    conversion_need_bytes: int = 0  # host MemTotal+SwapTotal the first conversion needs
    conversion_verdict: Literal["ok", "short", "not_needed"] = "not_needed"
    conversion_missing_bytes: int = 0


class SelectedGpu(Data):
    rank: int
    index: int
    uuid: str
    name: str
    pci_bus_id: str
    numa_node: int | None


class PlacementPlan(Section):
    gpus: list[SelectedGpu] = Field(default_factory=list)
    numa_node: int | None = None  # the node the runtime is bound to, if any
    cpuset: str | None = None
    bind_memory: bool = False
    env: dict[str, str] = Field(default_factory=dict)
    cap_add: dict[str, str] = Field(default_factory=dict)  # capability -> why


class NcclPlan(Section):
    applies: bool = False
    p2p: bool | None = None
    p2p_level: str | None = None
    custom_all_reduce: bool | None = None
    env: dict[str, str] = Field(default_factory=dict)
    serve_flags: list[str] = Field(default_factory=list)


class RoleTarget(Data):
    role: Role
    drive: str | None  # drive name, or None for a plain directory
    host_path: str
    container_path: str
    mount: str | None  # the drive's mountpoint the path depends on


class RankStore(Data):
    rank: int
    drive: str
    host_dir: str
    shared: bool  # True: this rank reads the shared expert store as it is
    files: list[str] = Field(default_factory=list)  # files bound over the shared store path
    status: str


class StoragePlan(Section):
    roles: list[RoleTarget] = Field(default_factory=list)
    rank_stores: list[RankStore] = Field(default_factory=list)
    required_mounts: list[str] = Field(default_factory=list)

    def role(self, name: str) -> RoleTarget | None:
        return next((r for r in self.roles if r.role == name), None)


class PowerSetting(Data):
    index: int
    uuid: str
    desired_w: float | None
    current_w: float | None
    min_w: float | None
    max_w: float | None
    action: Literal["set", "keep", "none", "invalid"]


class PowerPlan(Section):
    gpus: list[PowerSetting] = Field(default_factory=list)


class Volume(Data):
    source: str
    target: str
    read_only: bool = False
    why: str


class BoundPlaceholder(Data):
    """One placeholder of the recipe as the runtime sees it: its container path and the host directory
    bound there."""

    placeholder: str  # as written: {planes_cache}, {model:NAME}
    field: str  # where the recipe writes it: env.KEY, serve_args[i]
    container_path: str
    host_path: str
    source: str  # the profile setting that gives it


class RuntimeSpec(Section):
    """Everything the Compose file and the service unit say about the runtime container."""

    @classmethod
    def area(cls) -> str:
        return "runtime"

    project: str = "hostctl"
    service: str = "runtime"
    image: str
    gpu_uuids: list[str] = Field(default_factory=list)
    api_host: str
    api_port: int
    api_key_env: str | None = None
    ipc: Literal["host", "private"]
    shm_size: str | None = None
    mem_limit: str | None = None
    mem_reservation: str | None = None
    memswap_limit: str | None = None
    cpuset: str | None = None
    cap_add: dict[str, str] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    env_sources: dict[str, str] = Field(default_factory=dict)  # variable -> where its value came from
    volumes: list[Volume] = Field(default_factory=list)
    placeholders: list[BoundPlaceholder] = Field(default_factory=list)
    command: list[str] = Field(default_factory=list)
    health_start_period_s: int
    labels: dict[str, str] = Field(default_factory=dict)
    required_mounts: list[str] = Field(default_factory=list)
    load_timeout_s: int
    hang_timeout_s: int = 16  # the recipe's (config.Recipe's default); the unit's WatchdogSec= is set above it


class BoxPlan(Section):
    """The recipe against the vLLM-MoET box the profile declares, and that box against this host."""

    box: str | None = None  # the box's id; None: the profile declares no box


class Plan(Document):
    schema_: Literal["hostctl.plan/v1"] = Field(default=PLAN_SCHEMA, alias="schema")
    profile: str
    recipe: str
    phase: str
    memory: MemoryPlan
    placement: PlacementPlan
    nccl: NcclPlan
    storage: StoragePlan
    power: PowerPlan
    runtime: RuntimeSpec
    box: BoxPlan = Field(default_factory=BoxPlan)
    warnings: list[str] = Field(default_factory=list)

    def sections(self) -> list[Section]:
        # The box section only when the profile declares one: a profile without it plans as before.
        box = [self.box] if self.box.box is not None else []
        return [self.memory, self.placement, self.nccl, self.storage, self.power, self.runtime] + box

    @property
    def problems(self) -> list[Problem]:
        return [p for s in self.sections() for p in s.problems]

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]
