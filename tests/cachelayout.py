"""Cache generations laid out the way the vLLM-MoET runtime lays them out, written from
docs/model-and-cache-formats.md ("Caches", "Checkpoint identity") and not from hostctl's code, so
a test of hostctl.cache checks hostctl against the documented format rather than against itself.

- planes: <dir>/v2/<sha256(meta)[:20]>/tp<W>-rank<R>/meta.json + layer<L>.<part>.bin
- packs: <dir>/<tag>.v2.<key>.rank<r>of<w>.{pack,json,lock}; the pack is a sparse file of
  n_layers x E x stride bytes, the sidecar lists the layers written
- compile: <dir>/vllm/torch_compile_cache/<hash>/rank_<i>_0/backbone/vllm_compile_cache.py
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from pathlib import Path

PARTS = ("planes13", "sc13", "planes2", "sc2")
QUANTIZER_ABI = "w2-abi-7"  # stands for the runtime's MOE_W2_QUANTIZER_ABI constant


def key20(doc: dict) -> str:
    return hashlib.sha256(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:20]


def checkpoint(root: Path) -> Path:
    """A small local checkpoint: config.json, an index and two shards."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({"model_type": "deepseek_v4"}))
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    (root / "model.safetensors.index.json").write_text(json.dumps(index))
    for name in set(index["weight_map"].values()):
        (root / name).write_bytes(os.urandom(4096))
    return root


def hf_snapshot(cache: Path, repo: str = "org/model", revision: str = "9e165c30e2704aec5d9d593cce3eebd58bbef1cb") -> Path:
    """A checkpoint as huggingface_hub's cache holds it: `models--org--model/blobs/<sha256>` and
    `snapshots/<revision>/<file>` as relative symlinks to the blobs (huggingface_hub's "Manage
    cache" documentation); returns the snapshot directory."""
    top = cache / ("models--" + repo.replace("/", "--"))
    blobs, snap = top / "blobs", top / "snapshots" / revision
    blobs.mkdir(parents=True)
    snap.mkdir(parents=True)
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00002-of-00002.safetensors"}}
    files = {"config.json": json.dumps({"model_type": "deepseek_v4"}).encode(),
             "model.safetensors.index.json": json.dumps(index).encode(),
             **{name: os.urandom(4096) for name in set(index["weight_map"].values())}}
    for name, data in files.items():
        blob = hashlib.sha256(data).hexdigest()
        (blobs / blob).write_bytes(data)
        (snap / name).symlink_to(Path("..") / ".." / "blobs" / blob)
    return snap


def ckpt_id(host_dir: Path, served_path: str = "/model", revision: str = "") -> str:
    """The runtime's checkpoint identity of a local checkpoint: revision as the server is given
    it (`--revision`, none by default); each shard's resolved_blob is the name its path resolves
    to (the blob's name in an HF cache snapshot)."""
    h = hashlib.sha256(b"moe-w2-checkpoint-stat-v2\0")
    h.update(served_path.encode() + b"\0" + revision.encode())
    h.update(b"config.json\0" + hashlib.sha256((host_dir / "config.json").read_bytes()).digest())
    raw = (host_dir / "model.safetensors.index.json").read_bytes()
    h.update(b"model.safetensors.index.json" + hashlib.sha256(raw).digest())
    for rel in sorted(set(json.loads(raw)["weight_map"].values())):
        st = os.stat(host_dir / rel)
        blob = os.path.basename(os.path.realpath(host_dir / rel))
        h.update(json.dumps({"name": rel, "resolved_blob": blob, "size": st.st_size, "mtime_ns": st.st_mtime_ns,
                             "ctime_ns": st.st_ctime_ns}, sort_keys=True, separators=(",", ":")).encode())
    return h.hexdigest()


def planes(root: Path, ckpt: str, world: int, layers: int, part_bytes: int = 8192,
           drop: tuple[int, int, str] | None = None) -> list[Path]:
    """One planes generation; `drop` = (rank, layer, part) leaves that file out (an interrupted build)."""
    dirs = []
    for rank in range(world):
        meta = {"version": 2, "quantizer_abi": QUANTIZER_ABI, "ckpt_id": ckpt, "world": world, "rank": rank,
                "zero_mode": "sym", "fp4_split": False}
        d = root / "v2" / key20(meta) / f"tp{world}-rank{rank}"
        d.mkdir(parents=True)
        (d / "meta.json").write_text(json.dumps(meta))
        for layer in range(layers):
            for part in PARTS:
                if drop == (rank, layer, part):
                    continue
                size = part_bytes if part.startswith("planes") else part_bytes // 8
                (d / f"layer{layer}.{part}.bin").write_bytes(os.urandom(size))
        dirs.append(d.parent)
    return dirs


def pack_key(identity: dict, tag: str, n_layers: int, experts: int, slot_bytes: int, stride: int) -> str:
    return key20({**identity, "tag": tag, "n_layers": n_layers, "E": experts, "slot_bytes": slot_bytes, "stride": stride})


def packs(store: Path, ckpt: str, world: int, n_layers: int, written: int | None = None, experts: int = 4,
          slot_bytes: int = 5000, tag: str = "base") -> list[Path]:
    """One pack generation: every rank's .pack (sparse; the written layers' rows filled), .json, .lock."""
    stride = (slot_bytes + 4095) // 4096 * 4096
    identity = {"ckpt_id": ckpt, "zero_mode": "sym", "quantizer_abi": QUANTIZER_ABI}
    key = pack_key(identity, tag, n_layers, experts, slot_bytes, stride)
    store.mkdir(parents=True, exist_ok=True)
    out = []
    layers = list(range(n_layers if written is None else written))
    for rank in range(world):
        base = store / f"{tag}.v2.{key}.rank{rank}of{world}"
        with open(f"{base}.pack", "wb") as f:
            f.truncate(n_layers * experts * stride)
            for layer in layers:
                for e in range(experts):
                    f.seek((layer * experts + e) * stride)
                    f.write(os.urandom(slot_bytes))
        sidecar = {"version": 2, "tag": tag, "E": experts, "n_layers": n_layers, "slot_bytes": slot_bytes,
                   "stride": stride, **identity, "layers": layers}
        Path(f"{base}.json").write_text(json.dumps(sidecar, sort_keys=True))
        Path(f"{base}.lock").write_bytes(b"")
        out += [Path(f"{base}.{ext}") for ext in ("pack", "json", "lock")]
    return out


def copy_rank(files: list[Path], rank: int, target: Path) -> list[Path]:
    """What `hostctl store split` leaves: rank r's files, same names, in its rank store."""
    target.mkdir(parents=True, exist_ok=True)
    out = []
    for f in files:
        if f".rank{rank}of" in f.name:
            shutil.copy2(f, target / f.name)
            out.append(target / f.name)
    return out


def compile_cache(root: Path, digest: str, world: int, finished: bool = True) -> Path:
    d = root / "vllm" / "torch_compile_cache" / digest
    for rank in range(world):
        prefix = d / f"rank_{rank}_0" / "backbone"
        prefix.mkdir(parents=True)
        (prefix / "computation_graph.py").write_text("# graph\n" * 100)
        if finished:
            (prefix / "vllm_compile_cache.py").write_text("{}\n")
    return d
