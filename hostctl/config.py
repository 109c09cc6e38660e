"""The host profile (TOML) and the recipe (YAML): their schema, loading and validation.

A profile describes one host: its drives (by stable identity), GPU power limits, memory
policy, storage roles, the phase, and the recipe it serves. A recipe is a vLLM-MoET bench
recipe, accepted unchanged, plus hostctl's own fields (smoke suite, storage needs,
architecture facts). `env`, `warmup`, `tuning` and `suite_params` are open maps; every
other unknown key is an error naming its path. Validation never opens model files: what it
needs to know about the checkpoint, the recipe declares under `architecture`.
"""

from __future__ import annotations

import ipaddress
import re
import tomllib
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hostctl import paths
from hostctl.errors import InputError
from hostctl.units import parse_size

Phase = Literal["converting", "serving"]
ROLE_NAMES = ("planes_cache", "expert_store", "compile_cache")
PLACEHOLDER_RE = re.compile(r"\{([a-z_]+)(?::([^{}]+))?\}")
KNOWN_PLACEHOLDERS = {"planes_cache", "expert_store", "model"}
XFS_NAME_MAX = 5  # "hcdata-" + 5 characters = xfs's 12-byte label


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# ---------------------------------------------------------------- drive identity


class DriveIdentity(Strict):
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
        if kind == "path" and not value.startswith("/dev/"):
            raise ValueError(f"a path: identity must name a device under /dev, got {value!r}")
        return cls(kind=kind, value=value)

    def __str__(self) -> str:
        return f"{self.kind}:{self.value}"


# ---------------------------------------------------------------- host profile


class Drive(Strict):
    # The name goes into filesystem labels: "hcdata-<name>" must fit ext4's 16 bytes (so <= 9
    # characters) and, for xfs, its 12 bytes (<= 5 characters; checked below).
    name: str = Field(pattern=r"^[a-z][a-z0-9-]{0,8}$", description="short name (<= 9 chars: it goes into 16-byte filesystem labels)")
    identity: DriveIdentity
    swap: int = Field(default=0, description="swap partition size in bytes (0: no swap partition)")
    swap_priority: int = Field(default=100, ge=-1, le=32767)
    filesystem: Literal["ext4", "xfs"] = "ext4"
    mountpoint: str | None = None
    mount_options: list[str] = Field(
        default_factory=list,
        description="extra mount options for the data filesystem, added to defaults,noatime,nofail "
        "(e.g. noinit_itable for sparse test images, discard)")

    @field_validator("identity", mode="before")
    @classmethod
    def _identity(cls, v: Any) -> Any:
        return DriveIdentity.parse(v) if isinstance(v, str) else v

    @field_validator("swap", mode="before")
    @classmethod
    def _size(cls, v: Any) -> int:
        return parse_size(v)

    @field_validator("mountpoint")
    @classmethod
    def _mount(cls, v: str | None) -> str | None:
        if v is not None and (not v.startswith("/") or v == "/"):
            raise ValueError(f"expected an absolute path other than /, got {v!r}")
        return v

    @field_validator("mount_options")
    @classmethod
    def _options(cls, v: list[str]) -> list[str]:
        for option in v:
            if not re.match(r"^[A-Za-z0-9_.=:/+-]+$", option):
                raise ValueError(f"mount option {option!r}: expected one option such as 'discard' "
                                 "(letters, digits and _.=:/+- only; no commas or spaces)")
        return v

    @model_validator(mode="after")
    def _label_fits(self) -> "Drive":
        if self.filesystem == "xfs" and len(self.name) > XFS_NAME_MAX:
            raise ValueError(f"name {self.name!r}: an xfs label holds 12 bytes, so a drive formatted as xfs needs a "
                             f"name of at most {XFS_NAME_MAX} characters (its label is 'hcdata-<name>')")
        return self

    @property
    def mount(self) -> str:
        return self.mountpoint or f"/mnt/hostctl/{self.name}"


class MemoryPolicy(Strict):
    host_reserve: int = Field(default=8 * 1024**3, description="physical RAM kept outside the container")
    reservation_margin: int = Field(default=4 * 1024**3, description="soft limit this far below the hard cap")
    container_ram_swap: int | None = Field(default=None, description="container RAM+swap cap; default derived")
    container_ram: int | None = Field(default=None, description="container RAM cap; default MemTotal minus host_reserve")

    @field_validator("host_reserve", "reservation_margin", "container_ram_swap", "container_ram", mode="before")
    @classmethod
    def _size(cls, v: Any) -> Any:
        return None if v is None else parse_size(v)


class GpuPolicy(Strict):
    devices: list[str] | None = Field(default=None, description="GPU UUIDs or indices to serve on; default: the first N")
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
        if v is not None and not v > 0:
            raise ValueError(f"expected a positive number of watts, got {v}")
        return v

    @field_validator("power_limits_w")
    @classmethod
    def _positive_each(cls, v: dict[str, float]) -> dict[str, float]:
        for key, watts in v.items():
            if not watts > 0:
                raise ValueError(f"power limit for GPU {key!r}: expected a positive number of watts, got {watts}")
        return v


class StorageRoles(Strict):
    """Which drive (by name) or directory (absolute path) holds each cache role."""

    planes_cache: str | None = None
    expert_store: str | None = None
    compile_cache: str | None = None
    rank_stores: list[str] = Field(default_factory=list, description="drive for each TP rank's store, in rank order")
    swappiness_converting: int = Field(default=100, ge=0, le=200)
    swappiness_serving: int = Field(default=10, ge=0, le=200)
    page_cluster: int = Field(default=0, ge=0, le=10)


class RuntimeSettings(Strict):
    image: str | None = Field(default=None, description="override the recipe's runtime image")
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8000, ge=1, le=65535)
    api_key_env: str | None = Field(default=None, description="name of the environment variable holding the API key")
    model_dir: str | None = Field(default=None, description="host directory of the checkpoint, mounted read-only")
    models_dir: str | None = Field(default=None, description="host directory holding extra models ({model:NAME})")
    # `hostctl model` (README "model"): where registry names resolve, and a host-local pin.
    models_file: str | None = Field(default=None, description="a models file (vLLM-MoET's bench/models.yaml format) "
                                    "resolving the recipe's model name; default: the bundled runtime/models.yaml")
    model_revision: str | None = Field(default=None, description="pin the checkpoint to this commit (40 hex) on "
                                       "this host, over the recipe's or the models file's revision")
    project_dir: str = Field(default=str(paths.STATE_DIR / "project"), description="where the rendered project lives")
    project: str = Field(default="hostctl", pattern=r"^[a-z0-9][a-z0-9_-]{0,40}$",
                         description="Compose project name; the container is <project>-runtime")

    @field_validator("api_host")
    @classmethod
    def _host(cls, v: str) -> str:
        try:
            ipaddress.ip_address(v)
        except ValueError:
            raise ValueError(f"expected an IP address such as 127.0.0.1, got {v!r}") from None
        return v

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


class HostProfile(Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9._-]*$")
    description: str = ""
    recipe: str = Field(description="bundled recipe name or a path to a recipe YAML")
    phase: Phase = "serving"
    drives: list[Drive] = Field(default_factory=list)
    memory: MemoryPolicy = Field(default_factory=MemoryPolicy)
    gpu: GpuPolicy = Field(default_factory=GpuPolicy)
    storage: StorageRoles = Field(default_factory=StorageRoles)
    runtime: RuntimeSettings = Field(default_factory=RuntimeSettings)

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
        for role in ROLE_NAMES:
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


class Requires(Strict):
    gpus: int = Field(ge=0)
    vram_gb: float | None = Field(default=None, ge=0)
    host_ram_gb: float | None = Field(default=None, ge=0)
    extra_models: list[str] = Field(default_factory=list)


class Architecture(Strict):
    """What validation must know about the model, declared here so it never opens model files."""

    sparse_mla: bool = False
    checkpoint_scale_dtype: str | None = Field(default=None, description="e.g. F8_E8M0")


class Conversion(Strict):
    """What the first start (building planes and packs) needs from the host."""

    host_ram_swap_gib: float = Field(default=0, ge=0, description="host MemTotal + SwapTotal needed")
    cache_free_gib: float = Field(default=0, ge=0, description="free space needed on the cache filesystems")
    layers: int | None = Field(default=None, ge=1, description="layers converted, for progress")


class SmokeTest(Strict):
    name: str
    kind: Literal["chat", "tool_call", "models", "needle"]
    prompt: str | None = None
    expect: str | None = None
    tool: dict[str, Any] | None = None
    expect_call: dict[str, Any] | None = None
    tokens: int | None = Field(default=None, ge=1, description="needle: prompt length in tokens")
    max_completion_tokens: int = Field(default=16, ge=1)

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


class Recipe(Strict):
    # vLLM-MoET bench recipe fields, accepted unchanged.
    id: str
    role: str | None = None
    model: str
    served_name: str
    summary: str | None = None
    requires: Requires
    context: int = Field(ge=1)
    load_timeout_s: int = Field(ge=1)
    watchdog_s: int | None = Field(default=None, ge=1, description="hostctl: seconds without log progress before "
                                   "`up` calls the runtime stuck (default: min(load_timeout_s, 600))")
    env: dict[str, Any] = Field(default_factory=dict)
    serve_args: list[str] = Field(default_factory=list)
    warmup: dict[str, Any] = Field(default_factory=dict)
    suite_params: dict[str, Any] = Field(default_factory=dict)
    tuning: dict[str, Any] = Field(default_factory=dict)
    # hostctl's own fields.
    image: str | None = Field(default=None, description="runtime image the recipe runs in")
    revision: str | None = Field(default=None, description="the checkpoint commit (40 hex) the recipe was proven on: "
                                 "needed with a hub repository id as model; with a registry name it must match the "
                                 "models file's pin")
    architecture: Architecture = Field(default_factory=Architecture)
    conversion: Conversion = Field(default_factory=Conversion)
    storage: list[Literal["planes_cache", "expert_store", "compile_cache"]] = Field(default_factory=list)
    smoke: list[SmokeTest] = Field(default_factory=list)

    @field_validator("env")
    @classmethod
    def _env_scalars(cls, v: dict[str, Any]) -> dict[str, Any]:
        for key, value in v.items():
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                raise ValueError(f"env key {key!r} is not a valid environment variable name")
            if isinstance(value, (dict, list)):
                raise ValueError(f"env.{key}: expected a string, number or boolean, got {type(value).__name__}")
        return v

    def args(self) -> "ServeArgs":
        return ServeArgs.parse(self.serve_args)


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

    def has(self, flag: str) -> bool:
        return any(f == flag for f, _ in self.pairs)

    def argv(self) -> list[str]:
        out: list[str] = []
        for flag, value in self.pairs:
            out.append(flag)
            if value is not None:
                out.append(value)
        return out


def recipe_problems(recipe: Recipe) -> list[str]:
    """Rules that follow from the field reports; each message names the field and the fix."""
    problems: list[str] = []
    args = recipe.args()
    for i, (flag, value) in enumerate(args.pairs):
        if not flag.startswith("-"):
            problems.append(f"serve_args[{i}]: expected a flag such as '--max-num-seqs 2', got {flag!r}")
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
    texts = [("env." + k, str(v)) for k, v in recipe.env.items()] + [
        (f"serve_args[{i}]", e) for i, e in enumerate(recipe.serve_args)
    ]
    for where, text in texts:
        for m in PLACEHOLDER_RE.finditer(text):
            if m.group(1) not in KNOWN_PLACEHOLDERS:
                problems.append(
                    f"{where}: unknown placeholder {{{m.group(1)}}}; known: {{planes_cache}}, {{expert_store}}, {{model:NAME}}"
                )
    return problems


# ---------------------------------------------------------------- loading


def _format_validation(exc: ValidationError, source: str) -> InputError:
    details = []
    for err in exc.errors():
        loc = ".".join(str(p) if not isinstance(p, int) else f"[{p}]" for p in err["loc"]).replace(".[", "[")
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key (check the spelling; see the bundled examples for the fields)"
        elif err["type"] == "missing":
            msg = "required field is missing"
        elif "input" in err and err["type"] not in ("value_error", "assertion_error"):
            msg = f"{msg} (got {err['input']!r})"
        details.append(f"{loc}: {msg}" if loc else msg)
    return InputError(f"{source} is not valid", details=details, fix="correct the fields named above; nothing was changed")


def parse_profile(data: dict, source: str = "profile") -> HostProfile:
    try:
        return HostProfile.model_validate(data)
    except ValidationError as exc:
        raise _format_validation(exc, source) from None


def parse_recipe(data: Any, source: str = "recipe") -> Recipe:
    if not isinstance(data, dict):
        raise InputError(f"{source} is not valid", details=[f"expected a mapping at the top level, got {type(data).__name__}"])
    try:
        recipe = Recipe.model_validate(data)
    except ValidationError as exc:
        raise _format_validation(exc, source) from None
    problems = recipe_problems(recipe)
    if problems:
        raise InputError(f"{source} is not valid", details=problems, fix="correct the fields named above; nothing was changed")
    return recipe


def find_profile(explicit: Path | None) -> Path:
    if explicit is not None:
        if not explicit.is_file():
            raise InputError(f"config file {explicit} does not exist", fix="pass --config PATH to a host profile (TOML)")
        return explicit
    for candidate in paths.PROFILE_SEARCH:
        if candidate.is_file():
            return candidate
    raise InputError(
        "no host profile found",
        details=[f"looked for {', '.join(str(p) for p in paths.PROFILE_SEARCH)}"],
        fix="pass --config PATH, or start from a bundled example: runtime/hosts/demo-cpu.toml",
    )


def load_profile(path: Path) -> HostProfile:
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{path} is not valid TOML", details=[str(exc)]) from None
    return parse_profile(data, str(path))


def recipe_path(ref: str, relative_to: Path | None = None) -> Path:
    """A recipe reference is a bundled name or a path (relative to the profile's folder)."""
    if ref.endswith((".yaml", ".yml")) or "/" in ref:
        p = Path(ref)
        if not p.is_absolute() and relative_to is not None:
            p = relative_to / p
        return p
    return paths.recipes_dir() / f"{ref}.yaml"


def load_recipe(path: Path) -> Recipe:
    if not path.is_file():
        bundled = sorted(p.stem for p in paths.recipes_dir().glob("*.yaml"))
        raise InputError(f"recipe {path} does not exist", fix=f"name a bundled recipe ({', '.join(bundled)}) or a YAML path")
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise InputError(f"{path} is not valid YAML", details=[str(exc)]) from None
    return parse_recipe(data, str(path))


class Config(BaseModel):
    """A validated profile with its recipe, and the warnings loading produced."""

    model_config = ConfigDict(frozen=True)

    profile: HostProfile
    recipe: Recipe
    source: str
    warnings: list[str] = Field(default_factory=list)


def load_config(explicit: Path | None) -> Config:
    path = find_profile(explicit)
    profile = load_profile(path)
    recipe = load_recipe(recipe_path(profile.recipe, path.parent))
    warnings = [
        f"drives[{i}].identity {d.identity}: kernel device names can change between boots; "
        "prefer serial:, wwn: or by-id:"
        for i, d in enumerate(profile.drives)
        if d.identity.kind == "path"
    ]
    return Config(profile=profile, recipe=recipe, source=str(path), warnings=warnings)
