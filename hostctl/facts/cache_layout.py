"""How the runtime lays out its caches on disk: names, keys and completeness markers, as pure
functions of file names and the runtime's own metadata. docs/model-and-cache-formats.md
("Caches") describes each layout and where it was read.

- planes cache (VLLM_MOE_W2_PLANES_CACHE): `<dir>/v2/<key>/tp<W>-rank<R>/meta.json` plus
  `layer<L>.<part>.bin`. `<key>` is the first 20 hex digits of the sha256 of that rank's
  meta.json (its fields in sorted, compact JSON), so each rank of one generation has its own
  key directory; a generation is the meta fields without `rank`.
- expert-store packs (VLLM_MOE_W2_STORE_DIR): `<dir>/<tag>.v2.<key>.rank<r>of<w>[.pp<p>of<q>]`
  `.pack` (rows), `.json` (sidecar: geometry, identity and the layers written), `.lock`, and the
  tiered store's `.pack.heat.json`; `<key>` hashes the identity and geometry but not the rank.
  `hostctl store split` copies a rank's files, same names, to `<mount>/moet-store-rank<r>`.
- vLLM's compile cache (VLLM_CACHE_ROOT=/root/.cache/vllm, hostctl's compile_cache role):
  `<dir>/vllm/torch_compile_cache/<hash>/rank_<i>_<j>/<prefix>/vllm_compile_cache.py`;
  `<hash>` is vLLM's digest of its configuration and code, which hostctl cannot compute.
- Files the runtime is still writing are `<name>.tmp.<pid>...` and replaced atomically.
"""

from __future__ import annotations

import hashlib
import json
import re

PLANES_VERSION_DIR = "v2"
PLANES_RANK_RE = re.compile(r"^tp(?P<world>\d+)-rank(?P<rank>\d+)$")
PLANES_LAYER_RE = re.compile(r"^layer(?P<layer>\d+)\.(?P<part>[a-z0-9]+)\.bin$")
PLANES_PARTS_2BIT = ("planes13", "sc13", "planes2", "sc2")
PLANES_PARTS_FP4 = ("fp13", "fp2")
PLANES_KEY_LEN = 20

PACK_RE = re.compile(r"^(?P<tag>[A-Za-z0-9_-]+)\.v2\.(?P<key>[0-9a-f]{20})\.rank(?P<rank>\d+)of(?P<world>\d+)"
                     r"(?:\.pp(?P<pp>\d+)of(?P<pp_world>\d+))?\.(?P<ext>pack|json|lock|pack\.heat\.json)$")
PACK_KEY_FIELDS = ("ckpt_id", "zero_mode", "quantizer_abi", "tag", "n_layers", "E", "slot_bytes", "stride")
PACK_VERSION = 2

COMPILE_SUBDIR = ("vllm", "torch_compile_cache")
COMPILE_RANK_RE = re.compile(r"^rank_(?P<rank>\d+)_(?P<dp>\d+)$")
COMPILE_DONE = "vllm_compile_cache.py"

TMP_RE = re.compile(r"\.tmp\.\d+")
# What hostctl names a generation it is removing (renamed first, so a half-removed one is obvious).
REMOVING_PREFIX = ".hostctl-removing."


def short_digest(doc: dict) -> str:
    """The runtime's key: sha256 of sorted, compact JSON, first 20 hex digits."""
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:PLANES_KEY_LEN]


def planes_generation_key(meta: dict) -> dict:
    """The fields that make ranks one generation: the meta without `rank`."""
    return {k: v for k, v in sorted(meta.items()) if k != "rank"}


def pack_key(sidecar: dict) -> str | None:
    """The key the runtime names a pack after, from its sidecar; None for a pack written without a
    checkpoint identity (its key hashed a process id: the runtime never reuses it)."""
    if sidecar.get("ckpt_id") is None:
        return None
    return short_digest({k: sidecar.get(k) for k in PACK_KEY_FIELDS})


def is_tmp(name: str) -> bool:
    return TMP_RE.search(name) is not None
