"""What `hostctl init` decides, as data: the options it is given and the Proposal it returns
(every choice with its reason), which the renderer turns into a commented TOML profile and
`--json` prints as one `hostctl.init/v1` document."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field

from hostctl.config import DriveIdentity, Recipe
from hostctl.data import Data, Document

INIT_SCHEMA = "hostctl.init/v1"


class InitOptions(Data):
    model_config = ConfigDict(frozen=True)

    recipe: str | None = None  # --recipe: the reference written into the profile (bundled name or absolute path)
    drives: tuple[DriveIdentity, ...] | None = None  # --drives; () for `--drives none`
    power_limit_w: float | None = None  # --power-limit: asked for every GPU
    model_dir: str | None = None  # --model-dir


class RecipeSource(Data):
    model_config = ConfigDict(frozen=True)

    """A recipe init may choose: the reference a profile names it by, and the recipe itself."""

    ref: str
    recipe: Recipe


class Choice(Data):
    key: str  # the profile field, e.g. memory.host_reserve, or a topic such as "swap"
    value: Any
    reason: str
    # `init --box`: where the value came from ("box rtx-pro6000x4.yaml: docker_image", "the facts of
    # this host", "hostctl init"); None in a plain init, where the reason says it
    source: str | None = None


class BoxValue(Data):
    """A box value this profile does not use, and why (`init --box` never drops one silently)."""

    field: str  # as the box names it: shm_size, env.CUDA_HOME, models.GLM-5.2-NVFP4
    value: Any
    why: str


class BoxSource(Data):
    """The vLLM-MoET box an `init --box` profile was written from."""

    file: str
    id: str
    runtime: str
    unused: list[BoxValue] = Field(default_factory=list)
    unknown_keys: list[str] = Field(default_factory=list)  # keys vLLM-MoET's runner does not read either


class RecipeOption(Data):
    ref: str
    id: str
    fits: bool  # its `requires` (gpus, vram_gb, host_ram_gb) fit this host
    reason: str
    plan_errors: list[str] = Field(default_factory=list)  # what the plan rejects, for a recipe that fits


class DriveChoice(Data):
    name: str
    identity: str
    disk: str  # the kernel name now, e.g. /dev/nvme1n1 (it may move; the identity does not)
    model: str | None = None
    size_bytes: int
    named: bool  # named with --drives; otherwise proposed, and the profile asks the user to confirm it
    found: str  # what the storage planner found on it: blank, an empty GPT, hostctl layout
    verdict: str  # the storage planner's status for it (create, converge, ready)
    swap_bytes: int
    swap_priority: int
    filesystem: Literal["ext4", "xfs"]
    mountpoint: str
    notes: list[str] = Field(default_factory=list)


class SkippedDisk(Data):
    disk: str
    identity: str
    size_bytes: int
    reason: str


class GpuRange(Data):
    index: int
    name: str
    uuid: str
    min_w: float | None = None
    max_w: float | None = None
    default_w: float | None = None
    limit_w: float | None = None  # configured now


class SwapArithmetic(Data):
    need_bytes: int  # MemTotal + SwapTotal the recipe's first conversion needs (0: none declared)
    mem_total_bytes: int
    other_swap_bytes: int  # swap this host has that is not on a profile drive (not counted)
    kept_bytes: int  # swap partitions of hostctl's layout already on the chosen drives
    missing_bytes: int  # need - MemTotal - kept, at least 0
    new_drives: int  # drives laid out anew, which share the missing swap
    per_drive_bytes: int  # each new drive's share, in whole MiB
    shortfall_bytes: int  # what the drives could not hold
    text: list[str] = Field(default_factory=list)  # the arithmetic, line by line


class Proposal(Document):
    schema_: Literal["hostctl.init/v1"] = Field(default=INIT_SCHEMA, alias="schema")
    host: str
    facts_collected_at: str
    recipe: str | None  # the reference the profile names; None: no recipe fits
    recipe_reason: str
    recipes: list[RecipeOption] = Field(default_factory=list)
    profile: dict[str, Any] = Field(default_factory=dict)  # exactly the data the written profile holds
    choices: list[Choice] = Field(default_factory=list)
    drives: list[DriveChoice] = Field(default_factory=list)
    skipped_disks: list[SkippedDisk] = Field(default_factory=list)
    swap: SwapArithmetic | None = None
    gpus: list[GpuRange] = Field(default_factory=list)
    gpus_reason: str | None = None  # why no GPU is listed
    plan_errors: list[str] = Field(default_factory=list)  # `hostctl plan` errors on this profile, with these facts
    warnings: list[str] = Field(default_factory=list)
    box: BoxSource | None = None  # `init --box`: the box and what of it the profile does not use

    def choice(self, key: str) -> Choice | None:
        return next((c for c in self.choices if c.key == key), None)

    def document(self, **extra: Any) -> dict[str, Any]:
        doc = self.model_dump(mode="json")
        doc.update(extra)
        return doc
