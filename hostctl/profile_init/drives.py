"""Which disks a new profile may use, and as what: the stable identity each disk is named by
(serial, else wwn, else by-id, else path), the candidate [[drives]] entry for it (a fresh name
on a blank disk; on a disk that already carries hostctl's layout, that layout's own name, swap,
filesystem and mountpoint), whether the storage planner would lay it out without refusing, and
how the swap a recipe's first conversion needs is spread over the chosen drives.

Pure: everything here reads HostFacts. Whether a disk holds something hostctl would refuse is
not decided here: `storage_verdict` asks the storage planner (provision/storage.py) itself.
"""

from __future__ import annotations

import math

from pydantic import Field

from hostctl import marks
from hostctl.config import Drive, DriveIdentity
from hostctl.data import Data
from hostctl.facts.disks import resolve_identity
from hostctl.facts.records import Disk, DiskFacts, HostFacts, Partition
from hostctl.provision.storage import DriveVerdict, StorageOptions, plan_drive, required_bytes
from hostctl.bytesizes import MIB, fmt_bytes

DEFAULT_PRIORITY = 100  # every drive's swap at one priority: the kernel stripes pages over them (README)
PROBE_NAME = "candidate"  # the name a disk is judged under before it is given its own
# At most this share of a drive goes to swap, so the data filesystem (planes, packs) keeps the rest.
MAX_SWAP_SHARE = 0.5
USABLE = ("create", "converge", "ready")


def storage_verdict(drive: Drive, facts: HostFacts) -> DriveVerdict:
    """The storage planner's own verdict on laying `drive` out on this host, with no --erase and no
    cache directories: the one place init asks whether a disk holds anything hostctl would refuse."""
    matches = resolve_identity(drive.identity.kind, drive.identity.value, facts.disks).disks
    if len(matches) != 1:
        return DriveVerdict(drive, None, "refused", "not found" if not matches else "ambiguous",
                            [f"identity {drive.identity} matches {len(matches)} disks"])
    return plan_drive(drive, matches[0], facts, [], StorageOptions())


def verdict_problem(v: DriveVerdict) -> str | None:
    """None when provisioning would lay the drive out (blank, or hostctl's own layout); else why not."""
    if v.status not in USABLE:
        why = "; ".join(v.reasons) or v.found
        return why + ("" if v.status == "refused" else f" (the storage planner says {v.status})")
    if v.replan:
        return (f"{v.found}: the partition table on the disk is not the one the kernel has loaded, so its "
                f"contents are unknown; run `partx -u {v.disk.path if v.disk else ''}` and `hostctl init` again")
    return None


def stable_identity(disk: Disk, disks: list[Disk]) -> DriveIdentity:
    """serial, else wwn, else a /dev/disk/by-id name, else the kernel path: the first form that
    names this disk and no other (two drives may share a serial, e.g. virtual ones)."""
    forms: list[tuple[str, str]] = []
    if disk.serial:
        forms.append(("serial", disk.serial))
    if disk.wwn:
        forms.append(("wwn", disk.wwn))
    forms += [("by-id", link) for link in disk.by_id]
    for kind, value in forms:
        ident = DriveIdentity(kind=kind, value=value)
        if [d.path for d in resolve_identity(kind, value, DiskFacts(devices=disks)).disks] == [disk.path]:
            return ident
    return DriveIdentity(kind="path", value=disk.path)


def _probe(ident: DriveIdentity, name: str = PROBE_NAME, **kw) -> Drive:
    return Drive(name=name, identity=ident, **kw)


class Existing(Data):
    """hostctl's layout found on a disk by its partition names."""

    name: str
    swap_bytes: int
    swap_priority: int
    filesystem: str
    mountpoint: str | None


def hostctl_layout(disk: Disk) -> Existing | None:
    parts: dict[str, dict[str, Partition]] = {}
    for p in disk.partitions:
        role, name = marks.role_of(p.part_label, p.fs_label), marks.drive_of(p.part_label, p.fs_label)
        if role and name:
            parts.setdefault(name, {})[role] = p
    if not parts:
        return None
    # One name per drive; on a disk with several, the planner calls the others foreign.
    name = next((n for n in sorted(parts) if "data" in parts[n]), sorted(parts)[0])
    swap, data = parts[name].get("swap"), parts[name].get("data")
    priority = DEFAULT_PRIORITY
    if swap is not None and swap.swap_active and swap.swap_priority is not None and 0 <= swap.swap_priority <= 32767:
        priority = swap.swap_priority
    return Existing(
        name=name,
        swap_bytes=math.ceil(swap.size_bytes / MIB) * MIB if swap is not None else 0,
        swap_priority=priority,
        filesystem=data.fs_type if data is not None and data.fs_type in ("ext4", "xfs") else "ext4",
        mountpoint=data.mountpoints[0] if data is not None and data.mountpoints else None,
    )


class Candidate(Data):
    disk: Disk
    identity: DriveIdentity
    existing: Existing | None
    problem: str | None  # why it cannot be used; None: it can
    named: bool = False
    name: str = ""
    swap_bytes: int = 0
    notes: list[str] = Field(default_factory=list)

    @property
    def max_swap(self) -> int:
        """The most swap a new layout puts on this disk: MAX_SWAP_SHARE of what the layout leaves."""
        room = self.disk.size_bytes - required_bytes(_probe(self.identity))
        return max(int(room * MAX_SWAP_SHARE) // MIB * MIB, 0)

    def drive(self) -> Drive:
        e = self.existing
        if e is not None:
            return Drive(name=self.name, identity=self.identity, swap=e.swap_bytes, swap_priority=e.swap_priority,
                         filesystem=e.filesystem, mountpoint=e.mountpoint or f"/mnt/hostctl/{self.name}")
        return Drive(name=self.name, identity=self.identity, swap=self.swap_bytes, swap_priority=DEFAULT_PRIORITY,
                     filesystem="ext4", mountpoint=f"/mnt/hostctl/{self.name}")


def judge(disk: Disk, facts: HostFacts) -> Candidate:
    """The disk's identity, any hostctl layout on it, and whether the storage planner would use it."""
    ident = stable_identity(disk, facts.disks.devices)
    existing = hostctl_layout(disk)
    try:
        if existing is not None:
            probe = _probe(ident, existing.name, swap=existing.swap_bytes, swap_priority=existing.swap_priority,
                           filesystem=existing.filesystem,
                           mountpoint=existing.mountpoint or f"/mnt/hostctl/{existing.name}")
        else:
            probe = _probe(ident)
    except ValueError as exc:  # a layout no valid profile can describe (e.g. an xfs drive with a long name)
        return Candidate(disk=disk, identity=ident, existing=existing, problem=f"its hostctl partitions cannot be described by a profile: {exc}")
    problem = verdict_problem(storage_verdict(probe, facts))
    return Candidate(disk=disk, identity=ident, existing=existing, problem=problem)


def describe(disk: Disk) -> str:
    what = [disk.path]
    if disk.model:
        what.append(disk.model)
    what.append(fmt_bytes(disk.size_bytes))
    return ", ".join(what)


def allocate_names(chosen: list[Candidate], facts: HostFacts, reserved: set[str]) -> None:
    """Fresh names for new drives (ssd1, ssd2, ...; hdd<N> for a spinning disk), skipping the names
    of hostctl layouts anywhere on this host and names whose default mountpoint is taken."""
    taken = set(reserved)
    for c in chosen:
        if c.existing is not None:
            c.name = c.existing.name
            taken.add(c.name)
    mounted = {m.target for m in facts.mounts}
    for c in chosen:
        if c.existing is not None:
            continue
        stem = "hdd" if c.disk.rotational else "ssd"
        n = 1
        while f"{stem}{n}" in taken or f"/mnt/hostctl/{stem}{n}" in mounted:
            n += 1
        c.name = f"{stem}{n}"
        taken.add(c.name)


def share_swap(chosen: list[Candidate], need: int, mem_total: int, other_swap: int) -> dict:
    """Spread what the first conversion still needs (need - MemTotal - swap already in hostctl's
    layout on the chosen drives) equally over the new drives, in whole MiB, capped per drive."""
    kept = sum(c.existing.swap_bytes for c in chosen if c.existing is not None)
    new = [c for c in chosen if c.existing is None]
    missing = max(need - mem_total - kept, 0) if need else 0
    per = math.ceil(missing / len(new) / MIB) * MIB if new and missing else 0
    for c in new:
        c.swap_bytes = min(per, c.max_swap)
        if c.swap_bytes < per:
            c.notes.append(f"swap capped at {fmt_bytes(c.swap_bytes)} (half of what the layout leaves on this "
                           f"{fmt_bytes(c.disk.size_bytes)} drive); its share was {fmt_bytes(per)}")
    placed = sum(c.swap_bytes for c in new)
    return {"need_bytes": need, "mem_total_bytes": mem_total, "other_swap_bytes": other_swap, "kept_bytes": kept,
            "missing_bytes": missing, "new_drives": len(new), "per_drive_bytes": per,
            "shortfall_bytes": max(missing - placed, 0)}
