"""Checkpoint identity facts: the identity the runtime keys its planes cache and packs by (their
`ckpt_id`), computed the way the runtime computes it, from the host's checkpoint directory. It reads no
shard contents: the model path the server is given, the revision (none for a local directory),
the sha256 of config.json and of the index, and for every indexed shard its name, the name it
resolves to, its size and its modification and change times in nanoseconds
(docs/model-and-cache-formats.md, "Checkpoint identity").

The runtime sees the checkpoint at the path the plan mounts it at (/model), through a bind mount
that keeps inodes and so sizes and times; a change to any shard (replaced, touched, re-downloaded)
gives a new identity and the old caches stop matching, which is what the runtime intends.

What the runtime feeds in besides the files (its `_ckpt_id`, read in vLLM-MoET's patch,
docs/model-and-cache-formats.md): the environment variable VLLM_MOE_W2_CKPT_ID, when set and not
blank, *is* the identity (hashed over nothing); the revision is vLLM's model revision, i.e. the
serve command's `--revision` (the config's `_commit_hash` is None for a checkpoint served from
/model: transformers takes it only from an HF cache path `.../snapshots/<hash>/`), not the
revision hostctl pinned the download to. `runtime_inputs` reads both from the recipe.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex

from hostctl.errors import InputError, UntrustedPathError
from hostctl.facts.manifest import SMALL_FILE_MAX, TOO_LARGE_FIX
from hostctl.safefs import TooLargeError, read_bounded
from hostctl.safeload import parse_json
from hostctl.safepaths import relative_name_problem

DOMAIN = b"moe-w2-checkpoint-stat-v2\0"
INDEX_NAMES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
OVERRIDE_ENV = "VLLM_MOE_W2_CKPT_ID"


def runtime_inputs(env: dict, serve_args: list[str]) -> tuple[str | None, str | None]:
    """(the VLLM_MOE_W2_CKPT_ID override, or None; the `--revision` the server is given, or None)
    from a recipe's env and serve_args (each serve_args entry may hold a flag and its value)."""
    override = str(env.get(OVERRIDE_ENV) or "").strip() or None
    try:
        tokens = shlex.split(" ".join(str(a) for a in serve_args))
    except ValueError:
        tokens = " ".join(str(a) for a in serve_args).split()
    revision = None
    for i, tok in enumerate(tokens):
        if tok == "--revision" and i + 1 < len(tokens):
            revision = tokens[i + 1]
        elif tok.startswith("--revision="):
            revision = tok.split("=", 1)[1]
    return override, revision


def _read_small(host_dir: str, name: str) -> tuple[bytes | None, str | None]:
    """(the bytes of config.json or an index in the checkpoint folder, or None when it is absent;
    why it was not read, or None)."""
    try:
        return read_bounded(os.path.join(host_dir, name), max_bytes=SMALL_FILE_MAX), None
    except FileNotFoundError:
        return None, None
    except UntrustedPathError as exc:
        return None, f"{name}: not read ({exc.message})"
    except TooLargeError as exc:
        return None, f"{exc}; {TOO_LARGE_FIX}"
    except (OSError, ValueError) as exc:
        return None, f"{name}: {getattr(exc, 'strerror', None) or exc}"


def runtime_ckpt_id(host_dir: str, served_path: str, revision: str | None = None,
                    override: str | None = None) -> tuple[str | None, str]:
    """(the identity, or None, and why not). `served_path` is the model path the server is
    started with (the plan's MODEL_IN_CONTAINER); the runtime hashes that string, not the host path. `override`: the value of
    VLLM_MOE_W2_CKPT_ID in the runtime's environment (the runtime then uses it as it is)."""
    if override and override.strip():
        return override.strip(), f"{OVERRIDE_ENV} is set in the runtime's environment: the runtime uses it as given"
    if not os.path.isdir(host_dir):
        return None, f"{host_dir} does not exist"
    h = hashlib.sha256()
    h.update(DOMAIN)
    h.update(served_path.encode())
    h.update(b"\0")
    h.update((revision or "").encode())
    # config.json and the index come from a hub or a copy in a folder others may write: each is
    # refused past the cap before a byte is read (a sparse index of 3 GB, no disk used, cost 2
    # minutes and 6 GB of memory read whole). Links are followed: the runtime follows them too.
    raw, why = _read_small(host_dir, "config.json")
    if why:
        return None, why
    if raw is not None:
        h.update(b"config.json\0")
        h.update(hashlib.sha256(raw).digest())
    shards: set[str] = set()
    for name in INDEX_NAMES:
        raw, why = _read_small(host_dir, name)
        if why:
            return None, why
        if raw is None:
            continue
        try:
            h.update(name.encode())
            h.update(hashlib.sha256(raw).digest())
            shards.update(str(v) for v in parse_json(raw.decode("utf-8"), name).get("weight_map", {}).values())
        except (InputError, TypeError, ValueError, AttributeError) as exc:
            return None, f"{name}: {exc}"
    if not shards:
        shards.update(n for n in os.listdir(host_dir) if n.endswith((".safetensors", ".bin")))
    if not shards:
        return None, f"no weight shards in {host_dir}"
    # The index came from the hub: a name that is not a plain path below the folder is not looked
    # up (the runtime, given such an index, would not load the checkpoint either).
    for rel in sorted(shards):
        problem = relative_name_problem(rel)
        if problem:
            return None, f"the index names {rel!r} as a shard: {problem}"
    for rel in sorted(shards):
        path = os.path.join(host_dir, rel)
        try:
            st = os.stat(path)
        except OSError as exc:
            return None, f"{rel}: {exc.strerror or exc}"
        record = {"name": rel, "resolved_blob": os.path.basename(os.path.realpath(path)), "size": st.st_size,
                  "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns}
        h.update(json.dumps(record, sort_keys=True, separators=(",", ":")).encode())
    return h.hexdigest(), "computed from the checkpoint's config, index and shard stats"
