"""How fast `hostctl model verify` hashes checkpoint files, next to a plain read of the same
files, side by side in one run.

  read:  hostctl.model.hashing.read_only: the reader thread and 16 MiB buffers hostctl uses,
         nothing done to the bytes: the drive (or page cache) as hostctl reads it;
  hash:  hostctl.model.hashing.digests: the same reader, the sha256 of each chunk computed while
         the next one is read: what the full verify does per file;
  naive: read a chunk, hash it, read the next, in one thread (for comparison only).

Two workloads over the same bytes (--gib, default 3, of random data: no holes):
  one file: a single sha256 stream, bounded by one core's sha256 speed;
  shards:   the same bytes as --shards files (default 4) hashed --jobs at a time (default: what
            `hostctl model verify` uses, min(4, CPUs)) against the same files read --jobs at a
            time: a checkpoint's shape (DeepSeek-V4-Flash-0731 has 48 shards).
The target is hash >= 90% of read (medians of --runs). Runs alternate read, hash, naive so a
change in the machine's load hits all of them. Cold (the default): each file's pages are
dropped from the page cache before every run (fdatasync + POSIX_FADV_DONTNEED, which evicts
its clean pages; nothing else loses its cache), so every run reads the drive. --warm: the
files are read once first and stay cached (needs the RAM), so the numbers are the page cache's
and the CPU's.

    python3 benchmarks/model_hash.py [--gib 3] [--shards 4] [--jobs N] [--runs 3] [--dir /tmp] [--warm]

The files are deleted at the end. Exits 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hostctl.model import hashing  # noqa: E402  (stdlib only: runs where hostctl's dependencies are absent)
from hostctl.model.hashing import hash_jobs  # noqa: E402

GIB = 1024**3
TARGET = 0.90


def make_file(directory: str, size: int) -> str:
    fd, path = tempfile.mkstemp(prefix="hostctl-hash-bench-", dir=directory)
    block = bytearray(os.urandom(64 * 1024 * 1024))
    left = size
    with os.fdopen(fd, "wb") as f:
        while left > 0:
            n = min(left, len(block))
            f.write(block[:n])
            left -= n
            block[:8] = os.urandom(8)  # no two blocks alike
        f.flush()
        os.fsync(f.fileno())
    return path


def drop_cache(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fdatasync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def naive(path: str) -> None:
    h = hashlib.sha256()
    with open(path, "rb", buffering=0) as f:
        while chunk := f.read(hashing.CHUNK):
            h.update(chunk)


def measure(label: str, paths: list[str], jobs: int, runs: int, warm: bool) -> tuple[float, float]:
    size = sum(os.path.getsize(p) for p in paths)
    kinds = {"read": lambda p: hashing.read_only(p, drop_cache=not warm),
             "hash": lambda p: hashing.digests(p, drop_cache=not warm),
             "naive": naive}
    times: dict[str, list[float]] = {k: [] for k in kinds}
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        if warm:
            list(pool.map(lambda p: hashing.read_only(p, drop_cache=False), paths))
        for run in range(runs):
            for kind, fn in kinds.items():
                if not warm:
                    for p in paths:
                        drop_cache(p)
                t0 = time.perf_counter()
                list(pool.map(fn, paths))
                dt = time.perf_counter() - t0
                times[kind].append(dt)
                print(f"  {label}: run {run + 1} {kind:5s} {size / dt / 1e9:6.2f} GB/s ({dt:.2f} s)", flush=True)
    rate = {k: size / statistics.median(v) / 1e9 for k, v in times.items()}
    ratio = rate["hash"] / rate["read"]
    print(f"  {label}: median read {rate['read']:.2f} GB/s, hash {rate['hash']:.2f} GB/s = {ratio:.0%} of the read, "
          f"naive {rate['naive']:.2f} GB/s = {rate['naive'] / rate['read']:.0%}", flush=True)
    return ratio, rate["hash"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gib", type=float, default=3.0)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=hash_jobs())
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--dir", default="/tmp")
    ap.add_argument("--warm", action="store_true")
    args = ap.parse_args()
    total = int(args.gib * GIB)
    mode = "warm (page cache)" if args.warm else "cold (each file dropped from the page cache before every run)"
    print(f"{args.gib:g} GiB of random data in {args.dir}; {mode}; {os.cpu_count()} CPUs", flush=True)
    paths: list[str] = []
    try:
        paths.append(make_file(args.dir, total))
        one, _ = measure("one file", paths, 1, args.runs, args.warm)
        os.unlink(paths.pop())
        paths += [make_file(args.dir, total // args.shards) for _ in range(args.shards)]
        many, _ = measure(f"{args.shards} shards, {args.jobs} at a time", paths, args.jobs, args.runs, args.warm)
    finally:
        for p in paths:
            os.unlink(p)
    print(f"target hash >= {TARGET:.0%} of read: one file {one:.0%} ({'met' if one >= TARGET else 'NOT met'}), "
          f"{args.shards} shards {many:.0%} ({'met' if many >= TARGET else 'NOT met'}); "
          f"load average {os.getloadavg()[0]:.2f}")
    return 0 if one >= TARGET and many >= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
