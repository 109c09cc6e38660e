"""Storage provisioning decisions: for each drive in the profile, the safety verdict and the
Actions that bring it to hostctl's layout, then the fstab block, the swap sysctls and the
cache directories each role needs.

hostctl's layout on a drive: a GPT with `hostctl-swap-<drive>` (swap of the configured size,
label `hcswap-<drive>`, when `swap` > 0) and `hostctl-data-<drive>` (the rest; ext4 or xfs,
label `hcdata-<drive>`, mounted at the drive's mountpoint), both in fstab by UUID with nofail.

The promise (systemd-repart's and cloud-init's rule): hostctl only adds. It formats only
- a disk proven blank (BlankProof: no MBR, no primary or backup GPT, no signature wipefs
  finds, first and last MiB zero), with --yes or the identity typed;
- a partition of its own that holds no data by construction: created by hostctl and marked
  unfinished until its mkfs returned (hostctl.marks), an xfs whose mkfs never cleared its
  in-progress flag, or one with no superblock magic at all;
- anything else only with --erase naming that drive, and never a partition carrying
  hostctl's marks under any drive name (a rename relabels; a filesystem change or a swap
  resize is refused with the manual commands that would do it).

Deciding is pure: (Config, HostFacts, SystemFiles, StorageOptions) -> StorageProvision. Nothing here
touches the host; an Action's `run` does, when the executor (hostctl.act) calls it. Every decision compares the
desired state with the facts, so a host in any half-provisioned state gets only the actions it
still needs. Destructive actions also re-check the device just before they act (the guards,
through the same probes as the facts): facts can be stale, a filesystem must not be.
"""

from __future__ import annotations

import math
import os
import shlex
import stat
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict

from hostctl import marks, paths, safefs, safepaths
from hostctl.act.actions import Action, Assessment, Note, Refusal, Settled, command
from hostctl.config import Config, Drive
from hostctl.data import Data
from hostctl.errors import FailedError, InputError, RefusedError
from hostctl.facts.disks import blank_proof, blkid_probe, nonzero_samples, read_gpt_traces, table_entries
from hostctl.facts.disks import resolve_identity
from hostctl.facts.records import Disk, HostFacts, Partition
from hostctl.facts.sysfiles import DirState, SystemFiles, WriteTarget  # noqa: F401  (the snapshot storage decides on)
from hostctl.plan.storage import plan_storage
from hostctl.plan.records import Plan
from hostctl.provision import files, fstab, sysctl
from hostctl.plan.requests import tensor_parallel
from hostctl.bytesizes import MIB, fmt_bytes

SWAP_TYPE = ("8200", "0657fd6d-a4ab-43c4-84e5-0933c84b4f4f")
LINUX_TYPE = ("8300", "0fc63daf-8483-4772-8e79-3d69d8477de4")
ALIGN = MIB  # sgdisk starts the first partition at 1 MiB
GPT_TAIL = MIB  # the backup GPT at the end, rounded up
MIN_DATA = {"ext4": 32 * MIB, "xfs": 300 * MIB}  # mkfs.xfs refuses filesystems under 300 MiB
SIZE_TOLERANCE = MIB
PARTITION_WAIT_S = 10.0
MKFS_TIMEOUT_S = 1800.0  # lazy init makes this seconds; a slow drive still must not hang forever


# ---------------------------------------------------------------- the layout


class PartSpec(Data):
    model_config = ConfigDict(frozen=True)

    number: int
    role: Literal["swap", "data"]
    name: str  # GPT partition name
    type_code: str  # sgdisk type code
    type_guid: str
    size: int | None  # bytes; None: the rest of the drive
    fs: str  # swap, ext4, xfs
    label: str  # filesystem label


def layout(drive: Drive) -> list[PartSpec]:
    specs = []
    if drive.swap > 0:
        size = math.ceil(drive.swap / MIB) * MIB  # the profile only accepts whole MiB
        specs.append(PartSpec(number=1, role="swap", name=marks.part_name("swap", drive.name), type_code=SWAP_TYPE[0],
                              type_guid=SWAP_TYPE[1], size=size, fs="swap", label=marks.fs_label("swap", drive.name)))
    specs.append(PartSpec(number=len(specs) + 1, role="data", name=marks.part_name("data", drive.name),
                          type_code=LINUX_TYPE[0], type_guid=LINUX_TYPE[1], size=None, fs=drive.filesystem,
                          label=marks.fs_label("data", drive.name)))
    return specs


def required_bytes(drive: Drive) -> int:
    swap = sum(s.size or 0 for s in layout(drive))
    return ALIGN + swap + MIN_DATA[drive.filesystem] + GPT_TAIL


def partition_start(specs: list[PartSpec], spec: PartSpec) -> int:
    """The byte offset where sgdisk puts a partition of the layout: 1 MiB, then right after the
    partitions before it (whole MiB each)."""
    return ALIGN + sum(s.size or 0 for s in specs if s.number < spec.number)


def partition_path(disk_path: str, number: int) -> str:
    """The kernel's name for partition N: nvme0n1p2 and loop0p2 (a name ending in a digit), sda2."""
    return f"{disk_path}p{number}" if disk_path[-1].isdigit() else f"{disk_path}{number}"


def names_drive(erase_arg: str, drive: Drive) -> bool:
    """--erase takes the identity as the profile writes it (serial:X) or its bare value (X)."""
    return erase_arg in (str(drive.identity), drive.identity.value)


# ---------------------------------------------------------------- inputs and outputs


class StorageOptions:
    """How this run may act: a plain class, as it holds the maker of new filesystem UUIDs."""

    def __init__(self, *, erase: tuple[str, ...] = (), owner: tuple[int, int] | None = None,
                 new_uuid: Callable[[], str] | None = None) -> None:
        self.erase = erase  # the --erase arguments
        self.owner = owner  # SUDO_UID/SUDO_GID: who owns the cache directories
        self.new_uuid = new_uuid or (lambda: str(uuid.uuid4()))


class DriveVerdict:
    """What is decided for one drive: a plain class, as its actions hold what runs them."""

    def __init__(self, drive: Drive, disk: Disk | None,
                 status: Literal["ready", "converge", "create", "erase", "relabel", "refused"], found: str,
                 reasons: list[str] | None = None, fix: str | None = None) -> None:
        self.drive, self.disk, self.status = drive, disk, status
        self.found = found  # what is on the drive now, one line
        self.reasons: list[str] = reasons if reasons is not None else []  # why it is refused
        self.fix = fix
        self.actions: list[Action] = []
        self.replan = False  # its partitions can be planned only after the kernel loads the table
        self.entries: list[fstab.Entry] = []
        self.fs_facts: dict[str, tuple[str, str]] = {}  # role -> (device, uuid)

    @property
    def refused(self) -> bool:
        return self.status == "refused"

    @property
    def destructive(self) -> bool:
        return any(a.destructive for a in self.actions)

    def where(self) -> str:
        if self.disk is None:
            return f"{self.drive.name} ({self.drive.identity})"
        return f"{self.drive.name} ({self.drive.identity}, {self.disk.path}, {fmt_bytes(self.disk.size_bytes)})"


class StorageProvision:
    """What the storage part decided on one look: a plain class, as its actions hold what runs them."""

    def __init__(self, profile: str, phase: str, drives: list[DriveVerdict]) -> None:
        self.profile, self.phase, self.drives = profile, phase, drives
        self.system: list[Action] = []
        self.notes: list[str] = []

    @property
    def actions(self) -> list[Action]:
        """Outermost mountpoint first (a drive inside another's mountpoint mounts after it)."""
        ordered = sorted(self.drives, key=lambda d: _depth(d.drive.mount))
        return [a for d in ordered for a in d.actions] + self.system

    @property
    def refused(self) -> list[DriveVerdict]:
        return [d for d in self.drives if d.refused]

    @property
    def replan(self) -> bool:
        return any(d.replan for d in self.drives)


# ---------------------------------------------------------------- actions


def _cmd(step: str, argv: list[str], *, destructive: bool = False, timeout: float = 120,
         before: Callable[[], None] | None = None, after: Callable[[], None] | None = None,
         note: str | None = None) -> Action:
    # stdin is empty: a tool that would ask (mke2fs "Proceed anyway?") gets no answer and stops.
    return command(step, argv, destructive=destructive, timeout=timeout, before=before, after=after, note=note,
                   input_text="", consent="yes")


def _signature(path: str) -> dict[str, str]:
    tags, error = blkid_probe([path])
    if error:
        raise FailedError(f"cannot check {path} before writing to it: {error}")
    return tags.get(path, {})


def _guard_disk_blank(disk: Disk, drive: Drive, starts: list[int]) -> Callable[[], None]:
    """Just before a new table goes onto a disk that was planned as blank: prove it again, and
    check the first 4 KiB where each new partition will start (an old filesystem there would
    otherwise show up only inside the new partition, after the table is written)."""

    def _check() -> None:
        proof = blank_proof(disk.path, disk.size_bytes)
        if proof.proven:
            proof.sampled_nonzero, proof.error = nonzero_samples(disk.path, disk.size_bytes, starts)
        if not proof.proven:
            raise RefusedError(
                f"drive {drive.name} ({drive.identity}): {disk.path} is no longer provably blank: it holds "
                f"{proof.found()}, which the plan did not see; nothing was written to it",
                fix=f"look at it (`wipefs --no-act {disk.path}`); if it may be destroyed, re-run with "
                    f"--erase {drive.identity}")

    return _check


def _guard_torn_table(disk: Disk, drive: Drive) -> Callable[[], None]:
    """Just before a torn table of hostctl's is wiped: the disk still holds only that table's
    unfinished entries (facts can be stale)."""

    def _check() -> None:
        now = disk.model_copy(update={"blank": blank_proof(disk.path, disk.size_bytes),
                                      "gpt_traces": read_gpt_traces(disk.path, disk.size_bytes)})
        changed = _torn_table_leftovers(now) + [
            f"partition {t.name or '(unnamed)'}" for t in now.gpt_traces
            if not marks.role_of(t.name, None) or not marks.unfinished(t.attributes)]
        if changed or not now.gpt_traces:
            raise RefusedError(
                f"drive {drive.name} ({drive.identity}): {disk.path} no longer holds only hostctl's unfinished, torn "
                f"table: {'; '.join(changed) or 'the table is gone'}; nothing was written to it",
                fix=f"look at it (`wipefs --no-act {disk.path}`), then re-run `hostctl provision`")

    return _check


def _guard_space_free(disk: Disk, drive: Drive, starts: list[int]) -> Callable[[], None]:
    """Just before a partition is added to hostctl's table: the space it will start in is zero."""

    def _check() -> None:
        found, error = nonzero_samples(disk.path, disk.size_bytes, starts)
        if found or error:
            raise RefusedError(
                f"drive {drive.name} ({drive.identity}): the space where hostctl would add a partition "
                f"({', '.join(found) or error}) holds data (a partition deleted by hand?); nothing was written",
                fix="look at it (`blkid -p -O <offset> DISK`); restore the partition, or move the data away and wipe the "
                    "drive yourself")

    return _check


def _guard_wiped(path: str, drive: Drive) -> Callable[[], None]:
    """After --erase wiped a disk, before the new table: no signature came back in between."""

    def _check() -> None:
        tags = _signature(path)
        if tags.get("TYPE") or (tags.get("PTTYPE") and (tags["PTTYPE"] != "gpt" or table_entries(path))):
            raise RefusedError(f"drive {drive.name} ({drive.identity}): {path} carries "
                               f"{tags.get('TYPE') or tags.get('PTTYPE')} again after it was wiped; nothing more "
                               "was written to it", fix=f"look at it (`blkid -p {path}`), then re-run")

    return _check


def _guard_partition(path: str, drive: Drive, expect: tuple[str | None, str | None]) -> Callable[[], None]:
    """Just before a partition is wiped or formatted: it carries what the plan saw there, the
    (filesystem type, UUID) `expect` (None, None: nothing). Facts can be stale."""

    def _check() -> None:
        tags = _signature(path)
        now = (tags.get("TYPE"), tags.get("UUID"))
        if now != expect:
            found = f"a {now[0]} signature" + (f" labelled {tags['LABEL']!r}" if tags.get("LABEL") else "") \
                if now[0] else "no signature"
            saw = f"a {expect[0]} signature" if expect[0] else "no signature"
            raise RefusedError(
                f"drive {drive.name} ({drive.identity}): {path} now carries {found} where the plan saw {saw} "
                "(data left there before hostctl's table, another program, or stale facts); nothing was written "
                "to this partition",
                fix=f"look at it (`blkid -p {path}`), then re-run `hostctl provision`")

    return _check


def _wait_for(nodes: list[str], disk: str) -> Callable[[], None]:
    def _wait() -> None:
        deadline = time.monotonic() + PARTITION_WAIT_S
        while not all(os.path.exists(n) for n in nodes):
            if time.monotonic() > deadline:
                missing = [n for n in nodes if not os.path.exists(n)]
                raise FailedError(f"partition nodes {', '.join(missing)} did not appear within {PARTITION_WAIT_S:g} s "
                                  f"after re-reading {disk}'s partition table",
                                  fix=f"check `partx --show {disk}`, then re-run (the table is already written)")
            time.sleep(0.05)

    return _wait


def _mkdir(step: str, path: str, owner: tuple[int, int] | None, *, create: bool, host_path: str | None = None) -> Action:
    """mkdir -p (when missing) and chown to the invoking user (when known). `path` is where it is
    made; `host_path` is how the plan prints it (they differ only under a test sysroot)."""
    shown = host_path or path
    parts = [f"mkdir -p {shlex.quote(shown)}"] if create else []
    if owner is not None:
        parts.append(f"chown {owner[0]}:{owner[1]} {shlex.quote(shown)}")

    return Action(step=step, describe=" && ".join(parts), run=lambda: _make_owned_dir(Path(path), owner),
                  changes=shown)


def _make_owned_dir(path: Path, owner: tuple[int, int] | None) -> None:
    """The folders above are made root's (safefs walks and creates them); the last one is made or
    opened with O_NOFOLLOW under its parent's fd and chowned on that fd. A chown on the path would
    follow a link put there (the folder is the invoking user's), handing them whatever it points to;
    and where the folder really is must pass the profile's own system-directory rule."""
    with safefs.opened_dir(path.parent, create=True) as pfd:
        try:
            os.mkdir(path.name, 0o755, dir_fd=pfd)
        except FileExistsError:
            pass
        try:
            fd = os.open(path.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
        except OSError:
            st = os.stat(path.name, dir_fd=pfd, follow_symlinks=False)
            if stat.S_ISLNK(st.st_mode):
                raise safefs.UntrustedPathError(path, f"it is a symlink ({safefs.describe(st)}); hostctl makes this "
                                                      "folder itself and does not follow a link there",
                                                fix=f"remove the link {path}, or name the real folder in the profile")
            raise
        try:
            real = os.readlink(f"/proc/self/fd/{fd}")
            problem = safepaths.system_dir(real) if real.startswith("/") else None
            if problem:
                raise safefs.UntrustedPathError(path, f"it leads to {real}: {problem}")
            if owner is not None:
                os.fchown(fd, *owner)
        finally:
            os.close(fd)


def _write(step: str, host_path: str, old: str | None, new: str, why: str = "",
           target: WriteTarget | None = None) -> Action:
    """Edit a system file; through a symlink root trusts (configuration management's), the edit
    lands on the link's target and the link stays."""
    lands = target.real_path if target is not None and target.link is not None else host_path
    diff = files.diff(lands, old, new)
    through = f" (a symlink: the edit lands on {lands})" if lands != host_path else ""
    return Action(step=step, describe=f"edit {host_path}{through}:\n{diff}",
                  run=lambda: files.write_file(lands, new) and None, diff=diff, changes=lands, why=why,
                  writes=lands)


def _unwritable_files(config: Config, sp: StorageProvision, system: SystemFiles) -> list[str]:
    """The system files this run will edit that cannot be edited where they are (WriteTarget.problem).
    Judged before the first disk is touched: new filesystems mean new UUIDs, so any destructive
    step on a drive means an fstab edit; the sysctl file is edited when it differs."""
    profile = config.profile
    will = {fstab.FSTAB: any(v.destructive for v in sp.drives) or any(a.step == "storage/fstab" for a in sp.system),
            sysctl.SYSCTL_FILE: any(d.swap > 0 for d in profile.drives)
            and system.sysctl != sysctl.render(profile, sysctl.desired(profile))}
    return [f"{host_path}: {t.problem}" for host_path, t in system.targets.items() if t.problem and will.get(host_path)]


# ---------------------------------------------------------------- one drive


def _describe_part(p: Partition) -> str:
    what = p.fs_type or "no filesystem"
    if p.fs_label:
        what += f" {p.fs_label!r}"
    return f"{p.path}" + (f" ({p.part_label!r})" if p.part_label else "") + f": {what}"


def _role(p: Partition) -> marks.PartRole | None:
    return marks.role_of(p.part_label, p.fs_label)


def _content_is_ours(p: Partition, role: marks.PartRole) -> bool:
    """The filesystem (or swap area) on one of hostctl's partitions is one hostctl made."""
    if role == "swap":
        return p.fs_type == "swap" and (p.fs_label or "").startswith(marks.FS_LABELS["swap"])
    return p.fs_type in MIN_DATA and (p.fs_label or "").startswith(marks.FS_LABELS["data"])


def _unfinished(p: Partition) -> str | None:
    """Why this partition of hostctl's holds no data by construction, or None.

    The unfinished mark alone is not enough: a partition hostctl created over old data (a table
    zapped by hand, a partition deleted from the GPT) carries the mark too until its mkfs runs.
    hostctl gives each new partition the UUID its filesystem will get (its PARTUUID), so a
    filesystem inside a marked partition is hostctl's interrupted mkfs only when the UUIDs agree."""
    check = p.fs_check
    if marks.unfinished(p.part_flags):
        made_here = p.fs_uuid is not None and p.part_uuid is not None and p.fs_uuid.lower() == p.part_uuid.lower()
        if p.fs_type is None or made_here:
            return f"hostctl created it and its {'mkswap' if _role(p) == 'swap' else 'mkfs'} never finished " \
                   f"(GPT attribute bit {marks.UNFINISHED_BIT} still set)"
        return None
    if check and check.inprogress and not check.crc_error:
        return "its xfs was never finished (mkfs.xfs left the superblock's in-progress flag set, checksum intact)"
    if p.fs_type is None and check is not None and check.first_mib_zero and not check.backup_superblock:
        return "it carries no superblock magic at all and its first MiB is zero"
    return None


def _usage_refusals(drive: Drive, disk: Disk, facts: HostFacts, inner_mounts: tuple[str, ...] = ()) -> list[str]:
    """inner_mounts: other drives' mounts inside this drive's mountpoint (taken down before it is
    mounted): a mountpoint directly inside it is not the user's file. Anything else is, a
    directory on the way to a deeper mount included (it may hold files beside it)."""
    reasons = []
    if disk.is_root_disk:
        reasons.append("it carries the root or boot filesystem")
    if disk.holders:
        reasons.append(f"it is in use by {', '.join(disk.holders)} (LVM, md or dm)")
    if disk.mountpoints:
        reasons.append(f"it is mounted at {', '.join(disk.mountpoints)}")
    if disk.swap_active:
        reasons.append("it is active swap")
    ours_mounted_here = None
    for p in disk.partitions:
        role = _role(p)
        if p.holders:
            reasons.append(f"partition {p.path} is in use by {', '.join(p.holders)} (LVM, md or dm)")
        if p.swap_active and not (role == "swap" and _content_is_ours(p, "swap")):
            reasons.append(f"partition {p.path} is active swap that hostctl did not create (label {p.fs_label!r})")
        if p.mountpoints:
            if role == "data" and _content_is_ours(p, "data") and drive.mount in p.mountpoints:
                ours_mounted_here = p  # hostctl's own data mount, as it should be (extra binds are fine)
            else:
                reasons.append(f"partition {p.path} is mounted at {', '.join(p.mountpoints)}")
        if (p.mountpoints or p.swap_active) and marks.unfinished(p.part_flags):
            reasons.append(f"partition {p.path} is marked unfinished by hostctl yet in use: it was mounted or "
                           "swapped on by hand")
    mp = facts.path(drive.mount)
    if mp is not None and mp.not_a_directory:
        reasons.append(f"its mountpoint {drive.mount} exists and is not a directory (a file?): nothing can be mounted "
                       "there; move it away or choose another mountpoint")
    if mp is not None and mp.symlink:
        reasons.append(f"its mountpoint {drive.mount} goes through a symlink ({mp.symlink}): fstab and the mount "
                       "table would name different directories; write the directory it leads to as `mountpoint`")
    taken = [m for m in facts.mounts if m.target == drive.mount]
    if taken and ours_mounted_here is None:
        reasons.append(f"its mount point {drive.mount} is taken by {', '.join(m.source for m in taken)}")
    elif ours_mounted_here is not None and mp is not None and mp.mount_source not in (None, ours_mounted_here.path):
        reasons.append(f"{ours_mounted_here.path} is mounted at {drive.mount} but hidden by {mp.mount_source} "
                       f"mounted over {mp.mount_target} after it; unmount both (`umount {mp.mount_target}`, then "
                       f"`umount {drive.mount}`) and re-run: hostctl mounts the outer directory first")
    elif not taken and mp is not None and mp.exists and (files := [
            e for e in mp.entries or [] if f"{drive.mount}/{e}" not in inner_mounts]):
        # Mounting over files hides them: to the user they would look lost. Refused, not warned:
        # a warning scrolls by, and the files are the user's.
        reasons.append(f"its mount point {drive.mount} is a directory that already holds files "
                       f"({', '.join(files[:5])}{', ...' if len(files) >= 5 else ''}): mounting over them "
                       "would hide them; move them away or choose an empty mountpoint")
    if disk.size_bytes < required_bytes(drive):
        reasons.append(f"it is smaller than the layout: {fmt_bytes(disk.size_bytes)}, the profile's layout needs "
                       f"{fmt_bytes(required_bytes(drive))} (swap {fmt_bytes(drive.swap)} + at least "
                       f"{fmt_bytes(MIN_DATA[drive.filesystem])} of {drive.filesystem})")
    return reasons


def _refuse(v: DriveVerdict, found: str, reasons: list[str], fix: str | None) -> DriveVerdict:
    v.status, v.found, v.reasons, v.fix, v.actions, v.replan = "refused", found, reasons, fix, [], False
    return v


def plan_drive(drive: Drive, disk: Disk, facts: HostFacts, dirs: list[tuple[str, str]], opts: StorageOptions, *,
               defer_mount: bool = False, unmount_first: tuple[str, ...] = ()) -> DriveVerdict:
    """dirs: (role, directory) the roles need on this drive's data filesystem. defer_mount: the
    mountpoint lies inside another drive's filesystem that is not mounted yet. unmount_first:
    mounts of other drives inside this one's mountpoint that mounting it would hide."""
    specs = layout(drive)
    v = DriveVerdict(drive, disk, "converge", "")
    refusals = _usage_refusals(drive, disk, facts, unmount_first)
    if refusals:
        return _refuse(v, "in use", refusals,
                       "choose another drive, or stop what uses this one (unmount, swapoff, remove it from LVM/md)")
    step = f"storage/{drive.name}"
    if disk.table_type and disk.table_entries and disk.table_entries != len(disk.partitions):
        # The table on the drive is not what the kernel shows (a run stopped right after writing
        # it): load it, then look again at what the partitions hold. Reading is never destructive.
        v.found = f"GPT with {disk.table_entries} entries, {len(disk.partitions)} loaded by the kernel"
        v.actions = [_cmd(f"{step}/rescan", ["partx", "-u", disk.path], note="load the on-disk table; then re-plan")]
        v.replan = True
        return _read_only_check(v)

    if not disk.partitions and any(marks.role_of(t.name, None) for t in disk.gpt_traces):
        return _plan_torn_table(v, specs, opts, dirs, facts, defer_mount, unmount_first)
    if disk.fs_type and marks.role_of(None, disk.fs_label):
        # hostctl never makes a filesystem on a whole disk, but one carrying its label is its mark:
        # a partition's filesystem copied onto the disk (dd of a partition image), or a table lost
        # in front of it. Its marks win over --erase, as on a partition (README, storage).
        return _refuse(v, "hostctl's label on a whole disk",
                       [f"it holds a {disk.fs_type} filesystem labelled {disk.fs_label!r} on the whole disk, not in "
                        f"a partition hostctl made; formatting it would destroy that filesystem's files"],
                       f"copy off what it holds; to release the drive yourself, `wipefs --all {disk.path}`, then "
                       f"re-run (--erase never applies to a drive carrying hostctl's marks)")
    ours = [p for p in disk.partitions if _role(p)]
    foreign = []  # contents only --erase may destroy
    if disk.fs_type:
        foreign.append(f"a {disk.fs_type} filesystem on the whole disk")
    if disk.table_type and disk.table_type != "gpt":
        foreign.append(f"a {disk.table_type} partition table")
    foreign += [f"partition {_describe_part(p)}" for p in disk.partitions if not _role(p)]
    if disk.table_type == "gpt" and not disk.partitions:
        foreign.append("an empty GPT partition table (hostctl never writes one; what its partitions held may "
                       "still be on the disk)" if disk.table_entries == 0 else
                       "a GPT whose entries could not be read (`partx --show` failed)")
    if not (disk.table_type or disk.fs_type or disk.partitions):
        proof = disk.blank
        if proof is None:
            foreign.append("contents that were not read (the facts hold no blank proof for this disk)")
        elif not proof.proven:
            foreign.append(proof.found())
    erase_named = any(names_drive(a, drive) for a in opts.erase)

    if ours:
        return _plan_own(v, specs, ours, foreign, opts, dirs, facts, defer_mount, unmount_first)
    if foreign:
        what = "; ".join(foreign)
        if not erase_named:
            return _refuse(v, "data hostctl does not recognise", [f"it holds {what}"],
                           f"if that may be destroyed, re-run with --erase {drive.identity}")
        v.status, v.found = "erase", f"erase: {what}"
        for p in disk.partitions:
            if p.fs_type:
                v.actions.append(_cmd(f"{step}/wipe", ["wipefs", "--all", p.path], destructive=True))
        # wipefs first: sgdisk --zap-all refuses a disk whose primary GPT is gone ("Invalid partition
        # data!") and wipefs erases the backup header too; zap-all then clears the rest of both tables
        v.actions.append(_cmd(f"{step}/wipe", ["wipefs", "--all", disk.path], destructive=True))
        v.actions.append(_cmd(f"{step}/wipe", ["sgdisk", "--zap-all", disk.path], destructive=True))
        return _lay_out(v, specs, [], opts, dirs, facts, new_table=_guard_wiped(disk.path, drive), wipe_new=True,
                        defer_mount=defer_mount, unmount_first=unmount_first)
    v.status, v.found = "create", "blank (proven: first and last MiB zero, no table, no signature)"
    starts = [partition_start(specs, s) for s in specs]
    return _lay_out(v, specs, [], opts, dirs, facts, new_table=_guard_disk_blank(disk, drive, starts), wipe_new=False,
                    defer_mount=defer_mount, unmount_first=unmount_first)


def _torn_table_leftovers(disk: Disk) -> list[str]:
    """What, besides GPT entries, a disk whose table write stopped part-way holds: anything here
    did not come from that write, so the disk is not provably hostctl's to lay out again."""
    proof = disk.blank
    if proof is None:
        return [f"a {disk.table_type or disk.fs_type} signature the kernel reads"]
    if proof.error:
        return [f"contents that could not be read ({proof.error})"]
    left = [f"a signature wipefs finds ({s})" for s in proof.signatures if s.split(" at ")[0] not in ("gpt", "PMBR")]
    if not proof.outside_gpt_zero:
        left.append("non-zero bytes in its first or last MiB outside the GPT's own sectors")
    # the first and last sampled MiB hold the GPT itself; outside_gpt_zero has judged them
    ends = {"0 MiB", f"{(disk.size_bytes - MIB) // MIB} MiB"}
    inside = [s for s in proof.sampled_nonzero if s not in ends]
    if inside:
        left.append(f"non-zero bytes inside the disk at {', '.join(inside[:4])}{', ...' if len(inside) > 4 else ''}")
    return left


def _plan_torn_table(v: DriveVerdict, specs: list[PartSpec], opts: StorageOptions, dirs: list[tuple[str, str]],
                     facts: HostFacts, defer_mount: bool, unmount_first: tuple[str, ...]) -> DriveVerdict:
    """No partition shows, but GPT entries with hostctl's names lie in the disk's bytes
    (facts.disks.gpt_traces): the drive is hostctl's, its table torn. Entries all still marked
    unfinished on a disk that holds nothing else are a table write that stopped part-way: no
    filesystem was ever made in them, so the table is written again. Anything else may hold
    data: refused with the manual repair, and --erase never applies to a drive with hostctl's marks."""
    drive, disk = v.drive, v.disk
    assert disk is not None
    step = f"storage/{drive.name}"
    traces = disk.gpt_traces
    shown = ", ".join(sorted({f"{t.name or '(unnamed)'} ({t.where} table"
                              f"{', unfinished' if marks.unfinished(t.attributes) else ''})" for t in traces}))
    sides = {t.where for t in traces}
    finished = [t for t in traces if marks.role_of(t.name, None) and not marks.unfinished(t.attributes)]
    others = [t for t in traces if not marks.role_of(t.name, None)]
    leftovers = _torn_table_leftovers(disk)
    if finished or others or leftovers:
        why = ([f"partition(s) {', '.join(t.name for t in finished)} had their filesystems made: they may hold data"]
               if finished else [])
        why += [f"it also holds {x}" for x in ([f"partition {t.name or '(unnamed)'}" for t in others] + leftovers)]
        # the table's own extent, at the smallest sector size: beyond the disk's end, the disk shows
        # less than it held (a USB enclosure that reports another size, an image cut short)
        reach = max(t.last_lba + 1 for t in traces) * 512
        if reach > disk.size_bytes:
            why.insert(0, f"its partitions reach {fmt_bytes(reach)} into a disk that shows {fmt_bytes(disk.size_bytes)}: "
                          "the disk's end is missing")
        rebuild = ("`r`, then `b` and `c` (rebuild the primary table from the backup)" if sides == {"backup"} else
                   "`r`, then `d` and `e` (rebuild the backup table from the primary)")
        return _refuse(v, "hostctl's partitions in a damaged partition table", [
            f"its partition table is damaged (no tool loads it), yet it names hostctl's partitions: {shown}; "
            + "; ".join(why) + "; hostctl never formats its own partitions, with or without --erase"],
            (f"connect the disk where it shows its whole size (at least {fmt_bytes(reach)}: not through an enclosure "
             "that hides its end), then re-run" if reach > disk.size_bytes else
             f"repair the table by hand: `gdisk {disk.path}`, {rebuild}, `v` to check, `w` to write; then re-run")
            + f" (to give the drive up instead: back up its data, then `wipefs --all {disk.path}` yourself)")
    v.status = "create"
    v.found = (f"hostctl's own table, its write stopped part-way ({shown}: no filesystem was made in them, "
               "nothing else is on the disk)")
    # wipefs first: sgdisk refuses a table with one half missing ("Invalid partition data!")
    v.actions.append(_cmd(f"{step}/wipe", ["wipefs", "--all", disk.path], destructive=True,
                          before=_guard_torn_table(disk, drive), note="the torn table"))
    v.actions.append(_cmd(f"{step}/wipe", ["sgdisk", "--zap-all", disk.path], destructive=True))
    return _lay_out(v, specs, [], opts, dirs, facts, new_table=_guard_wiped(disk.path, drive), wipe_new=False,
                    defer_mount=defer_mount, unmount_first=unmount_first)


def _manual_reformat(p: Partition, spec: PartSpec, mount: str) -> str:
    mkfs = f"mkfs.xfs -L {spec.label} {p.path}" if spec.fs == "xfs" else f"mkfs.ext4 -L {spec.label} {p.path}"
    return (f"to keep the data, set filesystem = \"{p.fs_type}\" for this drive; to reformat it as {spec.fs} "
            f"(DESTROYS every file on {p.path}), back them up, then run `umount {mount}; wipefs --all {p.path}; "
            f"{mkfs}` yourself and re-run")


def _plan_own(v: DriveVerdict, specs: list[PartSpec], ours: list[Partition], foreign: list[str], opts: StorageOptions,
              dirs: list[tuple[str, str]], facts: HostFacts, defer_mount: bool,
              unmount_first: tuple[str, ...]) -> DriveVerdict:
    """The drive holds partitions with hostctl's marks: converge them, relabel them, remake those
    that hold no data by construction, or refuse. Never format one that may hold data."""
    drive, disk = v.drive, v.disk
    assert disk is not None
    step = f"storage/{drive.name}"
    listing = ", ".join(_describe_part(p) for p in ours)
    never = "hostctl never formats its own partitions again, with or without --erase"
    if foreign:
        return _refuse(v, "hostctl's partitions and more", [
            f"it holds hostctl's partitions ({listing}) and also {'; '.join(foreign)}; {never}"],
            "keep the layout by changing the profile to match it, or move the data away and wipe the drive "
            f"yourself (`wipefs --all` each partition, then `sgdisk --zap-all {disk.path}`), then re-run")
    names = sorted({marks.drive_of(p.part_label, p.fs_label) or "" for p in ours})
    by_role: dict[str, Partition] = {}
    problems: list[str] = []
    for p in ours:
        role = _role(p)
        assert role is not None
        if role in by_role:
            problems.append(f"two of hostctl's {role} partitions: {by_role[role].path} and {p.path}")
        by_role[role] = p
    if len(names) > 1:
        problems.append(f"its partitions carry the marks of several drives ({', '.join(names)})")
    spec_roles = {s.role: s for s in specs}
    for role, p in by_role.items():
        s = spec_roles.get(role)
        if s is None:
            problems.append(f"{p.path} is hostctl's swap partition ({fmt_bytes(p.size_bytes)}), and the profile now "
                            "asks for no swap on this drive: removing it would move the data partition")
        elif p.number != s.number:
            problems.append(f"{p.path} is hostctl's {role} partition at number {p.number}; the layout puts it at "
                            f"{s.number}")
        elif s.size is not None and abs(p.size_bytes - s.size) > SIZE_TOLERANCE:
            problems.append(f"{p.path} is hostctl's swap partition of {fmt_bytes(p.size_bytes)} and the profile asks "
                            f"for {fmt_bytes(s.size)}: resizing it moves the start of the data partition, which "
                            "destroys everything on it. Keep swap = "
                            f"\"{round(p.size_bytes / MIB)}MiB\" in the profile, or back the data up, wipe the drive "
                            f"yourself (`swapoff {p.path}; umount {drive.mount}; sgdisk --zap-all {disk.path}`) and "
                            "re-run")
    present = [s for s in specs if s.role in by_role]
    if present and present != specs[: len(present)] and not problems:
        problems.append(f"{specs[0].name} is missing before {present[0].name}: adding it would need the space the "
                        "data partition holds")
    data = by_role.get("data")
    fix = None
    if data is not None and _content_is_ours(data, "data") and data.fs_type != drive.filesystem \
            and not _unfinished(data):
        problems.append(f"{data.path} holds hostctl's {data.fs_type} data filesystem and the profile asks for "
                        f"{drive.filesystem}; {never}")
        fix = _manual_reformat(data, specs[-1], drive.mount)
    for p in ours:
        check = p.fs_check
        if marks.unfinished(p.part_flags) and _unfinished(p):
            continue  # hostctl's own interrupted mkfs: a backup superblock without the primary is what it leaves
        if check and check.backup_superblock:
            problems.append(f"{p.path} has lost its primary superblock but an ext4 backup superblock remains at "
                            f"{check.backup_superblock}: a damaged filesystem that may hold data, not an unfinished one")
            fix = f"repair it with `e2fsck -b <backup block> {p.path}` (see `mke2fs -n` for the locations), then re-run"
        elif check and check.fsck == "damaged":
            problems.append(f"{p.path} ({p.fs_type} {p.fs_label!r}) fails its read-only check: {check.detail}; it is "
                            "damaged, not unfinished, and may hold data")
            fix = (f"repair it with `{'xfs_repair' if p.fs_type == 'xfs' else 'e2fsck -f'} {p.path}` (it is not "
                   "mounted), then re-run")
        elif check and check.fsck == "unknown":
            problems.append(f"{p.path} could not be checked before mounting: {check.detail}")
    if problems:
        return _refuse(v, "hostctl's partitions, not the profile's layout", problems + [never],
                       fix or "change the profile to match the drive (its layout is shown above), or move the data "
                       "away and wipe the drive yourself, then re-run")

    parts: list[Partition | None] = [by_role.get(s.role) for s in specs]
    # spec name -> (the signature to wipe first, or None; why it is made again)
    make: dict[str, tuple[tuple[str | None, str | None] | None, str]] = {}
    for s, p in zip(specs, parts):
        if p is None:
            continue
        if not (p.part_label or "").startswith(marks.PART_PREFIX):
            # hostctl's label on a partition hostctl did not name: hostctl's data copied or moved
            # here, or a coincidence; it is protected (never formatted) and never adopted either
            return _refuse(v, "hostctl's label on a partition it did not make", [
                f"partition {_describe_part(p)} carries hostctl's filesystem label but not its GPT name "
                f"({marks.PART_NAMES[s.role]}…); {never}, and it does not take over a partition it did not make"],
                f"if it is hostctl's, name it so: `sgdisk --change-name={p.number}:{s.name} {disk.path}`, then re-run; "
                "otherwise choose another drive")
        why = _unfinished(p)
        if why:
            make[s.name] = ((p.fs_type, p.fs_uuid) if p.fs_type else None, f"{p.path}: {why}")
        elif not _content_is_ours(p, s.role):
            # hostctl's partition, someone else's filesystem (or unrecognised bytes) on it: the user's
            # data, most likely made there by hand (a btrfs over hostctl's data partition). The mark
            # wins over every flag: --erase does not apply; releasing the drive is the user's act.
            what = _describe_part(p) if p.fs_type else f"{p.path}: no filesystem signature, but not provably empty " \
                f"({'its first MiB is not zero' if p.fs_check and p.fs_check.first_mib_zero is False else 'its contents were not read'})"
            return _refuse(v, "data hostctl does not recognise on hostctl's partition", [
                f"partition {what}, which is not the {s.fs} filesystem hostctl makes there "
                f"(labelled {marks.FS_LABELS[s.role]}…); the partition carries hostctl's name, so {never}"],
                f"to keep it, choose another drive; to give this drive back to hostctl (DESTROYS what {p.path} "
                f"holds): back it up, then `wipefs --all` each partition and `sgdisk --zap-all {disk.path}` "
                "yourself, and re-run (with --erase if data remains where hostctl's partitions were)")
    if any(p is None for p in parts) and disk.nonzero_after_partitions:
        return _refuse(v, "data where hostctl would add a partition", [
            f"the space after its partitions is not empty (non-zero bytes at "
            f"{', '.join(disk.nonzero_after_partitions)}): a partition deleted from the table by hand leaves its data "
            f"there, and adding hostctl's partition over it would destroy it; {never}"],
            "restore the deleted partition (e.g. `testdisk`, or `sgdisk --new` with its old start), or move the data "
            "away and wipe the drive yourself, then re-run")

    # Marks that differ from the profile's names: relabel, never format (a drive renamed in the
    # profile, or a label changed by hand). The rest of the plan is made on the next round.
    renames, relabels = [], []
    for s, p in zip(specs, parts):
        if p is None or s.name in make:
            continue
        if p.part_label != s.name:
            renames.append(f"--change-name={p.number}:{s.name}")
        if p.fs_label == s.label:
            continue
        # swaplabel and xfs_admin refuse a swap area or filesystem in use (ETXTBSY, EBUSY);
        # swapon and mount follow on the next round, as for any drive
        if s.role == "swap":
            if p.swap_active:
                relabels.append(_cmd(f"{step}/relabel", ["swapoff", p.path], timeout=600, note="swaplabel needs it off"))
            relabels.append(_cmd(f"{step}/relabel", ["swaplabel", "--label", s.label, p.path], note=f"was {p.fs_label!r}"))
        elif p.fs_type == "xfs":
            if [m for m in p.mountpoints if m != drive.mount]:
                return _refuse(v, "mounted more than once", [
                    f"{p.path} must be relabelled {s.label!r} (was {p.fs_label!r}), which xfs_admin does only on an "
                    f"unmounted filesystem, and it is also mounted at {', '.join(m for m in p.mountpoints if m != drive.mount)}"],
                    "unmount those (bind) mounts, then re-run")
            if p.mountpoints:
                relabels.append(_cmd(f"{step}/relabel", ["umount", drive.mount], note="xfs_admin needs it unmounted"))
            relabels.append(_cmd(f"{step}/relabel", ["xfs_admin", "-L", s.label, p.path], note=f"was {p.fs_label!r}"))
        else:
            relabels.append(_cmd(f"{step}/relabel", ["e2label", p.path, s.label], note=f"was {p.fs_label!r}"))
    if renames or relabels:
        v.status, v.found = "relabel", f"hostctl's layout of drive {names[0]!r}"
        v.actions = relabels
        if renames:
            nodes = [p.path for p in ours]
            v.actions.append(_cmd(f"{step}/relabel", ["sgdisk", *renames, disk.path],
                                  note=f"GPT names were {', '.join(repr(p.part_label) for p in ours)}"))
            v.actions.append(_cmd(f"{step}/rescan", ["partx", "-u", disk.path], after=_wait_for(nodes, disk.path),
                                  note="the kernel may have dropped the partitions on the table write; wait for them"))
        v.replan = True
        return _read_only_check(v)

    v.status, v.found = "converge", "hostctl layout"
    return _lay_out(v, specs, parts, opts, dirs, facts, new_table=None, wipe_new=False, make=make,
                    defer_mount=defer_mount, unmount_first=unmount_first)


def _read_only_check(v: DriveVerdict) -> DriveVerdict:
    if v.disk is not None and v.disk.read_only and v.actions:
        return _refuse(v, "read-only", [f"the device {v.disk.path} is read-only (/sys/block/{v.disk.name}/ro is 1): "
                                        f"every write of the {len(v.actions)} planned action(s) would fail"],
                       "make it writable (a write-protect switch, `blockdev --setrw`, or the loop device's -r), then re-run")
    return v


def _lay_out(v: DriveVerdict, specs: list[PartSpec], parts: list[Partition | None], opts: StorageOptions,
             dirs: list[tuple[str, str]], facts: HostFacts, *, new_table: Callable[[], None] | None, wipe_new: bool,
             make: dict[str, tuple[tuple[str | None, str | None] | None, str]] | None = None, defer_mount: bool = False,
             unmount_first: tuple[str, ...] = ()) -> DriveVerdict:
    """Actions from the current partitions (None: missing) to the layout, in order: table, nodes,
    filesystems, the unfinished marks cleared, swap on, mount, directories. `new_table`: the
    guard before a new table goes onto the disk (None: keep the table, add what is missing).
    `make`: partitions to (re)make, with the signature to wipe first."""
    drive, disk = v.drive, v.disk
    assert disk is not None
    make = make or {}
    step = f"storage/{drive.name}"
    parts = parts or [None] * len(specs)
    missing = [s for s, p in zip(specs, parts) if p is None]
    nodes = [partition_path(disk.path, s.number) for s in specs]

    # Each new partition gets, as its PARTUUID, the UUID its filesystem will get: a filesystem
    # found in a partition still marked unfinished is hostctl's interrupted mkfs only if they agree.
    new_uuids = {s.name: opts.new_uuid() for s in missing}
    if missing:
        argv = ["sgdisk"] + (["--clear"] if new_table else [])
        for s in missing:
            end = f"+{s.size // MIB}M" if s.size is not None else "0"
            argv += [f"--new={s.number}:0:{end}", f"--typecode={s.number}:{s.type_code}",
                     f"--change-name={s.number}:{s.name}", f"--partition-guid={s.number}:{new_uuids[s.name]}",
                     f"--attributes={s.number}:set:{marks.UNFINISHED_BIT}"]
        argv.append(disk.path)
        guard = new_table or _guard_space_free(disk, drive, [partition_start(specs, s) for s in missing])
        v.actions.append(_cmd(f"{step}/partition", argv, destructive=True, before=guard,
                              note=f"bit {marks.UNFINISHED_BIT}: unfinished until its filesystem is made"))
        v.actions.append(_cmd(f"{step}/rescan", ["partx", "-u", disk.path], after=_wait_for(nodes, disk.path),
                              note="load the new table; wait for the partition nodes"))

    finish: list[int] = []  # partitions whose unfinished mark is cleared once their filesystems are made
    for s, p, node in zip(specs, parts, nodes):
        path = p.path if p is not None else node
        if p is not None and s.name not in make:
            v.fs_facts[s.role] = (path, p.fs_uuid or "")
            if marks.unfinished(p.part_flags):
                finish.append(s.number)  # it holds hostctl's filesystem, made earlier: it may hold data
            continue
        wipe, why = make.get(s.name, (None, ""))
        if wipe is not None:
            v.actions.append(_cmd(f"{step}/wipe", ["wipefs", "--all", path], destructive=True,
                                  before=_guard_partition(path, drive, wipe), note=why))
        elif wipe_new and p is None:
            # a new partition may start where an old filesystem did; --erase covers wiping it
            v.actions.append(_cmd(f"{step}/wipe", ["wipefs", "--all", node], destructive=True,
                                  note="old signatures inside the new partition"))
        if p is None:
            fs_uuid = new_uuids[s.name]
        elif marks.unfinished(p.part_flags) and p.part_uuid:
            fs_uuid = p.part_uuid.lower()  # remade under the UUID its partition was created for
        else:
            fs_uuid = opts.new_uuid()
        v.fs_facts[s.role] = (path, fs_uuid)
        guard = _guard_partition(path, drive, (None, None))  # nothing there, or nothing left after the wipe
        if s.role == "swap":
            argv = ["mkswap", "--label", s.label, "--uuid", fs_uuid, path]
        elif s.fs == "ext4":
            # no reserved blocks (a cache, not a root fs); lazy init: a 4 TB drive formats in seconds
            argv = ["mkfs.ext4", "-q", "-m", "0", "-L", s.label, "-U", fs_uuid,
                    "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", path]
        else:
            argv = ["mkfs.xfs", "-q", "-K", "-L", s.label, "-m", f"uuid={fs_uuid}", path]
        v.actions.append(_cmd(f"{step}/format-{s.role}", argv, destructive=True, before=guard, timeout=MKFS_TIMEOUT_S,
                              note=why if wipe is None and why else None))
        if p is None or marks.unfinished(p.part_flags):
            finish.append(s.number)
    if finish:
        # One table write after every mkfs: sgdisk makes the kernel re-read the table, and the
        # partition nodes vanish for a moment when nothing holds them.
        v.actions.append(_cmd(f"{step}/finish", ["sgdisk", *(f"--attributes={n}:clear:{marks.UNFINISHED_BIT}"
                                                             for n in finish), disk.path],
                              note="filesystems made: they may hold data now"))
        v.actions.append(_cmd(f"{step}/rescan", ["partx", "-u", disk.path], after=_wait_for(nodes, disk.path),
                              note="the kernel may have dropped the partitions on the table write; wait for them"))

    for s, p in zip(specs, parts):
        path, fs_uuid = v.fs_facts[s.role]
        remade = s.name in make
        if s.role == "swap":
            active = p is not None and p.swap_active and not remade
            if active and p.swap_priority != drive.swap_priority:
                v.actions.append(_cmd(f"{step}/swap", ["swapoff", path], timeout=600,
                                      note=f"priority {p.swap_priority}, the profile says {drive.swap_priority}"))
                active = False
            if not active:
                v.actions.append(_cmd(f"{step}/swap", ["swapon", "--priority", str(drive.swap_priority), path]))
            v.entries.append(fstab.Entry(spec=f"UUID={fs_uuid}", file="none", vfstype="swap", options=f"pri={drive.swap_priority},nofail"))
            continue
        mounted = p is not None and drive.mount in p.mountpoints and not remade
        options = ["noatime", *drive.mount_options]
        v.entries.append(fstab.Entry(spec=f"UUID={fs_uuid}", file=drive.mount, vfstype=s.fs,
                                     options=",".join(["defaults", "noatime", "nofail", *drive.mount_options]),
                                     passno=2 if s.fs == "ext4" else 0))
        if defer_mount and not mounted:
            v.replan = True  # its mountpoint is inside a filesystem that is mounted first
            continue
        if not mounted:
            for inner in unmount_first:
                v.actions.append(_cmd(f"{step}/mount", ["umount", inner],
                                      note=f"mounted inside {drive.mount}, which would hide it; mounted again after"))
                v.replan = True  # the inner drive is mounted again on the next round
            mp = facts.path(drive.mount)
            if mp is None or not mp.exists:
                v.actions.append(_mkdir(f"{step}/mountpoint", drive.mount, None, create=True))
            v.actions.append(_cmd(f"{step}/mount", ["mount", "-t", s.fs, "-o", ",".join(options), path, drive.mount]))
        for role, directory in dirs:
            pf = facts.path(directory)
            here = mounted and pf is not None and pf.exists and pf.mount_target == drive.mount
            owner_ok = opts.owner is None or (here and (pf.owner_uid, pf.owner_gid) == opts.owner)
            if not here or not owner_ok:
                v.actions.append(_mkdir(f"{step}/dir", directory, opts.owner, create=not here))
    if not v.actions and not v.replan:
        v.status = "ready"
    return _read_only_check(v)


# ---------------------------------------------------------------- the whole profile


def role_dirs(config: Config, facts: HostFacts) -> tuple[dict[str, list[tuple[str, str]]], list[tuple[str, str]]]:
    """(drive name -> [(role, dir)] on that drive, [(role, dir)] not on any drive), from the storage plan."""
    storage = plan_storage(config, facts, world=tensor_parallel(config.recipe))
    on_drive: dict[str, list[tuple[str, str]]] = {}
    plain: list[tuple[str, str]] = []
    for target in storage.roles:
        if target.drive:
            on_drive.setdefault(target.drive, []).append((target.role, target.host_path))
        else:
            plain.append((target.role, target.host_path))
    for rs in storage.rank_stores:
        if not rs.shared:
            on_drive.setdefault(rs.drive, []).append((f"rank {rs.rank} store", rs.host_dir))
    for name, entries in on_drive.items():
        seen: set[str] = set()
        on_drive[name] = [(r, d) for r, d in entries if not (d in seen or seen.add(d))]
    return on_drive, plain


def _below(inner: str, outer: str) -> bool:
    return inner.startswith(outer.rstrip("/") + "/")


def _depth(path: str) -> int:
    return path.rstrip("/").count("/")


def resolve_drives(config: Config, facts: HostFacts) -> tuple[dict[str, Disk], list[DriveVerdict]]:
    """Each drive's identity resolved to one disk before anything is decided, and the drives that
    resolve to none (or to several). Two drives on one disk are bad input: one run would lay the
    disk out for the first and then refuse (or, with --erase, wipe) it for the second."""
    found: dict[str, Disk] = {}
    refused: list[DriveVerdict] = []
    if not facts.disks.available:  # no disk was read: say why, not that the drive is missing
        return found, [DriveVerdict(drive, None, "refused", "disks not read",
                                    [f"the host's disks could not be read ({facts.disks.reason})"],
                                    fix="see `hostctl facts` (its disks section); a probe that failed is a bug to "
                                        "report with `hostctl doctor --bundle support.tar.gz`")
                       for drive in config.profile.drives]
    disk_names = {d.name for d in facts.disks.devices}
    for drive in config.profile.drives:
        resolved = resolve_identity(drive.identity.kind, drive.identity.value, facts.disks)
        matches, alias = resolved.disks, resolved.leads_to
        if not matches and alias is not None and alias not in disk_names:
            refused.append(DriveVerdict(drive, None, "refused", "not a whole disk", [
                f"{drive.identity} leads to {alias}, which is a partition or another kind of block device, not a "
                "whole disk: hostctl lays out whole disks"], fix="name the disk that holds it"))
        elif not matches:
            known = "; ".join(f"{d.path} serial {d.serial or '?'}" for d in facts.disks.devices) or "none"
            refused.append(DriveVerdict(drive, None, "refused", "not found",
                                        [f"no disk on this host has identity {drive.identity} (disks: {known})"],
                                        fix="check the identity against `hostctl facts` (serial, wwn, by-id)"))
        elif len(matches) > 1:
            refused.append(DriveVerdict(drive, None, "refused", "ambiguous",
                                        [f"identity {drive.identity} matches {len(matches)} disks "
                                         f"({', '.join(d.path for d in matches)})"],
                                        fix="name the drive by a unique identity (wwn: or by-id:)"))
        else:
            found[drive.name] = matches[0]
    owners: dict[str, str] = {}
    for name, disk in found.items():
        key = disk.dev or disk.name
        if key in owners:
            first = config.profile.drive(owners[key])
            second = config.profile.drive(name)
            assert first is not None and second is not None
            raise InputError(
                f"drives {first.name} ({first.identity}) and {second.name} ({second.identity}) are the same disk, "
                f"{disk.path} ({disk.dev or disk.name}): each drive of the profile needs a disk of its own",
                fix="remove one of the two [[drives]] entries (or correct its identity); `hostctl facts` lists the "
                    "disks with their identities")
        owners[key] = name
    return found, refused


def plan_storage_provision(config: Config, facts: HostFacts, system: SystemFiles, opts: StorageOptions) -> StorageProvision:
    profile = config.profile
    sp = StorageProvision(profile=profile.name, phase=profile.phase, drives=[])
    on_drive, plain = role_dirs(config, facts)
    unknown = [a for a in opts.erase if not any(names_drive(a, d) for d in profile.drives)]
    if unknown:
        raise InputError(f"--erase {unknown[0]}: names no drive in profile {profile.name} "
                         f"(its drives: {', '.join(str(d.identity) for d in profile.drives) or 'none'})",
                         fix="pass the identity exactly as the profile writes it, e.g. serial:XYZ")
    disks, unresolved = resolve_drives(config, facts)
    verdicts: dict[str, DriveVerdict] = {v.drive.name: v for v in unresolved}
    # Outermost mountpoints first: a drive mounted inside another one's mountpoint is planned
    # (and mounted) only once the outer filesystem is there, or the outer mount would hide it.
    for drive in sorted(profile.drives, key=lambda d: _depth(d.mount)):
        if drive.name in verdicts:
            continue
        outers = [o for o in profile.drives if _below(drive.mount, o.mount)]
        defer = any(not _mounted_and_settled(verdicts.get(o.name), o) for o in outers)
        inners = [i.mount for i in profile.drives if _below(i.mount, drive.mount)
                  and any(m.target == i.mount for m in facts.mounts)]
        v = plan_drive(drive, disks[drive.name], facts, on_drive.get(drive.name, []), opts, defer_mount=defer,
                       unmount_first=tuple(sorted(inners, key=_depth, reverse=True)))
        verdicts[drive.name] = v
    sp.drives = [verdicts[d.name] for d in profile.drives]
    for v in sp.drives:
        v.actions = [_explained(v, a) for a in v.actions]
    if not facts.disks.available:
        sp.notes.append(f"disk facts unavailable: {facts.disks.reason}")

    for role, directory in plain:
        state = system.plain_dirs.get(directory, DirState(exists=False))
        owner_ok = opts.owner is None or state.owner == opts.owner
        if not state.exists or not owner_ok:
            sp.system.append(_mkdir(f"storage/dirs/{role}", str(paths.system_path(directory)), opts.owner,
                                    create=not state.exists, host_path=directory).amended(
                why=f"storage role {role} needs this directory (not on a drive of the profile)"))

    if sp.refused or sp.replan:
        return _editable(config, sp, system)  # fstab and sysctls follow the drives: decided once every drive is known

    # outermost first, so a boot without systemd's ordering (`mount -a`) mounts them in order too
    entries = [e for d in sorted(sp.drives, key=lambda d: _depth(d.drive.mount)) for e in d.entries]
    if entries or fstab.current_block(system.fstab):
        new = fstab.with_block(system.fstab, entries)
        if new != (system.fstab or ""):
            sp.system.append(_write("storage/fstab", fstab.FSTAB, system.fstab, new,
                                    why="hostctl's fstab block: every swap and data filesystem of the profile by UUID "
                                        "with nofail, so they come back after a reboot",
                                    target=system.targets.get(fstab.FSTAB)))
    uuids = {u for d in sp.drives for _, u in d.fs_facts.values()}
    devices = {dev for d in sp.drives for dev, _ in d.fs_facts.values()}
    sp.notes += fstab.user_lines_touching(system.fstab, uuids, {d.mount for d in profile.drives}, devices)

    if any(d.swap > 0 for d in profile.drives):
        values = sysctl.desired(profile)
        text = sysctl.render(profile, values)
        if system.sysctl != text:
            sp.system.append(_write("storage/sysctl", sysctl.SYSCTL_FILE, system.sysctl, text,
                                    why=f"the swap sysctls for phase {profile.phase}, kept across reboots",
                                    target=system.targets.get(sysctl.SYSCTL_FILE)))
        current = {"vm.swappiness": facts.memory.swappiness, "vm.page-cluster": facts.memory.page_cluster}
        if current != values:
            sp.system.append(_cmd("storage/sysctl", sysctl.apply_argv(values),
                                  note="now: " + ", ".join(f"{k}={v}" for k, v in current.items())).amended(
                changes="the running kernel's swap sysctls", why=f"the swap sysctls for phase {profile.phase}, applied now"))
    return _editable(config, sp, system)


def drive_problems(config: Config, facts: HostFacts, *, snapshot: bool = False,
                   files: SystemFiles | None = None) -> list[tuple[str, str, str, str | None]]:
    """(code, severity, message, fix) for each thing `provision --only storage --dry-run` would
    refuse on these facts: the plan and doctor report them as errors, so a profile that plans
    clean on the host is one provision accepts. snapshot: the facts describe another host
    (`--facts`), where a drive the snapshot does not hold is expected (planned before the drive
    was fitted, or on another machine): a warning there, not an error. files: the host's files
    the run would edit, as read (facts.sysfiles); an fstab provision could not edit is then
    reported too. Pure: the decision runs on the facts and the files given."""
    from hostctl.plan import codes

    if not config.profile.drives or not facts.disks.available:
        return []
    try:
        sp = plan_storage_provision(config, facts, files or SystemFiles(), StorageOptions())
    except InputError as exc:
        return [(codes.STORAGE_DRIVES_INVALID, "error", exc.message, exc.fix)]
    except RefusedError as exc:  # a file the run would edit cannot be edited (_editable)
        return [(codes.STORAGE_FILE_UNEDITABLE, "error", exc.message, exc.fix)]
    out = []
    for v in sp.refused:
        message = f"provision would refuse drive {v.where()}: {'; '.join(v.reasons)}"
        if v.disk is None:  # its identity resolved to no disk (resolve_drives): nothing was judged
            out.append((codes.STORAGE_DRIVE_UNRESOLVED, "warn" if snapshot else "error", message, v.fix))
        else:
            out.append((codes.STORAGE_DRIVE_REFUSED, "error", message, v.fix))
    return out


def add_drive_problems(plan: Plan, config: Config, facts: HostFacts, *, snapshot: bool = False,
                       files: SystemFiles | None = None) -> Plan:
    """The plan with drive_problems in its storage section (`plan`, `render`, doctor)."""
    for code, severity, message, fix in drive_problems(config, facts, snapshot=snapshot, files=files):
        plan.storage.problem(code, severity, message, fix)
    return plan


def _editable(config: Config, sp: StorageProvision, system: SystemFiles) -> StorageProvision:
    """sp, unless a file it will edit cannot be edited: then refused before anything runs."""
    blocked = _unwritable_files(config, sp, system)
    if blocked and not sp.refused:
        raise RefusedError(f"the run would have to edit {'; '.join(blocked)}; nothing was changed (no drive is "
                           "touched before every file the run will edit is known to be editable)",
                           fix="make the file writable (or point the link at a file root can edit in place), then "
                               "re-run; `--dry-run` checks it too")
    return sp


STATUS_WORDS = {"ready": "ready, nothing to do", "converge": "converge to the layout", "create": "lay out",
                "erase": "ERASE and lay out", "relabel": "relabel (the profile renamed it; nothing is formatted)",
                "refused": "REFUSED"}


def _explained(v: DriveVerdict, a: Action) -> Action:
    """A drive's action with the verdict it serves, what it changes and its consent level: a
    destructive step on a drive being erased needs --erase; any other destructive one --yes."""
    why = f"drive {v.drive.name} ({v.drive.identity}): {STATUS_WORDS[v.status]}" + (f"; {a.why}" if a.why else "")
    changes = a.changes or (v.drive.mount if a.step.endswith("/mount") else (v.disk.path if v.disk else ""))
    level = ("erase" if v.status == "erase" else "yes") if a.destructive else "none"
    return a.amended(why=why, changes=changes, consent=level)


def decide(config: Config, facts: HostFacts, system: SystemFiles, opts: StorageOptions) -> Assessment:
    """The storage part in the act protocol: the actions still needed (none when the host has the
    profile's layout), each drive that needs nothing as settled, each refused drive as a refusal."""
    sp = plan_storage_provision(config, facts, system, opts)
    d = Assessment("storage", detail=sp, pending=sp.replan)
    for v in sorted(sp.drives, key=lambda x: _depth(x.drive.mount)):
        step = f"storage/{v.drive.name}"
        if v.refused:
            d.add(Refusal(id=step, reason="; ".join(v.reasons)))
        elif not v.actions and not v.replan:
            d.add(Settled(id=step, what=f"{v.found}; {STATUS_WORDS['ready']}"))
        for a in v.actions:
            d.add(a)
    for a in sp.system:
        d.add(a)
    if not (sp.refused or sp.replan):
        changed = {a.step for a in sp.system}
        if "storage/fstab" not in changed and any(v.entries for v in sp.drives):
            d.add(Settled(id="storage/fstab", what=f"{fstab.FSTAB}: hostctl's block names every filesystem of the profile"))
        if "storage/sysctl" not in changed and any(x.swap > 0 for x in config.profile.drives):
            d.add(Settled(id="storage/sysctl", what=f"{sysctl.SYSCTL_FILE} and the running kernel hold the swap sysctls "
                                            f"for phase {config.profile.phase}"))
    for role, directory in role_dirs(config, facts)[1]:
        if f"storage/dirs/{role}" not in {a.step for a in sp.system}:
            d.add(Settled(id=f"storage/dirs/{role}", what=f"{directory} exists"))
    for note in sp.notes:
        d.add(Note(id="storage", message=note))
    return d


def pending_swap_bytes(sp: StorageProvision) -> int:
    """Swap the storage part adds once it converges: every drive it will lay out or converge whose
    swap partition is not active now (a dry run judges the later parts with it added, as the real
    run does after storage has run)."""
    total = 0
    for v in sp.drives:
        if v.refused or v.disk is None:
            continue
        if any(_role(p) == "swap" and p.swap_active for p in v.disk.partitions):
            continue
        total += sum(s.size or 0 for s in layout(v.drive) if s.role == "swap")
    return total


def facts_after(facts: HostFacts, sp: StorageProvision) -> HostFacts:
    """The facts as the storage part leaves them, for deciding later parts in a dry run: its
    pending swap counted as on (memory decisions read SwapTotal)."""
    add = pending_swap_bytes(sp)
    if not add:
        return facts
    memory = facts.memory.model_copy(update={"swap_total_bytes": facts.memory.swap_total_bytes + add,
                                             "swap_free_bytes": facts.memory.swap_free_bytes + add})
    return facts.model_copy(update={"memory": memory})


def _mounted_and_settled(v: DriveVerdict | None, drive: Drive) -> bool:
    """The drive's data filesystem is mounted at its mountpoint now and this round changes nothing
    about that: what is planned inside the mountpoint lands on it."""
    if v is None or v.refused or v.replan or v.disk is None:
        return False
    mounted = any(drive.mount in p.mountpoints and _role(p) == "data" for p in v.disk.partitions)
    return mounted and not any(a.step.endswith(("/mount", "/format-data", "/relabel")) for a in v.actions)
