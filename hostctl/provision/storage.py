"""Storage provisioning decisions: for each drive in the profile, the safety verdict and the
Actions that bring it to hostctl's layout, then the fstab block, the swap sysctls and the
cache directories each role needs.

hostctl's layout on a drive: a GPT with `hostctl-swap-<drive>` (swap of the configured size,
label `hcswap-<drive>`, when `swap` > 0) and `hostctl-data-<drive>` (the rest; ext4 or xfs,
label `hcdata-<drive>`, mounted at the drive's mountpoint), both in fstab by UUID with nofail.

Deciding is pure: (Config, HostFacts, SystemFiles, Options) -> StorageProvision. Nothing here
touches the host; an Action's `run` does, when apply.py calls it. Every decision compares the
desired state with the facts, so a host in any half-provisioned state gets only the actions it
still needs, and a partition that carries hostctl's label and expected filesystem is never
formatted again. Destructive actions also re-check the device just before they act
(`_guard_blank`): facts can be stale, a filesystem must not be.
"""

from __future__ import annotations

import math
import os
import shlex
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from hostctl import paths, runner
from hostctl.config import Config, Drive
from hostctl.errors import FailedError, InputError, RefusedError
from hostctl.facts.disks import parse_blkid_export, table_entries
from hostctl.facts.model import Disk, HostFacts, Partition
from hostctl.plan.storage import plan_storage
from hostctl.provision import files, fstab, sysctl
from hostctl.provision.actions import Action
from hostctl.units import MIB, fmt_bytes

SWAP_TYPE = ("8200", "0657fd6d-a4ab-43c4-84e5-0933c84b4f4f")
LINUX_TYPE = ("8300", "0fc63daf-8483-4772-8e79-3d69d8477de4")
ALIGN = MIB  # sgdisk starts the first partition at 1 MiB
GPT_TAIL = MIB  # the backup GPT at the end, rounded up
MIN_DATA = {"ext4": 32 * MIB, "xfs": 300 * MIB}  # mkfs.xfs refuses filesystems under 300 MiB
SIZE_TOLERANCE = MIB
PARTITION_WAIT_S = 10.0
MKFS_TIMEOUT_S = 1800.0  # lazy init makes this seconds; a slow drive still must not hang forever


def tensor_parallel(config: Config) -> int:
    """The number of ranks whose store files exist (`rank<r>of<N>`): the recipe's TP size."""
    tp = config.recipe.args().get("--tensor-parallel-size")
    if tp and tp.isdigit():
        return max(int(tp), 1)
    return max(config.recipe.requires.gpus, 1)


# ---------------------------------------------------------------- the layout


@dataclass(frozen=True)
class PartSpec:
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
        size = math.ceil(drive.swap / MIB) * MIB
        specs.append(PartSpec(1, "swap", f"hostctl-swap-{drive.name}", *SWAP_TYPE, size, "swap", f"hcswap-{drive.name}"))
    specs.append(PartSpec(len(specs) + 1, "data", f"hostctl-data-{drive.name}", *LINUX_TYPE, None, drive.filesystem,
                          f"hcdata-{drive.name}"))
    return specs


def required_bytes(drive: Drive) -> int:
    swap = sum(s.size or 0 for s in layout(drive))
    return ALIGN + swap + MIN_DATA[drive.filesystem] + GPT_TAIL


def partition_path(disk_path: str, number: int) -> str:
    """The kernel's name for partition N: nvme0n1p2 and loop0p2 (a name ending in a digit), sda2."""
    return f"{disk_path}p{number}" if disk_path[-1].isdigit() else f"{disk_path}{number}"


def identity_matches(drive: Drive, disk: Disk) -> bool:
    ident = drive.identity
    if ident.kind == "serial":
        return disk.serial is not None and disk.serial == ident.value
    if ident.kind == "wwn":
        return disk.wwn is not None and disk.wwn.lower() == ident.value.lower()
    if ident.kind == "by-id":
        return os.path.basename(ident.value) in disk.by_id
    return disk.path == ident.value


def names_drive(erase_arg: str, drive: Drive) -> bool:
    """--erase takes the identity as the profile writes it (serial:X) or its bare value (X)."""
    return erase_arg in (str(drive.identity), drive.identity.value)


# ---------------------------------------------------------------- inputs and outputs


@dataclass
class Options:
    erase: tuple[str, ...] = ()  # the --erase arguments
    owner: tuple[int, int] | None = None  # SUDO_UID/SUDO_GID: who owns the cache directories
    new_uuid: Callable[[], str] = field(default=lambda: str(uuid.uuid4()))


@dataclass(frozen=True)
class DirState:
    exists: bool
    owner: tuple[int, int] | None = None


@dataclass
class SystemFiles:
    """What hostctl reads of its own system files (under the sysroot) before deciding."""

    fstab: str | None = None
    sysctl: str | None = None
    plain_dirs: dict[str, DirState] = field(default_factory=dict)  # role directories not on a drive


@dataclass
class DriveVerdict:
    drive: Drive
    disk: Disk | None
    status: Literal["ready", "converge", "create", "erase", "refused"]
    found: str  # what is on the drive now, one line
    reasons: list[str] = field(default_factory=list)  # why it is refused
    fix: str | None = None
    actions: list[Action] = field(default_factory=list)
    replan: bool = False  # its partitions can be planned only after the kernel loads the table
    entries: list[fstab.Entry] = field(default_factory=list)
    fs_facts: dict[str, tuple[str, str]] = field(default_factory=dict)  # role -> (device, uuid)

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


@dataclass
class StorageProvision:
    profile: str
    phase: str
    drives: list[DriveVerdict]
    system: list[Action] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def actions(self) -> list[Action]:
        return [a for d in self.drives for a in d.actions] + self.system

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
    def _run() -> None:
        if before:
            before()
        # stdin is empty: a tool that would ask (mke2fs "Proceed anyway?") gets no answer and stops.
        res = runner.run(argv, timeout=timeout, input_text="")
        if not res.ok:
            raise FailedError(f"{step}: {res.why()}", details=(res.stderr or res.stdout).strip().splitlines()[-5:])
        if after:
            after()

    describe = shlex.join(argv) + (f"    # {note}" if note else "")
    return Action(step=step, describe=describe, run=_run, destructive=destructive)


def _signatures(path: str) -> dict[str, str]:
    res = runner.run(["blkid", "-p", "-o", "export", path], timeout=20)
    if res.missing or res.timed_out:
        raise FailedError(f"cannot check {path} before writing to it: {res.why()}")
    return parse_blkid_export(res.stdout).get(path, {})


def _guard_blank(path: str, drive: Drive, *, whole_disk: bool = False) -> Callable[[], None]:
    """Just before a destructive write: the device must carry no filesystem (and a whole disk no
    partition table with entries). Facts may be stale; this re-reads the device itself."""

    def _check() -> None:
        tags = _signatures(path)
        found = None
        if tags.get("TYPE"):
            found = f"a {tags['TYPE']} signature" + (f" labelled {tags['LABEL']!r}" if tags.get("LABEL") else "")
        elif whole_disk and tags.get("PTTYPE") and (tags["PTTYPE"] != "gpt" or table_entries(path)):
            found = f"a {tags['PTTYPE']} partition table with entries"
        if found:
            raise RefusedError(
                f"drive {drive.name} ({drive.identity}): {path} now carries {found}, which the plan did not see "
                "(old data left at that place, or another program wrote it); nothing was written to it",
                fix=f"look at it (`blkid -p {path}`); to erase it, re-run with --erase {drive.identity}",
            )

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

    def _run() -> None:
        os.makedirs(path, mode=0o755, exist_ok=True)
        if owner is not None:
            os.chown(path, *owner)

    return Action(step=step, describe=" && ".join(parts), run=_run)


def _write(step: str, host_path: str, old: str | None, new: str) -> Action:
    return Action(step=step, describe=f"edit {host_path}:\n{files.diff(host_path, old, new)}",
                  run=lambda: files.write_atomic(host_path, new) and None)


# ---------------------------------------------------------------- one drive


def _fs_ok(part: Partition, spec: PartSpec) -> bool:
    return part.fs_type == spec.fs and part.fs_label == spec.label


def _describe_part(p: Partition) -> str:
    what = p.fs_type or "no filesystem"
    if p.fs_label:
        what += f" {p.fs_label!r}"
    return f"{p.path}" + (f" ({p.part_label!r})" if p.part_label else "") + f": {what}"


def _usage_refusals(drive: Drive, disk: Disk, specs: list[PartSpec], facts: HostFacts) -> list[str]:
    reasons = []
    by_name = {s.name: s for s in specs}
    if disk.is_root_disk:
        reasons.append("it carries the root or boot filesystem")
    if disk.holders:
        reasons.append(f"it is in use by {', '.join(disk.holders)} (LVM, md or dm)")
    if disk.mountpoints:
        reasons.append(f"it is mounted at {', '.join(disk.mountpoints)}")
    if disk.swap_active:
        reasons.append("it is active swap")
    ours_mounted_here = False
    for p in disk.partitions:
        spec = by_name.get(p.part_label or "")
        if p.holders:
            reasons.append(f"partition {p.path} is in use by {', '.join(p.holders)} (LVM, md or dm)")
        if p.swap_active and not (spec and spec.role == "swap" and _fs_ok(p, spec)):
            reasons.append(f"partition {p.path} is active swap that hostctl did not create "
                           f"(label {p.fs_label!r}, expected {specs[0].label!r} on {specs[0].name!r})")
        if p.mountpoints:
            if spec and spec.role == "data" and _fs_ok(p, spec) and drive.mount in p.mountpoints:
                ours_mounted_here = True  # hostctl's own data mount, as it should be (extra binds are fine)
            else:
                reasons.append(f"partition {p.path} is mounted at {', '.join(p.mountpoints)}")
    taken = [m for m in facts.mounts if m.target == drive.mount]
    if taken and not ours_mounted_here:
        reasons.append(f"its mount point {drive.mount} is taken by {', '.join(m.source for m in taken)}")
    if disk.size_bytes < required_bytes(drive):
        reasons.append(f"it is smaller than the layout: {fmt_bytes(disk.size_bytes)}, the profile's layout needs "
                       f"{fmt_bytes(required_bytes(drive))} (swap {fmt_bytes(drive.swap)} + at least "
                       f"{fmt_bytes(MIN_DATA[drive.filesystem])} of {drive.filesystem})")
    return reasons


def plan_drive(drive: Drive, facts: HostFacts, dirs: list[tuple[str, str]], opts: Options) -> DriveVerdict:
    """dirs: (role, directory) the roles need on this drive's data filesystem."""
    matches = [d for d in facts.disks.devices if identity_matches(drive, d)]
    if not matches:
        known = "; ".join(f"{d.path} serial {d.serial or '?'}" for d in facts.disks.devices) or "none"
        return DriveVerdict(drive, None, "refused", "not found",
                            [f"no disk on this host has identity {drive.identity} (disks: {known})"],
                            fix="check the identity against `hostctl facts` (serial, wwn, by-id)")
    if len(matches) > 1:
        return DriveVerdict(drive, None, "refused", "ambiguous",
                            [f"identity {drive.identity} matches {len(matches)} disks "
                             f"({', '.join(d.path for d in matches)})"],
                            fix="name the drive by a unique identity (wwn: or by-id:)")
    disk = matches[0]
    specs = layout(drive)
    v = DriveVerdict(drive, disk, "converge", "")
    refusals = _usage_refusals(drive, disk, specs, facts)
    if refusals:
        v.status, v.reasons, v.found = "refused", refusals, "in use"
        v.fix = "choose another drive, or stop what uses this one (unmount, swapoff, remove it from LVM/md)"
        return v

    step = f"storage/{drive.name}"
    by_name = {p.part_label: p for p in disk.partitions if p.part_label}
    foreign: list[str] = []  # contents that only --erase may destroy
    mismatch: list[str] = []  # hostctl's partitions, but not the profile's layout
    if disk.fs_type:
        foreign.append(f"a {disk.fs_type} filesystem on the whole disk")
    if disk.table_type and disk.table_type != "gpt":
        foreign.append(f"a {disk.table_type} partition table")
    spec_names = {s.name for s in specs}
    for p in disk.partitions:
        if (p.part_label or "") not in spec_names:
            foreign.append(f"partition {_describe_part(p)}")
    for s in specs:
        p = by_name.get(s.name)
        if p is None:
            continue
        if p.number != s.number:
            mismatch.append(f"{s.name} is partition {p.number}, the layout puts it at {s.number}")
        if s.size is not None and abs(p.size_bytes - s.size) > SIZE_TOLERANCE:
            mismatch.append(f"{s.name} is {fmt_bytes(p.size_bytes)}, the profile asks for {fmt_bytes(s.size)}")
    present = [s for s in specs if s.name in by_name]
    if present and present != specs[: len(present)] and not mismatch:
        mismatch.append(f"{specs[0].name} is missing before {present[0].name}")

    if (disk.table_type == "gpt" and not foreign and disk.table_entries is not None
            and disk.table_entries != len(disk.partitions)):
        # The table on the drive is not what the kernel shows (a run stopped right after writing
        # it): load it, then look again at what the partitions hold.
        v.found = f"GPT with {disk.table_entries} entries, {len(disk.partitions)} loaded by the kernel"
        v.actions = [_cmd(f"{step}/rescan", ["partx", "-u", disk.path], note="load the on-disk table; then re-plan")]
        v.replan = True
        return v

    data_spec = specs[-1]
    data_part = by_name.get(data_spec.name)
    protected = data_part is not None and _fs_ok(data_part, data_spec)
    erase_named = any(names_drive(a, drive) for a in opts.erase)
    wrong_fs = {s.name: by_name[s.name] for s in specs
                if s.name in by_name and by_name[s.name].fs_type and not _fs_ok(by_name[s.name], s)}

    if foreign or mismatch:
        what = "; ".join(foreign + mismatch)
        if protected:
            v.status, v.found = "refused", "hostctl's data filesystem and more"
            v.reasons = [f"it holds hostctl's data filesystem ({data_spec.label} on {data_part.path}) and also {what}; "
                         "hostctl never erases its own data filesystem, with or without --erase"]
            v.fix = ("keep the layout by changing the profile to match it, or move the data away and wipe the drive "
                     f"yourself (`wipefs --all` its partitions, then `sgdisk --zap-all {disk.path}`)")
            return v
        if not erase_named:
            v.status, v.found = "refused", "foreign contents"
            v.reasons = [f"it holds {what}"]
            v.fix = f"if that may be destroyed, re-run with --erase {drive.identity}"
            return v
        v.status, v.found = "erase", f"erase: {what}"
        for p in disk.partitions:
            if p.fs_type:
                v.actions.append(_cmd(f"{step}/wipe", ["wipefs", "--all", p.path], destructive=True))
        v.actions.append(_cmd(f"{step}/wipe", ["sgdisk", "--zap-all", disk.path], destructive=True))
        v.actions.append(_cmd(f"{step}/wipe", ["wipefs", "--all", disk.path], destructive=True))
        return _lay_out(v, specs, [], opts, dirs, facts, fresh=True, wipe_new=True)

    if wrong_fs and not erase_named:
        v.status, v.found = "refused", "foreign filesystem"
        v.reasons = [f"partition {_describe_part(p)} is not the {s.fs} filesystem labelled {s.label!r} the layout "
                     "expects" for s in specs if (p := wrong_fs.get(s.name)) is not None]
        v.fix = f"if that may be destroyed, re-run with --erase {drive.identity}"
        return v

    blank = not disk.table_type and not disk.partitions
    empty_gpt = disk.table_type == "gpt" and not disk.partitions and not disk.table_entries
    if blank or empty_gpt:
        v.status, v.found = "create", "blank" if blank else "an empty GPT"
        return _lay_out(v, specs, [], opts, dirs, facts, fresh=True, wipe_new=False)
    v.found = "hostctl layout"
    for name, p in wrong_fs.items():
        v.status = "erase"
        v.actions.append(_cmd(f"{step}/wipe", ["wipefs", "--all", p.path], destructive=True,
                              note=f"--erase: {_describe_part(p)}"))
    return _lay_out(v, specs, [by_name.get(s.name) for s in specs], opts, dirs, facts, fresh=False,
                    wipe_new=False, reformat=set(wrong_fs))


def _lay_out(v: DriveVerdict, specs: list[PartSpec], parts: list[Partition | None], opts: Options,
             dirs: list[tuple[str, str]], facts: HostFacts, *, fresh: bool, wipe_new: bool,
             reformat: set[str] = frozenset()) -> DriveVerdict:
    """Actions from the current partitions (None: missing) to the layout, in order: table, nodes,
    filesystems, swap on, mount, directories. `fresh`: write a new table over a blank disk."""
    drive, disk = v.drive, v.disk
    assert disk is not None
    step = f"storage/{drive.name}"
    parts = parts or [None] * len(specs)
    missing = [s for s, p in zip(specs, parts) if p is None]
    nodes = [partition_path(disk.path, s.number) for s in specs]

    if missing:
        argv = ["sgdisk"] + (["--clear"] if fresh else [])
        for s in missing:
            end = f"+{s.size // MIB}M" if s.size is not None else "0"
            argv += [f"--new={s.number}:0:{end}", f"--typecode={s.number}:{s.type_code}",
                     f"--change-name={s.number}:{s.name}"]
        argv.append(disk.path)
        guard = _guard_blank(disk.path, drive, whole_disk=True) if fresh else None
        v.actions.append(_cmd(f"{step}/partition", argv, destructive=True, before=guard))
        v.actions.append(_cmd(f"{step}/rescan", ["partx", "-u", disk.path], after=_wait_for(nodes, disk.path),
                              note="load the new table; wait for the partition nodes"))

    for s, p, node in zip(specs, parts, nodes):
        path = p.path if p is not None else node
        if p is not None and _fs_ok(p, s) and s.name not in reformat:
            v.fs_facts[s.role] = (path, p.fs_uuid or "")
            continue
        if wipe_new and p is None:
            # a new partition may start where an old filesystem did; --erase covers wiping it
            v.actions.append(_cmd(f"{step}/wipe", ["wipefs", "--all", node], destructive=True,
                                  note="old signatures inside the new partition"))
        fs_uuid = opts.new_uuid()
        v.fs_facts[s.role] = (path, fs_uuid)
        guard = _guard_blank(path, drive)
        if s.role == "swap":
            argv = ["mkswap", "--label", s.label, "--uuid", fs_uuid, path]
        elif s.fs == "ext4":
            # no reserved blocks (a cache, not a root fs); lazy init: a 4 TB drive formats in seconds
            argv = ["mkfs.ext4", "-q", "-m", "0", "-L", s.label, "-U", fs_uuid,
                    "-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", path]
        else:
            argv = ["mkfs.xfs", "-q", "-K", "-L", s.label, "-m", f"uuid={fs_uuid}", path]
        v.actions.append(_cmd(f"{step}/format-{s.role}", argv, destructive=True, before=guard, timeout=MKFS_TIMEOUT_S))

    for s, p in zip(specs, parts):
        path, fs_uuid = v.fs_facts[s.role]
        if s.role == "swap":
            active = p is not None and p.swap_active and s.name not in reformat
            if active and p.swap_priority != drive.swap_priority:
                v.actions.append(_cmd(f"{step}/swap", ["swapoff", path], timeout=600,
                                      note=f"priority {p.swap_priority}, the profile says {drive.swap_priority}"))
                active = False
            if not active:
                v.actions.append(_cmd(f"{step}/swap", ["swapon", "--priority", str(drive.swap_priority), path]))
            v.entries.append(fstab.Entry(f"UUID={fs_uuid}", "none", "swap", f"pri={drive.swap_priority},nofail"))
        else:
            mounted = p is not None and drive.mount in p.mountpoints and s.name not in reformat
            options = ["noatime", *drive.mount_options]
            if not mounted:
                mp = facts.path(drive.mount)
                if mp is None or not mp.exists:
                    v.actions.append(_mkdir(f"{step}/mountpoint", drive.mount, None, create=True))
                v.actions.append(_cmd(f"{step}/mount", ["mount", "-t", s.fs, "-o", ",".join(options), path, drive.mount]))
            v.entries.append(fstab.Entry(f"UUID={fs_uuid}", drive.mount, s.fs,
                                         ",".join(["defaults", "noatime", "nofail", *drive.mount_options]),
                                         passno=2 if s.fs == "ext4" else 0))
            for role, directory in dirs:
                pf = facts.path(directory)
                here = mounted and pf is not None and pf.exists and pf.mount_target == drive.mount
                owner_ok = opts.owner is None or (here and (pf.owner_uid, pf.owner_gid) == opts.owner)
                if not here or not owner_ok:
                    v.actions.append(_mkdir(f"{step}/dir", directory, opts.owner, create=not here))
    if not v.actions:
        v.status = "ready"
    return v


# ---------------------------------------------------------------- the whole profile


def role_dirs(config: Config, facts: HostFacts) -> tuple[dict[str, list[tuple[str, str]]], list[tuple[str, str]]]:
    """(drive name -> [(role, dir)] on that drive, [(role, dir)] not on any drive), from the storage plan."""
    storage = plan_storage(config, facts, world=tensor_parallel(config))
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


def dir_requests(config: Config) -> list[str]:
    """Directories whose facts (existence, mount, owner) the storage decisions read."""
    from hostctl.plan.storage import ROLE_DIRS, rank_store_dir

    profile = config.profile
    out = [d.mount for d in profile.drives]
    for d in profile.drives:
        out += [f"{d.mount}/{sub}" for sub in ROLE_DIRS.values()]
    for rank in range(tensor_parallel(config)):
        for d in profile.drives:
            out.append(rank_store_dir(d.mount, rank))
    return list(dict.fromkeys(out))


def plan_storage_provision(config: Config, facts: HostFacts, system: SystemFiles, opts: Options) -> StorageProvision:
    profile = config.profile
    sp = StorageProvision(profile=profile.name, phase=profile.phase, drives=[])
    on_drive, plain = role_dirs(config, facts)
    unknown = [a for a in opts.erase if not any(names_drive(a, d) for d in profile.drives)]
    if unknown:
        raise InputError(f"--erase {unknown[0]}: names no drive in profile {profile.name} "
                         f"(its drives: {', '.join(str(d.identity) for d in profile.drives) or 'none'})",
                         fix="pass the identity exactly as the profile writes it, e.g. serial:XYZ")
    for drive in profile.drives:
        sp.drives.append(plan_drive(drive, facts, on_drive.get(drive.name, []), opts))
    if not facts.disks.available:
        sp.notes.append(f"disk facts unavailable: {facts.disks.reason}")

    for role, directory in plain:
        state = system.plain_dirs.get(directory, DirState(False))
        owner_ok = opts.owner is None or state.owner == opts.owner
        if not state.exists or not owner_ok:
            sp.system.append(_mkdir(f"storage/dirs/{role}", str(paths.system_path(directory)), opts.owner,
                                    create=not state.exists, host_path=directory))

    if sp.refused or sp.replan:
        return sp  # fstab and sysctls follow the drives: decided once every drive is known

    entries = [e for d in sp.drives for e in d.entries]
    if entries or fstab.current_block(system.fstab):
        new = fstab.with_block(system.fstab, entries)
        if new != (system.fstab or ""):
            sp.system.append(_write("storage/fstab", fstab.FSTAB, system.fstab, new))
    uuids = {u for d in sp.drives for _, u in d.fs_facts.values()}
    devices = {dev for d in sp.drives for dev, _ in d.fs_facts.values()}
    sp.notes += fstab.user_lines_touching(system.fstab, uuids, {d.mount for d in profile.drives}, devices)

    if any(d.swap > 0 for d in profile.drives):
        values = sysctl.desired(profile)
        text = sysctl.render(profile, values)
        if system.sysctl != text:
            sp.system.append(_write("storage/sysctl", sysctl.SYSCTL_FILE, system.sysctl, text))
        current = {"vm.swappiness": facts.memory.swappiness, "vm.page-cluster": facts.memory.page_cluster}
        if current != values:
            sp.system.append(_cmd("storage/sysctl", sysctl.apply_argv(values),
                                   note="now: " + ", ".join(f"{k}={v}" for k, v in current.items())))
    return sp
