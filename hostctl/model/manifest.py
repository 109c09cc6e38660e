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

from hostctl.facts.manifest import (INDEX_NAME, MANIFEST_NAME, MARKER_NAME, SMALL_FILE_MAX, Manifest, UnsafeIndexName,
                                    weight_files)
from hostctl.safefs import opened_dir, read_below, write_file

MARKER_SCHEMA = 2
# The domain prefix of vLLM-MoET's model manifest digest (docs/model-and-cache-formats.md).
MARKER_DIGEST_PREFIX = b"vllm-moet-model-manifest-v1\0"


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def manifest_path(model_dir: str | Path) -> Path:
    return Path(model_dir) / MANIFEST_NAME


def write_manifest(model_dir: str | Path, manifest: Manifest) -> Path:
    return write_file(manifest_path(model_dir), manifest.model_dump_json(indent=2) + "\n")


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
