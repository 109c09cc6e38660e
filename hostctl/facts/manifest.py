"""The checkpoint folder's metadata files as hostctl reads them: their names and size limits,
hostctl's manifest (`.hostctl-model.json`) as data, and the shard names the safetensors index lists.
Reading a folder is checkpoint.py; writing these files is hostctl/model/manifest.py.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from hostctl.data import Data, Document
from hostctl.safepaths import relative_name_problem, relative_names_problem

MANIFEST_NAME = ".hostctl-model.json"
MANIFEST_SCHEMA = "hostctl.model-manifest/v1"
MARKER_NAME = ".vllm-moet-snapshot.json"
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


class Manifest(Document):
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
