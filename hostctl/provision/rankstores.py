"""`hostctl store split` as a part of the one executor (hostctl.act): copy each rank's
expert-store files (`<stem>.rank<r>of<N>.pack`, its `.json` sidecar and `.lock`) from the shared
expert store to that rank's store directory on the drive the plan assigns
(`<mount>/moet-store-rank<r>`), so the ranks read from different drives.

read() looks at the host (the storage facts, the plan made from them, the store's files and each
rank directory's copies, filesystems and room); decide() is pure: one copy action per file not yet
copied (or changed since: size and modification time differ from the original), or the reason
nothing may be copied, all checked before the first byte is: the files exist, each target is on
its drive's mount and not on the shared store's filesystem (a copy there spreads nothing: refused),
and there is room. The executor runs the copies and reads again until nothing is left to copy and
the plan binds every copied rank's files: verified.

Each file is copied to a temporary name, flushed to the drive, read back from the drive and
compared byte for byte with the original, and only then renamed into place; the originals stay
in the shared store as the rollback.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from hostctl import safefs
from hostctl.act.consent import Request
from hostctl.act.actions import Action, Assessment, Refusal, Settled
from hostctl.act.executor import Context, Executor
from hostctl.act.lock import HostLock
from hostctl.act.report import Report
from hostctl.config import Config
from hostctl.data import Data
from hostctl.errors import FailedError, HostctlError, InputError, RefusedError
from hostctl.facts.caches import file_sizes, folder_names, folder_room, same_copy
from hostctl.facts.records import HostFacts
from hostctl.plan.storage import RANK_FILE_EXTS, plan_storage, rank_files
from hostctl.plan.requests import tensor_parallel
from hostctl.bytesizes import MIB, fmt_bytes

CHUNK = 8 * MIB
COMMAND = "hostctl store split"
SCHEMA = "hostctl.store-split/v1"
PART = "store"


# ---------------------------------------------------------------- reading


class RankRead(Data):
    """One rank's store directory as read: what the shared store holds for it, what is copied."""

    rank: int
    drive: str
    host_dir: str
    shared: bool  # it reads the shared store as it is
    files: list[str] = []  # its files in the shared store
    sizes: dict[str, int] = {}  # of the originals
    same: list[str] = []  # already copied and unchanged since
    drive_mount: str | None = None  # where the profile mounts its drive
    mount_target: str | None = None  # where its directory lives now
    is_dir: bool = False
    same_fs: bool = False  # on the shared store's filesystem
    dev: int | None = None
    free: int | None = None
    bound: list[str] = []  # the files the plan binds over the shared store path
    status: str = ""  # the plan's word for it


class SplitRead(Data):
    profile: str
    world: int
    store: str | None  # the shared expert store (host path); None: the profile names none
    store_is_dir: bool = False
    rank_stores: bool = False  # the profile assigns drives to ranks
    ranks: list[RankRead] = []


def read_split(config: Config, facts: HostFacts) -> SplitRead:
    """What the plan made from these facts says, and what the store and rank directories hold."""
    profile = config.profile
    world = tensor_parallel(config.recipe)
    storage = plan_storage(config, facts, world=world)
    store = storage.role("expert_store")
    snap = SplitRead(profile=profile.name, world=world, store=store.host_path if store else None,
                     rank_stores=bool(profile.storage.rank_stores))
    if store is None or not snap.rank_stores:
        return snap
    source = Path(store.host_path)
    names, source_room = folder_names(source), folder_room(source)
    if names is None or source_room is None:
        return snap  # store_is_dir stays False: decide() says the store is not there
    snap.store_is_dir = True
    for rs in storage.rank_stores:
        r = RankRead(rank=rs.rank, drive=rs.drive, host_dir=rs.host_dir, shared=rs.shared, bound=list(rs.files),
                     status=rs.status)
        snap.ranks.append(r)
        if rs.shared:
            continue
        r.files = rank_files(names, rs.rank, world)
        r.sizes = file_sizes(source, r.files)
        drive = profile.drive(rs.drive)
        pf = facts.path(rs.host_dir)
        target = Path(rs.host_dir)
        r.drive_mount = drive.mount if drive else None
        r.mount_target = pf.mount_target if pf and pf.exists else None
        room = folder_room(target)
        r.is_dir = room is not None
        if room is not None:
            r.dev, r.free, r.same_fs = room.dev, room.free, room.dev == source_room.dev
            r.same = [n for n in r.files if same_copy(source / n, target / n)]
    return snap


# ---------------------------------------------------------------- deciding (pure)


def _refusals(snap: SplitRead) -> list[Refusal]:
    return [Refusal(id=f"{PART}/rank{r.rank}",
                    reason=f"rank {r.rank}: {r.host_dir} is on the same filesystem as the shared store {snap.store}: "
                           "a copy there would not move any reads to another drive; nothing was copied")
            for r in snap.ranks
            if not r.shared and _placed(r) and r.same_fs and any(n.endswith(".pack") for n in r.files)]


def _placed(r: RankRead) -> bool:
    return r.drive_mount is not None and r.is_dir and r.mount_target == r.drive_mount


def decide(snap: SplitRead, copy: Callable[[RankRead, str], Action]) -> Assessment:
    """A copy action per file of a rank not yet copied; raises when a copy would be wrong (missing
    files, an unmounted drive, too little room) and refuses one onto the shared store's filesystem."""
    if snap.store is None:
        raise InputError(f"profile {snap.profile} names no expert store (storage.expert_store): nothing to split")
    if not snap.rank_stores:
        raise InputError(f"profile {snap.profile} assigns no drives to ranks (storage.rank_stores): nothing to split",
                         fix='list a drive per rank, e.g. storage.rank_stores = ["ssd1", "ssd2"]')
    if not snap.store_is_dir:
        raise FailedError(f"the shared expert store {snap.store} does not exist",
                          fix="run `hostctl provision --only storage`, then let the runtime's first start write the store")
    d = Assessment(PART, detail=snap)
    problems: list[str] = []
    for r in snap.ranks:
        if r.shared:
            continue
        if not any(n.endswith(".pack") for n in r.files):
            problems.append(f"rank {r.rank}: no <stem>.rank{r.rank}of{snap.world}.{{{','.join(RANK_FILE_EXTS)}}} files "
                            f"in {snap.store} yet (the runtime's first start writes them)")
        elif not _placed(r):
            where = f"on {r.mount_target}" if r.mount_target else "missing"
            problems.append(f"rank {r.rank}: its store directory {r.host_dir} is {where}, not on drive {r.drive}'s "
                            f"mount {r.drive_mount or '?'}")
    refusals = _refusals(snap)
    if refusals:
        d.items += refusals
        return d
    if problems:
        raise FailedError("cannot split the rank stores; nothing was copied", details=problems,
                          fix="run `hostctl provision --only storage` for missing directories; split after the "
                              "first start has written the store")
    need: dict[int, int] = {}
    copying = [r for r in snap.ranks if not r.shared]
    for r in copying:
        need[r.dev] = need.get(r.dev, 0) + sum(r.sizes[n] for n in r.files if n not in r.same)
    for r in copying:
        if need[r.dev] > (r.free or 0):
            raise FailedError(f"drive {r.drive} has {fmt_bytes(r.free or 0)} free; the rank store copies need "
                              f"{fmt_bytes(need[r.dev])}; nothing was copied", fix="free space on that drive")
    for r in copying:
        todo = [n for n in r.files if n not in r.same]
        for n in todo:
            d.add(copy(r, n))
        if not todo:
            d.add(Settled(id=f"{PART}/rank{r.rank}", what=f"rank {r.rank}: {len(r.files)} file(s) copied to "
                                                           f"{r.host_dir}"))
    # Every copy in place: the plan made from the host must now bind each such rank's files.
    unbound = [r for r in copying if set(r.same) == set(r.files) and sorted(r.bound) != sorted(r.files)]
    if unbound:
        raise FailedError(f"the files of rank(s) {[r.rank for r in unbound]} are copied, yet the plan does not "
                          "bind them", details=[f"rank {r.rank}: {r.status}" for r in unbound])
    return d


# ---------------------------------------------------------------- copying

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


# ---------------------------------------------------------------- the part


class SplitPart:
    name = PART
    record = False  # the plan itself says a rank is split (its files in the rank directory)

    def __init__(self, config: Config, *, read_facts: Callable[[Config], HostFacts], err: TextIO) -> None:
        self.config, self.read_facts, self.err = config, read_facts, err

    def read(self, ctx: Context) -> SplitRead:
        return read_split(self.config, self.read_facts(self.config))

    def _copy(self, store: str, r: RankRead, name: str) -> Action:
        src, dst = Path(store) / name, Path(r.host_dir) / name

        def _run() -> None:
            copy_verified(src, dst, _Progress(self.err), f"rank {r.rank} {name}")

        return Action(step=f"{PART}/rank{r.rank}/{name}",
                      describe=f"copy {src} ({fmt_bytes(r.sizes[name])}) to {r.host_dir}, verified byte for byte",
                      run=_run, changes=str(dst), why=f"rank {r.rank} reads its expert store from drive {r.drive}")

    def decide(self, snapshot: SplitRead) -> Assessment:
        return decide(snapshot, lambda r, name: self._copy(snapshot.store or "", r, name))

    def plan_text(self, d: Assessment, round_no: int) -> str:
        snap: SplitRead = d.detail
        lines = []
        if round_no == 1:
            lines += [f"rank {r.rank} reads the shared store on {r.drive} ({snap.store}) as it is: nothing to copy"
                      for r in snap.ranks if r.shared]
        lines += [f"  {a.describe}" for a in d.actions]
        return "".join(line + "\n" for line in lines)

    def done_text(self, first: Assessment, final: Assessment, ran: list[Action], *, dry_run: bool) -> str:
        snap: SplitRead = first.detail
        lines = []
        for r in snap.ranks:
            if r.shared:
                continue
            mine = [a for a in (first.actions if dry_run else ran) if a.id.startswith(f"{PART}/rank{r.rank}/")]
            size = fmt_bytes(sum(r.sizes[a.id.rsplit("/", 1)[-1]] for a in mine))
            kept = len(r.files) - len(mine)
            lines.append(f"rank {r.rank} -> {r.drive}: {len(mine)} file(s) "
                         + (f"to copy ({size}) into {r.host_dir}" if dry_run else
                            f"copied and verified byte for byte ({size}) into {r.host_dir}")
                         + (f"; {kept} already there and unchanged" if kept else "")
                         + ("" if dry_run else f"; originals kept in {snap.store}"))
        if dry_run:
            lines.append(f"dry run: {len(first.actions)} copy(ies) shown, nothing was changed")
        elif ran:
            lines.append("verified: a fresh look finds every copy in place and bound by the plan; the rendered "
                         "Compose project binds these files per rank: run `hostctl render` (or `up`) to use them")
        return "".join(line + "\n" for line in lines)

    def refusal(self, d: Assessment, ran: int) -> HostctlError:
        r = d.refusals[0]
        rank = r.id.removeprefix(f"{PART}/rank")
        return RefusedError(r.reason, details=[x.reason for x in d.refusals[1:]],
                            fix=f"assign rank {rank} a drive other than the shared store's in storage.rank_stores")

    def consent(self, d: Assessment) -> list[Request]:
        return []  # it only adds copies; the originals stay


def split_rank_stores(config: Config, *, dry_run: bool = False, out: TextIO | None = None,
                      err: TextIO | None = None, read_facts: Callable[[Config], HostFacts] | None = None) -> Report:
    """The split part alone through the one executor; the report's error is what it stopped at."""
    from hostctl.provision.storage_part import storage_facts

    err = err or sys.stderr
    part = SplitPart(config, read_facts=read_facts or storage_facts, err=err)
    executor = Executor(command=COMMAND, lock=lambda: HostLock("store split"), dry_run=dry_run, out=out, err=err)
    return executor.run([part], Report(schema_tag=SCHEMA, dry_run=dry_run, profile=config.profile.name))
