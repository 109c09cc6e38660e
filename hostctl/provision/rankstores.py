"""`hostctl store split`: copy each rank's expert-store files (`<stem>.rank<r>of<N>.pack`, its
`.json` sidecar and `.lock`) from the shared expert store to that rank's store directory on the
drive the plan assigns (`<mount>/moet-store-rank<r>`), so the ranks read from different drives.

Each file is copied to a temporary name, flushed to the drive, read back from the drive and
compared byte for byte with the original, and only then renamed into place; the originals stay
in the shared store as the rollback. Everything is checked before the first byte is copied:
the files exist, each target is on its drive's mount and not on the shared store's filesystem
(a copy there spreads nothing), and there is room. A re-run skips files already copied and
unchanged since (same size and modification time as the original).
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import time
from pathlib import Path
from typing import TextIO

from hostctl import safefs
from hostctl.config import Config
from hostctl.data import Data
from hostctl.errors import FailedError, InputError, RefusedError
from hostctl.facts.records import HostFacts
from hostctl.plan.storage import RANK_FILE_EXTS, plan_storage, rank_files
from hostctl.plan.requests import tensor_parallel
from hostctl.bytesizes import MIB, fmt_bytes

CHUNK = 8 * MIB


class RankCopy(Data):
    rank: int
    drive: str
    source_dir: str
    target_dir: str
    files: list[str]
    todo: list[str] = []  # not yet copied (or changed since)

    def bytes_todo(self) -> int:
        return sum(os.stat(os.path.join(self.source_dir, n)).st_size for n in self.todo)


def _same_copy(src: Path, dst: Path) -> bool:
    try:
        s, d = src.stat(), dst.lstat()  # a link in the rank folder is never "the copy"
    except FileNotFoundError:
        return False
    return stat.S_ISREG(d.st_mode) and s.st_size == d.st_size and s.st_mtime_ns == d.st_mtime_ns


def plan_split(config: Config, facts: HostFacts) -> tuple[list[RankCopy], list[str]]:
    """(copies to make, ranks that read the shared store as it is). Raises when a copy would be
    wrong: missing files, an unmounted or shared filesystem, too little room."""
    profile = config.profile
    world = tensor_parallel(config.recipe)
    storage = plan_storage(config, facts, world=world)
    store = storage.role("expert_store")
    if store is None:
        raise InputError(f"profile {profile.name} names no expert store (storage.expert_store): nothing to split")
    if not profile.storage.rank_stores:
        raise InputError(f"profile {profile.name} assigns no drives to ranks (storage.rank_stores): nothing to split",
                         fix='list a drive per rank, e.g. storage.rank_stores = ["ssd1", "ssd2"]')
    source = Path(store.host_path)
    if not source.is_dir():
        raise FailedError(f"the shared expert store {source} does not exist",
                          fix="run `hostctl provision --only storage`, then let the runtime's first start write the store")
    names = sorted(os.listdir(source))
    copies, shared = [], []
    problems: list[str] = []
    for rs in storage.rank_stores:
        if rs.shared:
            shared.append(f"rank {rs.rank} reads the shared store on {rs.drive} ({store.host_path}) as it is")
            continue
        files = rank_files(names, rs.rank, world)
        if not any(n.endswith(".pack") for n in files):
            problems.append(f"rank {rs.rank}: no <stem>.rank{rs.rank}of{world}.{{{','.join(RANK_FILE_EXTS)}}} files in "
                            f"{source} yet (the runtime's first start writes them)")
            continue
        drive = profile.drive(rs.drive)
        pf = facts.path(rs.host_dir)
        target = Path(rs.host_dir)
        if drive is None or pf is None or not target.is_dir() or pf.mount_target != drive.mount:
            where = f"on {pf.mount_target}" if pf and pf.exists else "missing"
            problems.append(f"rank {rs.rank}: its store directory {rs.host_dir} is {where}, not on drive {rs.drive}'s "
                            f"mount {drive.mount if drive else '?'}")
            continue
        if os.stat(source).st_dev == os.stat(target).st_dev:
            raise RefusedError(
                f"rank {rs.rank}: {rs.host_dir} is on the same filesystem as the shared store {source}: "
                "a copy there would not move any reads to another drive; nothing was copied",
                fix=f"assign rank {rs.rank} a drive other than the shared store's in storage.rank_stores")
        copy = RankCopy(rank=rs.rank, drive=rs.drive, source_dir=str(source), target_dir=rs.host_dir, files=files)
        copy.todo = [n for n in files if not _same_copy(source / n, target / n)]
        copies.append(copy)
    if problems:
        raise FailedError("cannot split the rank stores; nothing was copied", details=problems,
                          fix="run `hostctl provision --only storage` for missing directories; split after the "
                              "first start has written the store")
    need: dict[int, int] = {}
    for c in copies:
        dev = os.stat(c.target_dir).st_dev
        need[dev] = need.get(dev, 0) + c.bytes_todo()
    for c in copies:
        st = os.statvfs(c.target_dir)
        free = st.f_bavail * st.f_frsize
        dev = os.stat(c.target_dir).st_dev
        if need.get(dev, 0) > free:
            raise FailedError(f"drive {c.drive} has {fmt_bytes(free)} free; the rank store copies need "
                              f"{fmt_bytes(need[dev])}; nothing was copied", fix="free space on that drive")
    return copies, shared


class _Progress:
    """Copy/verify progress on stderr: a live line at a terminal, a line per file otherwise."""

    def __init__(self, err: TextIO):
        self.err = err
        self.live = err.isatty()
        self.last = 0.0

    def update(self, what: str, done: int, total: int) -> None:
        now = time.monotonic()
        if self.live and (now - self.last > 0.5 or done == total):
            self.last = now
            self.err.write(f"\r  {what} {fmt_bytes(done)} / {fmt_bytes(total)}\x1b[K")
            if done == total:
                self.err.write("\n")
            self.err.flush()


def _drop_cache(fd: int) -> None:
    """Make the verification read the drive, not the page cache the copy just filled."""
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    except (AttributeError, OSError):
        pass


def _open_source(src: Path) -> int:
    """The original, opened without following a link: the store folder is the invoking user's,
    and a link they planted there to a root-only file would otherwise be copied somewhere they
    can read it."""
    with safefs.opened_dir(src.parent) as dfd:
        try:
            fd = os.open(src.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as e:
            if e.errno == errno.ELOOP:
                raise safefs.UntrustedPathError(src, "it is a symlink; store split copies only the store's own files",
                                                fix=f"remove the link {src}, then re-run") from None
            raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise safefs.UntrustedPathError(src, "it is not a regular file; store split copies only the store's own files")
    return fd


def copy_verified(src: Path, dst: Path, progress: _Progress, label: str) -> int:
    """Copy, read back from the drive, compare, then rename into place. The target folder belongs
    to the invoking user, so everything there goes through one checked folder fd (safefs): the
    temporary is made with O_EXCL (a link planted under any name is never opened), its mode, owner
    and times are set on the open file, and the read-back opens the very file written."""
    fin = os.fdopen(_open_source(src), "rb")
    with fin, safefs.opened_dir(dst.parent) as dfd:
        st = os.fstat(fin.fileno())
        size = st.st_size
        safefs.remove_stale_temps(dfd, dst.name)
        with safefs.staged_temp(dfd, dst.name) as (fd, tmp):
            shown = dst.parent / tmp
            with os.fdopen(fd, "wb") as fout:
                done = 0
                while chunk := fin.read(CHUNK):
                    fout.write(chunk)
                    done += len(chunk)
                    progress.update(f"{label}: copying", done, size)
                fout.flush()
                os.fsync(fout.fileno())
                _drop_cache(fout.fileno())
                written = os.fstat(fout.fileno())
                fin.seek(0)
                rfd = os.open(tmp, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
                with os.fdopen(rfd, "rb") as b:
                    if (os.fstat(rfd).st_dev, os.fstat(rfd).st_ino) != (written.st_dev, written.st_ino):
                        raise safefs.UntrustedPathError(shown, "it was replaced while hostctl was copying into it")
                    _drop_cache(rfd)
                    done = 0
                    while True:
                        x, y = fin.read(CHUNK), b.read(CHUNK)
                        if x != y:
                            raise FailedError(f"{label}: the copy in {shown} differs from {src} at byte "
                                              f"{done + _first_diff(x, y)}; it was removed and nothing was bound",
                                              fix="check the drive (`dmesg`, SMART), then re-run")
                        if not x:
                            break
                        done += len(x)
                        progress.update(f"{label}: verifying", done, size)
                os.utime(fout.fileno(), ns=(st.st_atime_ns, st.st_mtime_ns))
                os.fchmod(fout.fileno(), st.st_mode & 0o7777)
                try:
                    os.fchown(fout.fileno(), st.st_uid, st.st_gid)
                except PermissionError:
                    pass
            safefs.commit_temp(dfd, tmp, dst.name)
    return size


def _first_diff(x: bytes, y: bytes) -> int:
    return next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))


def split_rank_stores(config: Config, *, out: TextIO | None = None, err: TextIO | None = None,
                      read_facts=None) -> list[RankCopy]:
    from hostctl.provision.storage_part import storage_facts

    out, err = out or sys.stdout, err or sys.stderr
    read_facts = read_facts or storage_facts
    copies, shared = plan_split(config, read_facts(config))
    progress = _Progress(err)
    for line in shared:
        out.write(f"{line}: nothing to copy\n")
    for c in copies:
        total = 0
        for i, name in enumerate(c.todo, 1):
            src, dst = Path(c.source_dir) / name, Path(c.target_dir) / name
            err.write(f"rank {c.rank}: {name} ({fmt_bytes(src.stat().st_size)}) -> {c.target_dir} [{i}/{len(c.todo)}]\n")
            err.flush()
            total += copy_verified(src, dst, progress, f"rank {c.rank} {name}")
        kept = len(c.files) - len(c.todo)
        out.write(f"rank {c.rank} -> {c.drive}: {len(c.todo)} file(s) copied and verified byte for byte "
                  f"({fmt_bytes(total)}) into {c.target_dir}"
                  + (f"; {kept} already there and unchanged" if kept else "")
                  + f"; originals kept in {c.source_dir}\n")
    # Verify with a fresh look: the plan must now bind every copied rank's files.
    storage = plan_storage(config, read_facts(config), world=tensor_parallel(config.recipe))
    unbound = [c.rank for c in copies
               if sorted(next(r for r in storage.rank_stores if r.rank == c.rank).files) != sorted(c.files)]
    if unbound:
        raise FailedError(f"after copying, the plan still does not bind the files of rank(s) {unbound}",
                          details=[f"rank {r.rank}: {r.status}" for r in storage.rank_stores if r.rank in unbound])
    if copies:
        out.write("the rendered Compose project binds these files per rank: run `hostctl render` (or `up`) to use them\n")
    return copies
