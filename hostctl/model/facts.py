"""Checkpoint facts: what a checkpoint directory holds, read without hashing anything (a stat per
file and three small JSON files). The quick verify, `up`'s preflight and doctor's model.checkpoint
check judge these; only the full verify reads file contents (hashing.py).
"""

from __future__ import annotations

import os
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from hostctl.model.manifest import INDEX_NAME, MANIFEST_NAME, MARKER_NAME, Manifest, weight_files


class CheckpointFacts(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str
    exists: bool
    config_json: bool = False
    index_present: bool = False
    index_error: str | None = None
    shards: list[str] | None = None  # what the index names (or the top-level weight files without one)
    sizes: dict[str, int] = Field(default_factory=dict)  # name -> size of every file looked at that exists
    manifest: Manifest | None = None
    manifest_error: str | None = None
    marker: dict | None = None
    marker_error: str | None = None


def _read_json(path: Path) -> tuple[object | None, str | None]:
    from hostctl.errors import InputError, MissingFileError, UntrustedPathError
    from hostctl.safeload import load_json

    try:  # a checkpoint's own JSON: from a hub or a copy, so bounded like any outside file
        return load_json(path, path.name), None
    except MissingFileError:
        return None, None
    except (InputError, UntrustedPathError) as exc:
        return None, str(exc)


def probe_checkpoint(path: str) -> CheckpointFacts:
    root = Path(path)
    if not root.is_dir():
        return CheckpointFacts(path=path, exists=False)
    facts = CheckpointFacts(path=path, exists=True, config_json=(root / "config.json").is_file())
    try:
        listing = sorted(os.listdir(root))
    except OSError:
        listing = []
    index_path = root / INDEX_NAME
    if index_path.is_file():
        facts.index_present = True
        try:
            raw = index_path.read_bytes()
        except OSError as exc:
            raw = None
            facts.index_error = f"{INDEX_NAME}: {exc.strerror or exc}"
        if raw is not None:
            facts.shards = weight_files(raw, listing)
            if facts.shards is None:
                facts.index_error = f"{INDEX_NAME} has no readable weight_map"
    else:
        facts.shards = weight_files(None, listing)

    data, facts.manifest_error = _read_json(root / MANIFEST_NAME)
    if data is not None:
        try:
            facts.manifest = Manifest.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            facts.manifest_error = f"{MANIFEST_NAME}: {'.'.join(map(str, first['loc']))}: {first['msg']}"
    data, facts.marker_error = _read_json(root / MARKER_NAME)
    if isinstance(data, dict):
        facts.marker = data

    names = set(facts.shards or []) | {"config.json"}
    if facts.manifest is not None:
        names |= {f.name for f in facts.manifest.files}
    for name in sorted(names):
        try:
            st = os.stat(root / name)
        except OSError:
            continue
        if not os.path.isdir(root / name):
            facts.sizes[name] = st.st_size
    return facts


def free_space(path: str) -> tuple[str, int | None]:
    """(the nearest existing directory at or above `path`, its filesystem's free bytes for an
    unprivileged writer); None when even that cannot be read."""
    p = Path(path)
    while not p.exists() and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except OSError:
        return str(p), None
    return str(p), st.f_bavail * st.f_frsize
