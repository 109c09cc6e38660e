"""A vLLM-MoET box file (bench/boxes/*.yaml), read as data for `hostctl init --box`.

A box is how vLLM-MoET's users describe a host: its GPUs, host RAM, runtime (a venv or a Docker
image), shm size, environment, each model's local path and planes cache, a log folder and the
quality tool. vLLM-MoET's runner reads it with bench/runner/common.py: load_box (safe_load, then
defaults for env, models, planes_cache and log_dir). hostctl reads the same file through its own
loader (hostctl.safeload: size, depth, alias and duplicate-key caps) and checks every field, since
its values end up in a profile that root acts on: model names are registry names (one directory
under /models), paths are absolute without `..`, env names and values follow the recipe env rules.
Every problem names its field (`gpus.count`, `models.<NAME>`) and the whole box is refused with
all of them (exit 2). Keys a box does not define are kept and reported, never dropped silently.
The box is a record (`Box`, hostctl.config.Written): the file's keys are its fields, with `file`,
where it was read from, added.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, ConfigDict, Field, model_validator

from hostctl import safepaths, safetext
from hostctl.bytesizes import parse_size
from hostctl.config import Written, _format_validation, env_problem, refuse_unquoted_env
from hostctl.errors import InputError
from hostctl.safepaths import HostPath
from hostctl.safetext import MODEL_NAME, ImageRef, Printable

BOX_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
SHA256 = re.compile(r"[0-9a-f]{64}")
# Box env knobs for vLLM-MoET's venv runtime only: its docker runtime never passes them into the
# image (bench/runner/common.py: _VENV_ONLY_ENV), and hostctl always runs an image, so a profile
# never carries them. Why each one has no meaning inside the image:
VENV_ONLY_ENV = {
    "PATH_PREPEND": "prepended to PATH for the venv's `vllm`; the image has its own PATH",
    "LD_LIBRARY_PATH_PREPEND": "prepended to LD_LIBRARY_PATH for the host's CUDA; the image ships its own "
                               "libraries (and LD_* is hostctl's: hostctl/serveflags.py)",
    "CUDA_HOME": "the host's CUDA toolkit; the image ships its own",
    "FLASHINFER_CUDA_ARCH_LIST": "the host venv's JIT target list; the image is built for its GPUs",
    "VLLM_MOE_W2_CUBIT_DIR": "a kernel folder in a host checkout; the image carries its kernels",
}


def _none_is_empty(v: Any) -> Any:
    return {} if v is None else v  # vLLM-MoET's load_box: a key left empty is an empty map


def _box_env(v: Any) -> Any:
    if not isinstance(v, dict):
        return v
    for k, value in v.items():
        # A venv-only knob is checked as text only: it is never passed on (VENV_ONLY_ENV).
        problem = ((safetext.text_problem(value) if isinstance(value, str) else "expected a string")
                   if k in VENV_ONLY_ENV else env_problem(k, value))
        if problem:
            raise ValueError(f"env.{str(k)[:80]}: {problem}")
    return v


def _shm_size(v: Any) -> str:
    # Only whether it is a size: hostctl does not pass it on (box_profile.py says why).
    try:
        if isinstance(v, bool):
            raise ValueError("a boolean is not a size")
        parse_size(v)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"expected a size such as 64g: {exc}") from None
    return str(v)


# A host path a box names: absolute, no `..`, in its normal form.
BoxPath = Annotated[HostPath, AfterValidator(safepaths.normalise)]
BoxModelName = Annotated[str, safetext.rule(lambda v: safetext.match_problem(
    v, MODEL_NAME, "a registry name such as DeepSeek-V4-Flash (letters, digits and ._-; no '/' or '..')")
    or ("not a registry name" if v in ("..", ".") else None))]
ModelPaths = Annotated[dict[BoxModelName, BoxPath], BeforeValidator(_none_is_empty)]


class BoxGpus(Written):
    # A key vLLM-MoET's runner does not read is kept and reported (gpus.X), never refused.
    model_config = ConfigDict(extra="allow")

    name: Printable = ""
    count: int = Field(ge=0, le=64)
    vram_gb: float = Field(ge=0, le=10_000)  # compat compares it with the recipe's requires


class Box(Written):
    # vLLM-MoET's runner ignores keys it does not read; hostctl keeps them and reports them.
    model_config = ConfigDict(extra="allow")

    file: Path  # absolute; where it was read from, not a key of the file
    id: Annotated[str, safetext.rule(lambda v: safetext.match_problem(
        v, BOX_ID, "an id such as rtx-pro6000x4 (letters, digits and ._-)"))]
    gpus: BoxGpus
    host_ram_gb: float = Field(ge=0, le=1_000_000)
    runtime: Literal["venv", "docker"] = "venv"  # vLLM-MoET's default (build_serve_cmd: box.get("runtime", "venv"))
    venv: BoxPath | None = None
    docker_image: ImageRef | None = None
    shm_size: Annotated[str, BeforeValidator(_shm_size)] | None = None
    env: Annotated[dict[str, str], BeforeValidator(_box_env), BeforeValidator(_none_is_empty)] = {}
    models: ModelPaths = {}  # registry name -> host path
    planes_cache: ModelPaths = {}  # registry name -> host path
    log_dir: BoxPath | None = None
    quality_tool: BoxPath | None = None
    quality_tool_sha256: Annotated[str, safetext.rule(lambda v: safetext.match_problem(
        v, SHA256, "64 lowercase hex digits"))] | None = None

    @model_validator(mode="after")
    def _docker_needs_image(self) -> "Box":
        if self.runtime == "docker" and self.docker_image is None:
            raise ValueError("docker_image: runtime docker needs docker_image (vLLM-MoET refuses the box too)")
        return self

    @property
    def name(self) -> str:
        return self.file.name

    @property
    def gpu_name(self) -> str:
        return self.gpus.name

    @property
    def gpu_count(self) -> int:
        return self.gpus.count

    @property
    def vram_gb(self) -> float:
        return self.gpus.vram_gb

    @property
    def unknown(self) -> dict[str, Any]:
        """The keys vLLM-MoET's runner does not read (gpus.X too)."""
        return dict(self.model_extra or {}) | {f"gpus.{k}": v for k, v in (self.gpus.model_extra or {}).items()}

    def bench_dir(self) -> Path | None:
        """The vLLM-MoET bench folder the box lives in (bench/boxes/BOX.yaml), or None."""
        bench = self.file.parent.parent
        return bench if self.file.parent.name == "boxes" and (bench / "recipes").is_dir() else None


def parse_box(data: Any, path: Path) -> Box:
    """The box from its parsed YAML; InputError (exit 2) listing every field that is wrong."""
    where = f"box {path}"
    if not isinstance(data, dict):
        raise InputError(f"{where} is not valid", details=[f"expected a mapping at the top level, got "
                                                           f"{type(data).__name__}"],
                         fix="a box is vLLM-MoET's bench/boxes/*.yaml format: id, gpus, host_ram_gb, runtime, models")
    from pydantic import ValidationError

    try:
        return Box.model_validate({**data, "file": path})
    except ValidationError as exc:
        raise _format_validation(exc, where, fix="correct the fields named above (vLLM-MoET's bench/README.md "
                                 "describes a box); nothing was written") from None


def load_box(path: Path) -> Box:
    """Read and check a box file (hostctl's loader: trusted owner, size and alias caps, no duplicate keys)."""
    from hostctl.safeload import load_yaml

    # Lexically absolute, `..` taken out (cli.typed_path's rule): the profile's [box].file refuses
    # a path with `..`, and `--box ../bench/boxes/B.yaml` is how one names a box beside a checkout.
    path = Path(os.path.abspath(path))
    doc = load_yaml(path, "box")
    refuse_unquoted_env(doc, f"box {path} is not valid", "nothing was written")
    return parse_box(doc.data, path)
