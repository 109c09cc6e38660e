"""The host profile (TOML) and the recipe (YAML): their records, loading and validation.

A profile describes one host: its drives (by stable identity), GPU power limits, memory
policy, storage roles, the phase, and the recipe it serves. A recipe is a vLLM-MoET bench
recipe, accepted unchanged, plus hostctl's own fields (smoke suite, storage needs,
architecture facts). `env`, `warmup`, `tuning` and `suite_params` are open maps; every
other unknown key is an error naming its path. Validation never opens model files: what it
needs to know about the checkpoint, the recipe declares under `architecture`.

Every record here derives from `Written`: what people write, validated strictly (a boolean is
not a number, "8000" is not 8000, no inf or NaN) and frozen once read. String rules are the
annotated types of hostctl.safetext and hostctl.safepaths.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from hostctl import paths, safepaths, safetext, serveflags
from hostctl.bytesizes import MIB, TIB, parse_size
from hostctl.data import Data
from hostctl.errors import InputError
from hostctl.safepaths import HostDir, HostPath, MountPoint
from hostctl.safetext import EnvName, ImageRef, ModelName, Printable, RecipeId, ServedName
from hostctl.secrets import SECRET_FLAGS_TO_ENV, is_secret_name
from hostctl.storage_roles import ROLES, Role

if TYPE_CHECKING:
    from pydantic import ValidationError

Phase = Literal["converting", "serving"]
PLACEHOLDER_RE = re.compile(r"\{([a-z_]+)(?::([^{}]+))?\}")
KNOWN_PLACEHOLDERS = {"planes_cache", "expert_store", "model"}
XFS_NAME_MAX = 5  # "hcdata-" + 5 characters = xfs's 12-byte label


class Written(Data):
    """What people write: strict (no coercion between types: `api_port = true` is not port 1,
    "8000" is not 8000), no infinity or NaN (an infinity passes every range check and overflows
    later), frozen once read (a changed one is made with model_copy(update=...))."""

    model_config = ConfigDict(strict=True, allow_inf_nan=False, frozen=True)


def _problem(problem: str | None) -> None:
    if problem:
        raise ValueError(problem)


def _size_in(v: int | None, lo: int, hi: int, why_lo: str, why_hi: str = "") -> int | None:
    """A byte size within [lo, hi], each bound with its reason."""
    from hostctl.bytesizes import fmt_bytes

    if v is None:
        return v
    if v < lo:
        raise ValueError(f"{fmt_bytes(v)} is below {fmt_bytes(lo)}: {why_lo}")
    if v > hi:
        raise ValueError(f"{fmt_bytes(v)} is above {fmt_bytes(hi)}" + (f": {why_hi}" if why_hi else
                         ": no host hostctl serves has that much (a unit typo such as 't' for 'g'?)"))
    return v


# ---------------------------------------------------------------- drive identity


class DriveIdentity(Written):
    """How a drive is recognised: stable forms first; `path:` only with a warning."""

    kind: Literal["serial", "wwn", "by-id", "path"]
    value: str

    @classmethod
    def parse(cls, text: str) -> "DriveIdentity":
        if not isinstance(text, str) or ":" not in text:
            raise ValueError(
                f"expected 'serial:…', 'wwn:…', 'by-id:…' or 'path:/dev/…', got {text!r}"
                + (" (kernel names such as /dev/nvme0n1 move between boots: write path:" + text + " to accept that)"
                   if isinstance(text, str) and text.startswith("/dev/") else "")
            )
        kind, value = text.split(":", 1)
        if kind not in ("serial", "wwn", "by-id", "path"):
            raise ValueError(f"unknown identity form {kind!r}: use serial:, wwn:, by-id: or path:")
        if not value:
            raise ValueError(f"identity {text!r} has an empty value")
        if kind == "path":
            _problem(safepaths.device_path_problem(value))
        elif kind == "by-id":
            _problem(safepaths.by_id_problem(value))
        else:
            _problem(safetext.match_problem(value, re.compile(r"[A-Za-z0-9][A-Za-z0-9 ._:+-]{0,127}"),
                                            f"a {kind} such as S7KGNU0X123456 (letters, digits, ._:+- and spaces)"))
        return cls(kind=kind, value=value)

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}"


# ---------------------------------------------------------------- environment


def env_problem(key: object, value: object) -> str | None:
    """Why `key=value` cannot be a runtime environment variable from a recipe, a profile or a box,
    or None: a valid name, not one hostctl owns (hostctl.serveflags), a string value with no control
    character."""
    if not isinstance(key, str) or not safetext.ENV_NAME.fullmatch(key):
        return f"{str(key)[:80]!r} is not a valid environment variable name"
    owned = serveflags.env_refusal(key, value)
    if owned:
        return owned
    if not isinstance(value, str):
        # YAML 1.1 rewrites unquoted values (no -> false, 010 -> 8, 1.10 -> 1.1): only a
        # string is what the author wrote.
        return (f"expected a string, got {type(value).__name__} "
                f"{value if not isinstance(value, (dict, list)) else ''}".rstrip()
                + "; put the value in quotes (\"...\"), YAML reads unquoted no/yes/on/off, 010 and 1.10 as other values")
    problem = safetext.text_problem(value)
    if problem:
        # A secret's value is never echoed, not even in an error.
        shown = "" if is_secret_name(key) else f" ({value[:60]!r})"
        return f"the value{shown} {problem}"
    return None


def _env_map(v: Any) -> Any:
    # Checked before the type: a value YAML rewrote (no -> false) is named with its fix.
    if isinstance(v, dict):
        for key, value in v.items():
            problem = env_problem(key, value)
            if problem:
                raise ValueError(f"env.{key}: {problem}")
    return v


# Runtime environment variables (a recipe's, a profile's, a box's): they reach the same root container.
EnvMap = Annotated[dict[str, str], BeforeValidator(_env_map)]


# ---------------------------------------------------------------- host profile


def _whole_mib(v: Any) -> int:
    size = parse_size(v)
    if size % MIB:
        # partitions are made in whole MiB; rounding silently would make a layout the profile
        # does not describe (and a later "size differs" refusal)
        raise ValueError(f"expected a whole number of MiB, got {v!r} ({size} bytes = "
                         f"{size / MIB:.3f} MiB); write e.g. '{size // MIB or 1}MiB'")
    return size


def _mount_option(option: str) -> str:
    if not re.fullmatch(r"[A-Za-z0-9_.=:/+-]+", option):  # fullmatch: "$" would let a trailing newline in
        raise ValueError(f"mount option {option!r}: expected one option such as 'discard' "
                         "(letters, digits and _.=:/+- only; no commas or spaces)")
    return option


class Drive(Written):
    # The name goes into filesystem labels: "hcdata-<name>" must fit ext4's 16 bytes (so <= 9
    # characters) and, for xfs, its 12 bytes (<= 5 characters; checked below).
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,8}$", description="short name (<= 9 chars: it goes into 16-byte filesystem labels)")
    identity: Annotated[DriveIdentity, BeforeValidator(lambda v: DriveIdentity.parse(v) if isinstance(v, str) else v)]
    swap: Annotated[int, BeforeValidator(_whole_mib)] = Field(
        default=0, description="swap partition size in bytes, a whole number of MiB (0: no swap partition)")
    # 0..32767 only: swapon -p -1 leaves the kernel to pick its own negative priority, which then
    # never equals the profile's -1, so every run would turn the swap off and on again.
    swap_priority: int = Field(default=100, ge=0, le=32767,
                               description="swap priority, 0..32767 (equal priorities interleave the drives)")
    filesystem: Literal["ext4", "xfs"] = "ext4"
    mountpoint: MountPoint | None = None
    mount_options: list[Annotated[str, AfterValidator(_mount_option)]] = Field(
        default_factory=list,
        description="extra mount options for the data filesystem, added to defaults,noatime,nofail "
        "(e.g. noinit_itable for sparse test images, discard)")

    @model_validator(mode="after")
    def _label_fits(self) -> "Drive":
        if self.filesystem == "xfs" and len(self.name) > XFS_NAME_MAX:
            raise ValueError(f"name {self.name!r}: an xfs label holds 12 bytes, so a drive formatted as xfs needs a "
                             f"name of at most {XFS_NAME_MAX} characters (its label is 'hcdata-<name>')")
        return self

    @property
    def mount(self) -> str:
        return self.mountpoint or f"/mnt/hostctl/{self.name}"


ByteSize = Annotated[int, BeforeValidator(parse_size)]


class MemoryPolicy(Written):
    host_reserve: ByteSize = Field(default=8 * 1024**3, description="physical RAM kept outside the container")
    reservation_margin: ByteSize = Field(default=4 * 1024**3, description="soft limit this far below the hard cap")
    container_ram_swap: ByteSize | None = Field(default=None, description="container RAM+swap cap; default derived")
    container_ram: ByteSize | None = Field(default=None, description="container RAM cap; default MemTotal minus host_reserve")

    # Ranges with their reasons: each of these values is a guard, and 0 (or a typo) would turn
    # it off -- container_ram = 0 rendered no memory cap at all.
    @field_validator("host_reserve")
    @classmethod
    def _reserve(cls, v: int) -> int:
        return _size_in(v, 512 * MIB, 64 * TIB, "the OS and desktop need RAM outside the container; with less the "
                        "kernel's OOM killer, not the container's cap, acts first")

    @field_validator("reservation_margin")
    @classmethod
    def _margin(cls, v: int) -> int:
        return _size_in(v, 0, 64 * TIB, "")

    @field_validator("container_ram", "container_ram_swap")
    @classmethod
    def _cap(cls, v: int | None) -> int | None:
        return _size_in(v, 256 * MIB, 64 * TIB, "a cap this small (0 renders no cap at all) leaves the runtime no room "
                        "to start; remove the key to derive the cap from the host reserve")


GpuDevice = Annotated[str, safetext.rule(lambda v: safetext.match_problem(
    v, re.compile(r"[0-9]{1,3}|(?:GPU|MIG)-[A-Za-z0-9/-]{1,100}"), "a GPU index such as 0 or a UUID such as GPU-5c2f...-..."))]


class GpuPolicy(Written):
    devices: list[GpuDevice] | None = Field(default=None, max_length=64,
                                            description="GPU UUIDs or indices to serve on; default: the first N")
    power_limit_w: float | None = None
    power_limits_w: dict[str, float] = Field(default_factory=dict, description="per GPU (UUID or index) overrides")

    @field_validator("power_limit_w", "power_limits_w", mode="before")
    @classmethod
    def _no_booleans(cls, v: Any) -> Any:
        values = v.values() if isinstance(v, dict) else [v]
        if any(isinstance(x, bool) for x in values):
            raise ValueError("expected a number of watts, got a boolean")
        return v

    @field_validator("power_limit_w")
    @classmethod
    def _positive(cls, v: float | None) -> float | None:
        if v is not None and not 0 < v <= 10_000:
            raise ValueError(f"expected a positive number of watts (at most 10000), got {v}")
        return v

    @field_validator("power_limits_w")
    @classmethod
    def _positive_each(cls, v: dict[str, float]) -> dict[str, float]:
        for key, watts in v.items():
            if not 0 < watts <= 10_000:
                raise ValueError(f"power limit for GPU {key!r}: expected a positive number of watts, got {watts}")
        return v


def _role_target(v: str) -> str:
    # An absolute path is a read-write bind into the runtime: never a system directory
    # (compile_cache = "/" bound the whole root filesystem). A name is a drive's.
    if v.startswith("/"):
        _problem(safepaths.host_dir_problem(v))
        return safepaths.normalise(v)
    _problem(safetext.match_problem(v, re.compile(r"[a-z][a-z0-9-]{0,8}"), "a drive name or an absolute path"))
    return v


# Where a storage role lives: a drive's name or an absolute directory.
RoleTarget = Annotated[str, AfterValidator(_role_target)]


class StorageRoles(Written):
    """Which drive (by name) or directory (absolute path) holds each cache role."""

    planes_cache: RoleTarget | None = None
    expert_store: RoleTarget | None = None
    compile_cache: RoleTarget | None = None
    rank_stores: list[str] = Field(default_factory=list, description="drive for each TP rank's store, in rank order")
    swappiness_converting: int = Field(default=100, ge=0, le=200)
    swappiness_serving: int = Field(default=10, ge=0, le=200)
    page_cluster: int = Field(default=0, ge=0, le=10)


# Variables every shell sets to a non-secret value: naming one as api_key_env makes the key guessable.
NOT_A_KEY_ENV = frozenset({"PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "LANG", "TERM", "HOSTNAME",
                           "SHLVL", "TMPDIR", "MAIL", "DISPLAY", "EDITOR", "SUDO_USER", "SUDO_UID", "SUDO_GID", "_"})


def _not_a_shell_variable(v: str) -> str:
    if v in NOT_A_KEY_ENV:
        raise ValueError(f"{v} is set in every shell to a well-known value, so the API key would be guessable; "
                         "name a variable that holds only the key, such as HOSTCTL_API_KEY")
    return v


# The name of the environment variable that holds an API key.
KeyEnvName = Annotated[EnvName, AfterValidator(_not_a_shell_variable)]


def _ip_address(v: str) -> str:
    try:
        ipaddress.ip_address(v)
    except ValueError:
        raise ValueError(f"expected an IP address such as 127.0.0.1, got {v!r}") from None
    return v


class RuntimeSettings(Written):
    image: ImageRef | None = Field(default=None, description="override the recipe's runtime image")
    api_host: Annotated[str, AfterValidator(_ip_address)] = "127.0.0.1"
    api_port: int = Field(default=8000, ge=1, le=65535)
    api_key_env: KeyEnvName | None = Field(default=None, description="name of the environment variable holding the API key")
    # model_dir and models_dir are bind sources; project_dir is where render writes.
    model_dir: HostDir | None = Field(default=None, description="host directory of the checkpoint, mounted read-only")
    models_dir: HostDir | None = Field(default=None, description="host directory holding extra models ({model:NAME})")
    # `hostctl model` (README "model"): where registry names resolve, and a host-local pin.
    models_file: str | None = Field(default=None, description="a models file (vLLM-MoET's bench/models.yaml format) "
                                    "resolving the recipe's model name; default: the bundled runtime/models.yaml")
    model_revision: str | None = Field(default=None, description="pin the checkpoint to this commit (40 hex) on "
                                       "this host, over the recipe's or the models file's revision")
    project_dir: HostDir = Field(default=str(paths.STATE_DIR / "project"), description="where the rendered project lives")
    project: str = Field(default="hostctl", pattern=r"^[a-z0-9][a-z0-9_-]{0,40}$",
                         description="Compose project name; the container is <project>-runtime")
    env: EnvMap = Field(default_factory=dict, max_length=500,
                        description="this host's environment variables for the runtime, under the recipe's "
                        "(the recipe wins, as vLLM-MoET merges a box's env); `init --box` writes a box's here")

    @model_validator(mode="after")
    def _exposed_needs_key(self) -> "RuntimeSettings":
        if not ipaddress.ip_address(self.api_host).is_loopback and not self.api_key_env:
            raise ValueError(
                f"api_host {self.api_host} exposes the API beyond this machine: set api_key_env "
                "to the name of an environment variable holding an API key"
            )
        return self

    @property
    def exposed(self) -> bool:
        return not ipaddress.ip_address(self.api_host).is_loopback


class BoxDeclaration(Written):
    """The vLLM-MoET box a profile was written from (`hostctl init --box`): the hardware it declares
    and the models it holds, which `plan` checks the recipe against as vLLM-MoET's runner checks a
    box (bench/runner/common.py: compat), and compares with this host's facts."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$", description="the box's id")
    file: HostPath = Field(description="the box file it was read from (absolute)", max_length=4000)
    gpu_name: Printable = Field(default="", max_length=200, description="gpus.name as the box declares it")
    gpus: int = Field(ge=0, le=64, description="gpus.count: GPUs the box declares")
    vram_gb: float = Field(ge=0, le=10_000, description="gpus.vram_gb: VRAM per GPU the box declares")
    host_ram_gb: float = Field(ge=0, le=1_000_000, description="host RAM the box declares")
    models: list[ModelName] = Field(default_factory=list, max_length=500,
                                    description="the registry names of the models the box holds (its models: map)")


class HostProfile(Written):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")
    description: Printable = Field(default="", max_length=1000)
    recipe: Printable = Field(description="bundled recipe name or a path to a recipe YAML", max_length=4000)
    phase: Phase = "serving"
    drives: list[Drive] = Field(default_factory=list)
    memory: MemoryPolicy = Field(default_factory=MemoryPolicy)
    gpu: GpuPolicy = Field(default_factory=GpuPolicy)
    storage: StorageRoles = Field(default_factory=StorageRoles)
    runtime: RuntimeSettings = Field(default_factory=RuntimeSettings)
    box: BoxDeclaration | None = Field(default=None, description="the vLLM-MoET box this profile was written from")

    @model_validator(mode="after")
    def _drives_unique(self) -> "HostProfile":
        seen: dict[str, dict[str, int]] = {"name": {}, "identity": {}, "mount": {}}
        for i, drive in enumerate(self.drives):
            for what, key in (("name", drive.name), ("identity", str(drive.identity)), ("mount", drive.mount)):
                if key in seen[what]:
                    field = "mountpoint" if what == "mount" else what
                    raise ValueError(
                        f"drives[{i}].{field}: {key!r} is already used by drives[{seen[what][key]}]; "
                        "each drive needs its own name, identity and mountpoint"
                    )
                seen[what][key] = i
        names = {d.name for d in self.drives}
        for role in ROLES:
            target = getattr(self.storage, role)
            if target is not None and not target.startswith("/") and target not in names:
                raise ValueError(f"storage.{role}: {target!r} is neither a drive name ({sorted(names)}) nor an absolute path")
        for i, target in enumerate(self.storage.rank_stores):
            if target not in names:
                raise ValueError(f"storage.rank_stores[{i}]: {target!r} is not a drive name ({sorted(names)})")
        return self

    def drive(self, name: str) -> Drive | None:
        return next((d for d in self.drives if d.name == name), None)


# ---------------------------------------------------------------- recipe


class Requires(Written):
    # Upper bounds: a value past them is a typo, and an absurd one (1e308) overflows the arithmetic.
    gpus: int = Field(ge=0, le=64, description="GPUs per host (no host has more than 64)")
    vram_gb: float | None = Field(default=None, ge=0, le=10_000)
    host_ram_gb: float | None = Field(default=None, ge=0, le=1_000_000)
    extra_models: list[str] = Field(default_factory=list, max_length=64)


class Architecture(Written):
    """What validation must know about the model, declared here so it never opens model files."""

    sparse_mla: bool = False
    checkpoint_scale_dtype: str | None = Field(default=None, description="e.g. F8_E8M0")


class Conversion(Written):
    """What the first start (building planes and packs) needs from the host."""

    host_ram_swap_gib: float = Field(default=0, ge=0, le=1_048_576, description="host MemTotal + SwapTotal needed")
    cache_free_gib: float = Field(default=0, ge=0, le=1_048_576, description="free space needed on the cache filesystems")
    layers: int | None = Field(default=None, ge=1, le=10_000, description="layers converted, for progress")


# The longest window any served model has is ~10M tokens; `context: 1e30` rendered --max-model-len 1e30.
MAX_CONTEXT = 16 * 1024 * 1024
# A first conversion takes hours; a load timeout past a week is a unit mistake (ms for s).
MAX_TIMEOUT_S = 7 * 24 * 3600


class SmokeTest(Written):
    name: Printable = Field(max_length=200)
    kind: Literal["chat", "tool_call", "models", "needle"]
    prompt: str | None = Field(default=None, max_length=100_000)
    expect: str | None = Field(default=None, max_length=10_000)
    tool: dict[str, Any] | None = None
    expect_call: dict[str, Any] | None = None
    tokens: int | None = Field(default=None, ge=1, le=MAX_CONTEXT, description="needle: prompt length in tokens")
    max_completion_tokens: int = Field(default=16, ge=1, le=1_000_000)

    @model_validator(mode="after")
    def _fields_for_kind(self) -> "SmokeTest":
        need = {"chat": ("prompt", "expect"), "tool_call": ("prompt", "tool", "expect_call"),
                "needle": ("expect", "tokens"), "models": ()}[self.kind]
        missing = [f for f in need if getattr(self, f) is None]
        if missing:
            raise ValueError(f"smoke test {self.name!r} ({self.kind}) needs {', '.join(missing)}")
        if self.kind == "tool_call":
            if not self.openai_tool()["function"].get("name"):
                raise ValueError(f"smoke test {self.name!r}: tool needs a name: write the function definition "
                                 "{name, description, parameters} (or an OpenAI tool {type: function, function: ...})")
            if not (self.expect_call or {}).get("name"):
                raise ValueError(f"smoke test {self.name!r}: expect_call needs the function's name")
        return self

    def openai_tool(self) -> dict[str, Any]:
        """The tool as the OpenAI API takes it; recipes may give just the function definition."""
        tool = dict(self.tool or {})
        if "function" in tool:
            return {"type": tool.get("type", "function"), "function": dict(tool["function"])}
        return {"type": "function", "function": tool}


class Recipe(Written):
    # vLLM-MoET bench recipe fields, accepted unchanged.
    id: RecipeId
    role: Printable | None = Field(default=None, max_length=200)
    model: Printable = Field(max_length=4000)
    served_name: ServedName
    summary: Printable | None = Field(default=None, max_length=1000)
    requires: Requires
    context: int = Field(ge=1, le=MAX_CONTEXT)
    load_timeout_s: int = Field(ge=1, le=MAX_TIMEOUT_S)
    watchdog_s: int | None = Field(default=None, ge=1, le=MAX_TIMEOUT_S,
                                   description="hostctl: seconds without log progress before "
                                   "`up` calls the runtime stuck (default: min(load_timeout_s, 600))")
    # 16 s: twice the longest engine step the field reports imply (a 1M-token prefill at ~1,000
    # tokens/s in 8K chunks: ~8 s a step; 1-2.4 s at 4K chunks and 1,100-1,700 tokens/s), so a
    # working engine always moves a counter within it, and a freeze is judged within 16-24 s
    # (README "Supervision"). A host with slower steps sets it higher.
    # at least 5 s: 2.5 of the supervisor's 2 s polls, so one poll whose counters did not move is never a hang
    hang_timeout_s: int = Field(default=16, ge=5, le=MAX_TIMEOUT_S,
                                description="hostctl: seconds the ready runtime may go without progress (requests "
                                "in flight and the engine's counters still, or idle and a canary request not "
                                "completing) or without answering /health before `up --foreground` and `status` "
                                "call it hung (README \"Supervision\")")
    env: EnvMap = Field(default_factory=dict, max_length=500)
    serve_args: list[Printable] = Field(default_factory=list, max_length=500)
    warmup: dict[str, Any] = Field(default_factory=dict)
    suite_params: dict[str, Any] = Field(default_factory=dict)
    tuning: dict[str, Any] = Field(default_factory=dict)
    # hostctl's own fields.
    image: ImageRef | None = Field(default=None, description="runtime image the recipe runs in")
    revision: str | None = Field(default=None, description="the checkpoint commit (40 hex) the recipe was proven on: "
                                 "needed with a hub repository id as model; with a registry name it must match the "
                                 "models file's pin")
    architecture: Architecture = Field(default_factory=Architecture)
    conversion: Conversion = Field(default_factory=Conversion)
    storage: list[Role] = Field(default_factory=list)
    smoke: list[SmokeTest] = Field(default_factory=list)

    @model_validator(mode="after")
    def _needle_fits_context(self) -> "Recipe":
        for i, test in enumerate(self.smoke):
            if test.tokens is not None and test.tokens > self.context:
                raise ValueError(f"smoke[{i}].tokens {test.tokens} is more than the context {self.context}: the "
                                 "needle prompt could never be served")
        return self

    def args(self) -> "ServeArgs":
        return ServeArgs.parse(self.serve_args)

    def placeholders(self) -> list[tuple[str, re.Match]]:
        """Every placeholder the recipe writes, with the field it is in (`env.KEY`, `serve_args[i]`)."""
        texts = [("env." + k, str(v)) for k, v in self.env.items()] + [
            (f"serve_args[{i}]", e) for i, e in enumerate(self.serve_args)]
        return [(where, m) for where, text in texts for m in PLACEHOLDER_RE.finditer(text)]

    def placeholder_roles(self) -> set[str]:
        """The storage roles the recipe names by placeholder: roles it needs as surely as one in `storage:`
        (vLLM-MoET's recipes have no `storage:` list; their {planes_cache} is how they say it)."""
        return {m.group(1) for _, m in self.placeholders() if m.group(1) in ROLES}

    def needed_roles(self) -> set[str]:
        """Every storage role the recipe needs: those in `storage:` and those it names by placeholder."""
        return set(self.storage) | self.placeholder_roles()


class ServeArgs:
    """serve_args as vLLM-MoET writes them: each entry "flag value" (split on the first space),
    or a bare flag; a view by flag name for validation."""

    def __init__(self, pairs: list[tuple[str, str | None]]):
        self.pairs = pairs

    @classmethod
    def parse(cls, entries: list[str]) -> "ServeArgs":
        pairs: list[tuple[str, str | None]] = []
        for entry in entries:
            flag, _, value = entry.strip().partition(" ")
            if "=" in flag and flag.startswith("--"):
                flag, _, value = flag.partition("=")
            pairs.append((flag, value.strip() or None))
        return cls(pairs)

    def get(self, flag: str) -> str | None:
        for f, v in reversed(self.pairs):
            if f == flag:
                return v if v is not None else ""
        return None

    def argv(self) -> list[str]:
        out: list[str] = []
        for flag, value in self.pairs:
            out.append(flag)
            if value is not None:
                out.append(value)
        return out


def _secret_flag(flag: str) -> bool:
    return is_secret_name(flag.lstrip("-").replace("-", "_"))


def _owned_flag_problem(flag: str, value: str | None) -> str | None:
    """Why an entry sets a serve flag hostctl owns (hostctl.serveflags), in any spelling: the flag
    itself, or a value that argparse would read as an option after a flag that takes none."""
    from hostctl import serveflags

    if flag in serveflags.ACCEPTED_CANONICAL:
        problem = None
    else:
        problem = serveflags.refusal(flag)
    if problem is None and value is not None:
        problem = serveflags.refusal(value.strip())
    if problem is None:
        return None
    return problem + "; remove it from serve_args (`hostctl plan` shows the value hostctl sets)"


def recipe_problems(recipe: Recipe) -> list[str]:
    """Rules that follow from the field reports (docs/field-reports.md); each message names the field and the fix."""
    problems: list[str] = []
    args = recipe.args()
    for i, (flag, value) in enumerate(args.pairs):
        refused = _owned_flag_problem(flag, value)
        if refused:
            problems.append(f"serve_args[{i}]: {refused}")
        elif not flag.startswith("-"):
            problems.append(f"serve_args[{i}]: expected a flag such as '--max-num-seqs 2', got {flag[:80]!r}")
        elif not safetext.FLAG.fullmatch(flag):
            problems.append(f"serve_args[{i}]: {flag[:80]!r} is not a flag name (letters, digits and _.- after --)")
        elif value is not None and flag not in SECRET_FLAGS_TO_ENV and _secret_flag(flag):
            problems.append(f"serve_args[{i}]: {flag} carries a secret on the command line, where `ps`, compose.yaml "
                            "and `docker inspect` show it; pass it through env instead (redacted, mode 0600)")
    seqs = args.get("--max-num-seqs")
    if seqs is not None:
        try:
            n_seqs = int(seqs)
        except ValueError:
            problems.append(f"serve_args --max-num-seqs: expected an integer, got {seqs!r}")
            n_seqs = None
        if n_seqs is not None and recipe.architecture.sparse_mla and n_seqs < 2:
            problems.append(
                f"serve_args --max-num-seqs: {n_seqs} is too few for a sparse-MLA model: its warm-up needs one "
                "decode and one prefill request slot at once and fails with 'AssertionError: No free indices'; "
                "use --max-num-seqs 2 or more"
            )
    strategy = args.get("--safetensors-load-strategy")
    if strategy == "eager" and (recipe.architecture.checkpoint_scale_dtype or "").upper() == "F8_E8M0":
        problems.append(
            "serve_args --safetensors-load-strategy: 'eager' cannot decode this checkpoint's F8_E8M0 scales; "
            "remove the flag (the default streamed, memory-mapped loader works)"
        )
    model_len = args.get("--max-model-len")
    if model_len is not None and model_len.isdigit() and int(model_len) != recipe.context:
        problems.append(
            f"serve_args --max-model-len: {model_len} differs from context {recipe.context}; "
            "drop the flag (hostctl passes context as --max-model-len) or make them equal"
        )
    tp = args.get("--tensor-parallel-size")
    if tp is not None and tp.isdigit() and recipe.requires.gpus and int(tp) > recipe.requires.gpus:
        problems.append(
            f"serve_args --tensor-parallel-size: {tp} is more than requires.gpus {recipe.requires.gpus}"
        )
    for where, m in recipe.placeholders():
        if m.group(1) not in KNOWN_PLACEHOLDERS:
            problems.append(
                f"{where}: unknown placeholder {{{m.group(1)}}}; known: {{planes_cache}}, {{expert_store}}, {{model}}, "
                "{model:NAME}"
            )
        elif m.group(0) == "{model}":
            pass  # the recipe's own checkpoint, as vLLM-MoET's _resolve_str reads a bare {model}
        elif m.group(1) == "model" and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", m.group(2) or ""):
            problems.append(f"{where}: {{model:{m.group(2)}}}: NAME is one directory name under runtime.models_dir "
                            "(letters, digits and ._-; no '/' or '..')")
        elif m.group(1) == "model" and m.group(2) not in recipe.requires.extra_models:
            # Only the extra models are pinned, fetched and checked (and vLLM-MoET mounts only those into
            # its container), so a name outside the list would reach an unchecked directory.
            problems.append(f"{where}: {{model:{m.group(2)}}} names a model that requires.extra_models does not list "
                            f"({', '.join(recipe.requires.extra_models) or 'none'}); add {m.group(2)} there")
    return problems


# ---------------------------------------------------------------- loading


def _format_validation(exc: ValidationError, source: str,
                       fix: str = "correct the fields named above; nothing was changed") -> InputError:
    details = []
    for err in exc.errors():
        # "[key]": the key of a map is what is wrong; the map's entry names it
        loc = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in err["loc"] if p != "[key]")
        loc = loc.replace(".[", "[")
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling; see the bundled examples for the fields)"
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif "input" in err and err["type"] not in ("value_error", "assertion_error"):
            shown = repr(err["input"])
            msg = f"{msg} (got {shown if len(shown) <= 100 else shown[:100] + '...'})"
        # A validator that names the entry itself (env.HF_TOKEN: ...) is not prefixed twice.
        details.append(msg if not loc or msg.startswith((loc + ".", loc + "[")) else f"{loc}: {msg}")
    return InputError(f"{source} is not valid", details=details, fix=fix)


def parse_profile(data: dict, source: str = "profile") -> HostProfile:
    from pydantic import ValidationError

    try:
        return HostProfile.model_validate(data)
    except ValidationError as exc:
        raise _format_validation(exc, source) from None


def parse_recipe(data: Any, source: str = "recipe") -> Recipe:
    if not isinstance(data, dict):
        raise InputError(f"{source} is not valid", details=[f"expected a mapping at the top level, got {type(data).__name__}"])
    from pydantic import ValidationError

    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        raise _format_validation(exc, source) from None
    problems = recipe_problems(recipe)
    if problems:
        raise InputError(f"{source} is not valid", details=problems, fix="correct the fields named above; nothing was changed")
    return recipe


def _is_file(path: Path) -> bool:
    try:
        return path.is_file()
    except OSError:  # a name too long, a permission denied on the way
        return False


def find_profile(explicit: Path | None) -> Path:
    if explicit is not None:
        if not _is_file(explicit):
            problem = safepaths.lexical_problem(str(explicit.absolute())) if str(explicit) else "empty path"
            raise InputError(f"config file {str(explicit)[:200]} does not exist" + (f" ({problem})" if problem else ""),
                             fix="pass --config PATH to a host profile (TOML)")
        return explicit
    found = paths.searched_profile()
    if found is not None:
        return found
    raise paths.no_profile_error()


def load_profile(path: Path) -> HostProfile:
    return load_profile_text(path)[0]


def load_profile_text(path: Path) -> tuple[HostProfile, str]:
    """The profile at `path` and its text as read and validated (what Config.source_text keeps)."""
    from hostctl.safeload import parse_toml, read_text

    text = read_text(path, "host profile")
    return parse_profile(parse_toml(text, path, "host profile"), str(path)), text


def recipe_path(ref: str, relative_to: Path | None = None) -> Path:
    """A recipe reference is a bundled name or a path (relative to the profile's folder)."""
    if ref.endswith((".yaml", ".yml")) or "/" in ref:
        p = Path(ref)
        if not p.is_absolute() and relative_to is not None:
            p = relative_to / p
        return p
    return paths.recipes_dir() / f"{ref}.yaml"


def load_recipe(path: Path) -> Recipe:
    from hostctl.safeload import load_yaml

    if not _is_file(path):
        bundled = sorted(p.stem for p in paths.recipes_dir().glob("*.yaml"))
        raise InputError(f"recipe {str(path)[:200]} does not exist",
                         fix=f"name a bundled recipe ({', '.join(bundled)}) or a YAML path")
    doc = load_yaml(path, "recipe")
    refuse_unquoted_env(doc, f"{path} is not valid", "nothing was changed")
    return parse_recipe(doc.data, str(path))


def refuse_unquoted_env(doc, title: str, nothing: str) -> None:
    """A YAML file's `env` values must be the text their author wrote (a recipe's, a box's)."""
    rewritten = doc.plain_scalars("env")
    if rewritten:
        # Said with the text the author wrote: YAML 1.1 already turned `no` into false, `010` into 8.
        raise InputError(title, details=[
            f"env.{name}: {text!r} is read by YAML as a {tag}, not the text {text!r}; write it in quotes: "
            f'{name}: "{text}"' for name, (tag, text) in sorted(rewritten.items())],
            fix=f"quote every env value; {nothing}")


class Config(Data):
    """A validated profile with its recipe, and the warnings loading produced."""

    profile: HostProfile
    recipe: Recipe
    source: str
    warnings: list[str] = Field(default_factory=list)
    # The profile text exactly as validated (a UTF-8 BOM dropped): what provision installs, verify
    # compares and the bundle carries, never re-read by path (a path re-read by the kernel may
    # reach another file than the one checked).
    source_text: str = ""


def _validated(path: Path) -> Config:
    profile, text = load_profile_text(path)
    recipe = recipe_path(profile.recipe, path.parent)
    warnings = [
        f"drives[{i}].identity {d.identity}: kernel device names can change between boots; "
        "prefer serial:, wwn: or by-id:"
        for i, d in enumerate(profile.drives)
        if d.identity.kind == "path"
    ]
    return Config(profile=profile, recipe=load_recipe(recipe), source=str(path), warnings=warnings,
                  source_text=text)


def load_config(explicit: Path | None) -> Config:
    from hostctl import safefs, secrets

    path = find_profile(explicit)
    try:
        # One resolution: the real path, as the kernel reaches it (`~/link/../p.toml` is the
        # p.toml beside the link's target), is what is validated and named later.
        path = safefs.real_path(path)
    except (OSError, safefs.UntrustedPathError):
        pass  # validation reads the same path and says what is wrong with it
    config = _validated(path)
    # From here on every output of this process hides these values (hostctl.secrets).
    secrets.remember(secrets.from_config(config))
    return config
