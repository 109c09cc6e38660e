"""Models files: vLLM-MoET's bench/models.yaml format, read unchanged.

A models file is a YAML mapping `models:` from a registry name (what a vLLM-MoET recipe writes as
`model:`) to `hf_repo` (the hub repository), `revision` (the pinned commit, 40 hex) and
`approx_gb` (the download size, decimal GB). Keys hostctl does not use are ignored: the format
belongs to vLLM-MoET (docs/model-and-cache-formats.md, "Models file"). hostctl ships one for its
bundled recipes, runtime/models.yaml; a profile may name another with runtime.models_file.
"""

from __future__ import annotations

import re
from pathlib import Path


from pydantic import ConfigDict

from hostctl.data import Data
from hostctl import paths
from hostctl.errors import InputError

COMMIT_RE = re.compile(r"^[0-9a-f]{40}$")
REPO_ID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$")


class ModelEntry(Data):
    model_config = ConfigDict(frozen=True)

    name: str
    hf_repo: str
    revision: str | None  # as the file writes it; resolve.py refuses anything but a commit
    approx_gb: float | None


def bundled_models_file() -> Path:
    return paths.resource_root() / "runtime" / "models.yaml"


def models_file_path(ref: str | None, relative_to: Path | None = None) -> Path:
    """runtime.models_file (relative to the profile's folder) or the bundled file."""
    if ref is None:
        return bundled_models_file()
    p = Path(ref)
    if not p.is_absolute() and relative_to is not None:
        p = relative_to / p
    return p


def parse_models(data: object, source: str) -> dict[str, ModelEntry]:
    """The entries of a models file; InputError naming the field that is wrong."""
    if not isinstance(data, dict) or not isinstance(data.get("models"), dict):
        raise InputError(f"{source} is not a models file", details=["expected a top-level mapping `models:` "
                                                                     "of name -> {hf_repo, revision, approx_gb}"])
    out: dict[str, ModelEntry] = {}
    problems: list[str] = []
    for name, spec in data["models"].items():
        where = f"models.{name}"
        if not isinstance(spec, dict):
            problems.append(f"{where}: expected a mapping with hf_repo and revision, got {type(spec).__name__}")
            continue
        repo = spec.get("hf_repo")
        if not isinstance(repo, str) or not REPO_ID_RE.match(repo):
            problems.append(f"{where}.hf_repo: expected a hub repository id such as org/name, got {repo!r}")
            continue
        revision = spec.get("revision")
        if revision is not None and not isinstance(revision, str):
            problems.append(f"{where}.revision: expected a commit hash (40 hex), got {revision!r}")
            continue
        approx = spec.get("approx_gb")
        if approx is not None and (isinstance(approx, bool) or not isinstance(approx, (int, float)) or approx < 0):
            problems.append(f"{where}.approx_gb: expected a number of GB, got {approx!r}")
            continue
        out[str(name)] = ModelEntry(name=str(name), hf_repo=repo, revision=revision, approx_gb=float(approx) if approx is not None else None)
    if problems:
        raise InputError(f"{source} is not valid", details=problems, fix="correct the fields named above; nothing was changed")
    return out


def load_models(path: Path) -> dict[str, ModelEntry]:
    if not path.is_file():
        raise InputError(f"models file {path} does not exist",
                         fix="set runtime.models_file to a file in vLLM-MoET's bench/models.yaml format, or remove it "
                             "to use the bundled runtime/models.yaml")
    from hostctl.safeload import load_yaml

    return parse_models(load_yaml(path, "models file").data, str(path))
