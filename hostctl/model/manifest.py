"""The two files hostctl writes next to a checkpoint.

- `.hostctl-model.json`, hostctl's manifest: the repository and commit, every file with the size
  and hashes the hub published for it (sha256 for LFS files, the git blob id for the rest, and the
  sha256 hostctl computed for every file), whether the pull finished, and when the checkpoint was
  last verified at each level. `model verify` works offline from it; doctor reads its dates.
- `.vllm-moet-snapshot.json`, the marker vLLM-MoET's bench runner and recipe launcher require
  for a local snapshot: `{"manifest_sha256", "repo", "revision", "schema": 2}`, where
  manifest_sha256 is their digest of config.json, the safetensors index and every indexed shard's
  name, size and content sha256 (docs/model-and-cache-formats.md, "Snapshot marker", says how it
  is computed and where that comes from).

Both are replaced atomically (hostctl.safefs), so an interrupted pull leaves the last good one.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from hostctl.data import Data
from hostctl.safefs import opened_dir, read_below, write_file
from hostctl.safepaths import relative_name_problem, relative_names_problem

MANIFEST_NAME = ".hostctl-model.json"
MANIFEST_SCHEMA = "hostctl.model-manifest/v1"
MARKER_NAME = ".vllm-moet-snapshot.json"
MARKER_SCHEMA = 2
# The domain prefix of vLLM-MoET's model manifest digest (docs/model-and-cache-formats.md).
MARKER_DIGEST_PREFIX = b"vllm-moet-model-manifest-v1\0"
INDEX_NAME = "model.safetensors.index.json"
WEIGHT_SUFFIXES = (".safetensors", ".bin")
# The pydantic error type of a manifest naming a file outside the folder: the owner of the model
# folder can edit the manifest, and its names are joined onto the folder as root.
UNSAFE_NAME = "unsafe_name"
SMALL_FILE_MAX = 64 * 1024 * 1024  # config.json, the index, the manifest: JSON files hostctl reads whole
# What a file past SMALL_FILE_MAX is told to do. The largest checkpoints' indexes (DeepSeek-V3, Kimi K2:
# ~100k tensors, ~90 bytes a weight_map entry) are about 10 MiB, so the cap leaves room and a
# larger file is not a real one.
TOO_LARGE_FIX = "a checkpoint's index or config is a few MiB at most: replace the file (hostctl model pull)"


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


class ManifestFile(Data):
    name: str  # the path in the repository (and under the checkpoint directory)
    size: int
    lfs: bool = False
    hub_sha256: str | None = None  # the hub's LFS sha256 (LFS files)
    hub_blob_id: str | None = None  # the hub's git blob id (the rest)
    sha256: str | None = None  # the content sha256 hostctl computed and found matching the hub
    corrupt_since: str | None = None  # when a full verify last found its content differing from sha256

    @field_validator("name")
    @classmethod
    def _plain(cls, name: str) -> str:
        problem = relative_name_problem(name)
        if problem:
            raise PydanticCustomError(UNSAFE_NAME, "{problem}", {"problem": problem})
        return name


class Manifest(Data):
    # "schema" is the JSON key; the attribute is schema_ (BaseModel has a schema()).
    model_config = ConfigDict(validate_by_name=True, serialize_by_alias=True)

    schema_: Literal["hostctl.model-manifest/v1"] = Field(default=MANIFEST_SCHEMA, alias="schema")
    repo: str
    revision: str
    complete: bool = False  # every file of the revision downloaded and checked
    files: list[ManifestFile] = Field(default_factory=list)
    pulled_at: str | None = None
    verified_quick_at: str | None = None
    verified_full_at: str | None = None
    hostctl_version: str | None = None

    @model_validator(mode="after")
    def _distinct(self) -> "Manifest":
        bad = relative_names_problem([f.name for f in self.files])
        if bad is not None:
            raise PydanticCustomError(UNSAFE_NAME, "{problem}", {"problem": bad[1]})
        return self

    def file(self, name: str) -> ManifestFile | None:
        return next((f for f in self.files if f.name == name), None)

    def put(self, entry: ManifestFile) -> None:
        self.files = [f for f in self.files if f.name != entry.name] + [entry]
        self.files.sort(key=lambda f: f.name)


def manifest_path(model_dir: str | Path) -> Path:
    return Path(model_dir) / MANIFEST_NAME


def write_manifest(model_dir: str | Path, manifest: Manifest) -> Path:
    return write_file(manifest_path(model_dir), manifest.model_dump_json(indent=2) + "\n")


class UnsafeIndexName(Exception):
    """The index names a shard that is not a plain path inside the checkpoint folder."""

    def __init__(self, name: object, why: str):
        super().__init__(f"{INDEX_NAME} names {name!r} as a shard: {why}")
        self.name = name


def weight_files(index_text: bytes | None, listing: list[str]) -> list[str] | None:
    """The shard names vLLM-MoET's digest covers: the index's weight_map values, or without an
    index the top-level *.safetensors / *.bin files. None when the index cannot be read;
    UnsafeIndexName when it names a file outside the folder (the index came from the hub)."""
    if index_text is not None:
        from hostctl.errors import InputError
        from hostctl.safeload import parse_json

        try:
            names = sorted(set(parse_json(index_text.decode("utf-8"), "the checkpoint's index")["weight_map"].values()))
        except (InputError, KeyError, TypeError, AttributeError, ValueError):
            return None
        for name in names:
            problem = relative_name_problem(name)
            if problem:
                raise UnsafeIndexName(name, problem)
        return names
    return sorted(n for n in listing if "/" not in n and n.endswith(WEIGHT_SUFFIXES))


def marker_digest(config_text: bytes, index_text: bytes | None, shards: list[tuple[str, int, str]]) -> str:
    """vLLM-MoET's manifest_sha256 from config.json, the index (if any) and (name, size, content
    sha256) of each shard, in name order."""
    h = hashlib.sha256()
    h.update(MARKER_DIGEST_PREFIX)
    h.update(hashlib.sha256(config_text).digest())
    if index_text is not None:
        h.update(hashlib.sha256(index_text).digest())
    for name, size, sha in sorted(shards):
        h.update(json.dumps({"name": name, "size": size, "content_sha256": sha}, sort_keys=True,
                            separators=(",", ":")).encode())
    return h.hexdigest()


def marker_document(repo: str, revision: str, digest: str) -> dict:
    return {"schema": MARKER_SCHEMA, "repo": repo, "revision": revision, "manifest_sha256": digest}


def write_marker(model_dir: str | Path, manifest: Manifest) -> Path | None:
    """Write the vLLM-MoET snapshot marker from the manifest's verified hashes (no re-reading of
    the shards). None when the checkpoint lacks what the marker covers (no config.json, an index
    naming a file the manifest has no hash for)."""
    root = Path(model_dir)
    with opened_dir(root) as base:
        try:
            config_text = read_below(base, "config.json", shown=root, max_bytes=SMALL_FILE_MAX, owners=False)
        except (OSError, ValueError):
            return None
        try:
            index_text = read_below(base, INDEX_NAME, shown=root, max_bytes=SMALL_FILE_MAX, owners=False)
        except FileNotFoundError:
            index_text = None
    try:
        names = weight_files(index_text, [f.name for f in manifest.files])
    except UnsafeIndexName:
        return None
    if not names:
        return None
    shards = []
    for name in names:
        entry = manifest.file(name)
        if entry is None or entry.sha256 is None:
            return None
        shards.append((name, entry.size, entry.sha256))
    doc = marker_document(manifest.repo, manifest.revision, marker_digest(config_text, index_text, shards))
    return write_file(root / MARKER_NAME, json.dumps(doc, sort_keys=True))
