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
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hostctl import safepaths, safetext
from hostctl.bytesizes import parse_size
from hostctl.config import MODEL_NAME, env_problem, refuse_unquoted_env
from hostctl.errors import InputError

BOX_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
SHA256 = re.compile(r"[0-9a-f]{64}")
# The keys vLLM-MoET's runner reads from a box (bench/runner/common.py and bench/README.md).
KNOWN_KEYS = ("id", "gpus", "host_ram_gb", "runtime", "venv", "docker_image", "shm_size", "env", "models",
              "planes_cache", "log_dir", "quality_tool", "quality_tool_sha256")
GPU_KEYS = ("name", "count", "vram_gb")
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


@dataclass(frozen=True)
class Box:
    file: Path  # absolute
    id: str
    gpu_name: str
    gpu_count: int
    vram_gb: float
    host_ram_gb: float
    runtime: str  # venv | docker
    venv: str | None
    docker_image: str | None
    shm_size: str | None
    env: dict[str, str]
    models: dict[str, str]  # registry name -> host path
    planes_cache: dict[str, str]  # registry name -> host path
    log_dir: str | None
    quality_tool: str | None
    quality_tool_sha256: str | None
    unknown: dict[str, Any] = field(default_factory=dict)  # keys vLLM-MoET's runner does not read (gpus.X too)

    @property
    def name(self) -> str:
        return self.file.name

    def bench_dir(self) -> Path | None:
        """The vLLM-MoET bench folder the box lives in (bench/boxes/BOX.yaml), or None."""
        bench = self.file.parent.parent
        return bench if self.file.parent.name == "boxes" and (bench / "recipes").is_dir() else None


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


class _Checker:
    def __init__(self) -> None:
        self.problems: list[str] = []

    def bad(self, where: str, problem: str) -> None:
        self.problems.append(f"{where}: {problem}")

    def text(self, data: dict, key: str, where: str | None = None) -> str | None:
        v = data.get(key)
        if v is None:
            return None
        problem = safetext.text_problem(v) if isinstance(v, str) else f"expected text, got {type(v).__name__}"
        if problem:
            self.bad(where or key, problem)
            return None
        return v

    def path(self, v: Any, where: str) -> str | None:
        if v is None:
            return None
        if not isinstance(v, str):
            self.bad(where, f"expected an absolute path, got {type(v).__name__}")
            return None
        problem = safepaths.lexical_problem(v)
        if problem:
            self.bad(where, problem)
            return None
        return safepaths.normalise(v)

    def number(self, data: dict, key: str, where: str, lo: float, hi: float, *, integer: bool = False) -> Any:
        """A required number within [lo, hi] (compat compares it with the recipe's requires)."""
        if key not in data:
            self.bad(where, "required field is missing")
            return None
        v = data[key]
        if not _number(v) or (integer and not isinstance(v, int)):
            self.bad(where, f"expected {'a whole number' if integer else 'a number'}, got {v!r}"[:200])
            return None
        if not lo <= v <= hi:
            self.bad(where, f"{v} is outside {lo:g}..{hi:g}")
            return None
        return v

    def name_map(self, data: dict, key: str) -> dict[str, str]:
        v = data.get(key)
        if v is None:
            return {}
        if not isinstance(v, dict):
            self.bad(key, f"expected a map of model name to host path, got {type(v).__name__}")
            return {}
        out = {}
        for name, path in v.items():
            problem = safetext.match_problem(name, MODEL_NAME, "a registry name such as DeepSeek-V4-Flash "
                                             "(letters, digits and ._-; no '/' or '..')")
            if problem or name in ("..", "."):
                self.bad(f"{key}.{str(name)[:80]}", problem or "not a registry name")
                continue
            checked = self.path(path, f"{key}.{name}")
            if checked is not None:
                out[name] = checked
        return out


def parse_box(data: Any, path: Path) -> Box:
    """The box from its parsed YAML; InputError (exit 2) listing every field that is wrong."""
    where = f"box {path}"
    if not isinstance(data, dict):
        raise InputError(f"{where} is not valid", details=[f"expected a mapping at the top level, got "
                                                           f"{type(data).__name__}"],
                         fix="a box is vLLM-MoET's bench/boxes/*.yaml format: id, gpus, host_ram_gb, runtime, models")
    c = _Checker()
    box_id = data.get("id")
    if box_id is None:
        c.bad("id", "required field is missing")
    elif (p := safetext.match_problem(box_id, BOX_ID, "an id such as rtx-pro6000x4 (letters, digits and ._-)")):
        c.bad("id", p)
    gpus = data.get("gpus")
    gpu_name, count, vram = "", None, None
    if not isinstance(gpus, dict):
        c.bad("gpus", "required: a map {name, count, vram_gb}" if gpus is None else
              f"expected a map {{name, count, vram_gb}}, got {type(gpus).__name__}")
    else:
        gpu_name = c.text(gpus, "name", "gpus.name") or ""
        count = c.number(gpus, "count", "gpus.count", 0, 64, integer=True)
        vram = c.number(gpus, "vram_gb", "gpus.vram_gb", 0, 10_000)
    ram = c.number(data, "host_ram_gb", "host_ram_gb", 0, 1_000_000)
    runtime = data.get("runtime", "venv")  # vLLM-MoET's default (build_serve_cmd: box.get("runtime", "venv"))
    if runtime not in ("venv", "docker"):
        c.bad("runtime", f"expected venv or docker, got {runtime!r}"[:200])
    venv = c.path(data.get("venv"), "venv")
    image = data.get("docker_image")
    if image is not None and (p := safetext.image_problem(image)):
        c.bad("docker_image", p)
        image = None
    if runtime == "docker" and image is None and "docker_image" not in data:
        c.bad("docker_image", "runtime docker needs docker_image (vLLM-MoET refuses the box too)")
    shm = data.get("shm_size")
    if shm is not None:
        try:
            if isinstance(shm, bool):
                raise ValueError("a boolean is not a size")
            parse_size(shm)  # only whether it is a size: hostctl does not pass it on (box_profile.py says why)
        except (ValueError, TypeError) as exc:
            c.bad("shm_size", f"expected a size such as 64g: {exc}")
            shm = None
    env: dict[str, str] = {}
    raw_env = data.get("env") or {}
    if not isinstance(raw_env, dict):
        c.bad("env", f"expected a map of variable to value, got {type(raw_env).__name__}")
    else:
        for k, v in raw_env.items():
            # A venv-only knob is checked as text only: it is never passed on (VENV_ONLY_ENV).
            problem = (safetext.text_problem(v) if isinstance(v, str) else "expected a string") \
                if k in VENV_ONLY_ENV else env_problem(k, v)
            if problem:
                c.bad(f"env.{str(k)[:80]}", problem)
            else:
                env[k] = v
    models = c.name_map(data, "models")
    planes = c.name_map(data, "planes_cache")
    log_dir = c.path(data.get("log_dir"), "log_dir")
    tool = c.path(data.get("quality_tool"), "quality_tool")
    sha = data.get("quality_tool_sha256")
    if sha is not None and (p := safetext.match_problem(sha, SHA256, "64 lowercase hex digits")):
        c.bad("quality_tool_sha256", p)
    if c.problems:
        raise InputError(f"{where} is not valid", details=c.problems,
                         fix="correct the fields named above (vLLM-MoET's bench/README.md describes a box); "
                         "nothing was written")
    return Box(file=path, id=box_id, gpu_name=gpu_name, gpu_count=count, vram_gb=vram, host_ram_gb=ram,
               runtime=runtime, venv=venv, docker_image=image, shm_size=None if shm is None else str(shm), env=env,
               models=models, planes_cache=planes, log_dir=log_dir, quality_tool=tool, quality_tool_sha256=sha,
               unknown={k: v for k, v in data.items() if k not in KNOWN_KEYS}
               | {f"gpus.{k}": v for k, v in gpus.items() if k not in GPU_KEYS})


def load_box(path: Path) -> Box:
    """Read and check a box file (hostctl's loader: trusted owner, size and alias caps, no duplicate keys)."""
    from hostctl.safeload import load_yaml

    # Lexically absolute, `..` taken out (cli.typed_path's rule): the profile's [box].file refuses
    # a path with `..`, and `--box ../bench/boxes/B.yaml` is how one names a box beside a checkout.
    path = Path(os.path.abspath(path))
    doc = load_yaml(path, "box")
    refuse_unquoted_env(doc, f"box {path} is not valid", "nothing was written")
    return parse_box(doc.data, path)
