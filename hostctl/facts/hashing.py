"""Reading and hashing checkpoint files at the speed of the drive.

One file's sha256 is a single sequential stream, so the way to keep up with the drive is to never
wait on both at once: a reader thread fills one buffer while the caller hashes the other (file
reads and hashlib's update both release the GIL). The same reader without a hash is the "plain
read" that benchmarks/model_hash.py compares against. Pages already read are dropped from the
page cache (POSIX_FADV_DONTNEED): verifying a 155 GiB checkpoint must not evict what the runtime
keeps there (the expert store's RAM tier is the page cache).
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
from collections.abc import Callable

from pydantic import ConfigDict

from hostctl.data import Data

CHUNK = 16 * 1024 * 1024


MAX_JOBS = 8  # 8 cores of sha256 (~1.5 GB/s each, benchmarks/results/model_hash-*.txt) outrun any one NVMe drive


def hash_jobs() -> int:
    """Files hashed at once: one file's sha256 is a single stream, bounded by one core, while a
    checkpoint has dozens of shards and an NVMe drive outruns a core several times over -- so as
    many files as this process has cores (its CPU affinity, which a container or taskset limits)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(MAX_JOBS, cores))


BUFFERS = 3  # one being read, one being hashed, one spare so neither waits on a hand-over


def stream(path: str | int, consume: Callable[[memoryview], None], progress: Callable[[int], None] | None = None,
           *, drop_cache: bool = True) -> int:
    """Read `path` (or an open fd, which this then owns and closes) once, front to back, handing
    each chunk to `consume`; returns the bytes read."""
    fd = path if isinstance(path, int) else os.open(path, os.O_RDONLY)
    free: queue.Queue = queue.Queue()
    full: queue.Queue = queue.Queue()
    for _ in range(BUFFERS):
        free.put(bytearray(CHUNK))
    stop = threading.Event()

    def reader() -> None:
        offset = 0
        try:
            with open(fd, "rb", buffering=0, closefd=False) as f:
                while not stop.is_set():
                    buf = free.get()
                    if buf is None:
                        break
                    n = f.readinto(buf)
                    full.put((buf, n, None))
                    if not n:
                        return
                    if drop_cache:
                        try:
                            os.posix_fadvise(fd, offset, n, os.POSIX_FADV_DONTNEED)
                        except OSError:
                            pass
                    offset += n
        except BaseException as exc:  # handed to the consumer, who raises it
            full.put((None, 0, exc))

    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
    except OSError:
        pass
    thread = threading.Thread(target=reader, name="hostctl-read", daemon=True)
    thread.start()
    total = 0
    try:
        while True:
            buf, n, exc = full.get()
            if exc is not None:
                raise exc
            if not n:
                return total
            consume(memoryview(buf)[:n])
            total += n
            if progress is not None:
                progress(n)
            free.put(buf)
    finally:
        stop.set()
        free.put(None)
        thread.join()
        os.close(fd)


class Digests(Data):
    model_config = ConfigDict(frozen=True, defer_build=False)

    size: int
    sha256: str
    blob_id: str | None = None  # git's blob sha1 ("blob <size>\\0" + content), when asked for


def digests(path: str | int, progress: Callable[[int], None] | None = None, *, blob_id: bool = False,
            drop_cache: bool = True) -> Digests:
    """The content sha256 (and optionally the git blob id) of one file (a path, or an open fd
    this then closes), in one read."""
    sha = hashlib.sha256()
    blob = None
    if blob_id:
        blob = hashlib.sha1()
        blob.update(b"blob %d\0" % (os.fstat(path).st_size if isinstance(path, int) else os.path.getsize(path)))

    def consume(chunk: memoryview) -> None:
        sha.update(chunk)
        if blob is not None:
            blob.update(chunk)

    size = stream(path, consume, progress, drop_cache=drop_cache)
    return Digests(size=size, sha256=sha.hexdigest(), blob_id=blob.hexdigest() if blob is not None else None)


def read_only(path: str, progress: Callable[[int], None] | None = None, *, drop_cache: bool = True) -> int:
    """The same read with nothing done to the bytes: the baseline a hash is measured against."""
    return stream(path, lambda chunk: None, progress, drop_cache=drop_cache)
