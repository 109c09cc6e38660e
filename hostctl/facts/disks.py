"""Disk facts: whole disks and their partitions, with the identity the profile names them by
(serial, WWN, /dev/disk/by-id), what is on them (partition table, GPT names, filesystems) and
what is using them (mounts, holders, active swap, the root filesystem).

Identities and contents come from udev (through pyudev) for the devices udevd has initialised;
without udevd (containers, CI) there are none, so identities come from sysfs attributes and
contents from a low-level `blkid -p` probe of the device itself.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import struct
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from hostctl import runner
from hostctl.facts.memory import read_swaps
from hostctl import marks
from hostctl.facts.records import (BlankProof, Disk, DiskFacts, DriveMatch, FsCheck, GptEntryTrace, Partition,
                                   SwapDevice)
from hostctl.facts.mounts import MountLine, read_mountinfo

SYS_BLOCK = Path("/sys/block")
SYS_DEV_BLOCK = Path("/sys/dev/block")
SYS_CLASS_BLOCK = Path("/sys/class/block")
BY_ID = Path("/dev/disk/by-id")
ROOT_MOUNTS = ("/", "/boot")
# stacking devices (dm, md) are reported as holders of the disks they sit on, not as disks
SKIP_PREFIXES = ("ram", "zram", "dm-", "md", "sr", "fd")
SECTOR = 512
MIB = 1 << 20
GIB = 1 << 30
SAMPLE = 4096
GPT_MAGIC = b"EFI PART"
# type GUID, partition GUID, first LBA, last LBA, attribute bits, name (36 UTF-16 code units)
GPT_ENTRY = struct.Struct("<16s16sQQQ72s")
GPT_STANDARD_ENTRIES = 128 * 128  # the entry array every partitioner writes: 128 entries of 128 bytes
# Where a GPT lives in the first and last MiB, at either sector size (512 or 4096): the protective
# MBR and primary header sectors, then the primary array; the backup array, then the backup header.
GPT_HEAD_SPAN = 2 * 4096 + GPT_STANDARD_ENTRIES
GPT_TAIL_SPAN = 4096 + GPT_STANDARD_ENTRIES
EXT4_MAGIC, EXT4_MAGIC_OFFSET = b"\x53\xef", 0x38
FSCK_TIMEOUT_S = 600.0

_HEX_ESCAPE = re.compile(r"\\x([0-9a-fA-F]{2})")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _natural(name: str) -> list[object]:
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def _udev_decode(value: str | None) -> str | None:
    """udev's *_ENC values and ID_PART_ENTRY_NAME escape bytes as \\xNN."""
    if value is None:
        return None
    return _HEX_ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), value).strip() or None


def disk_names(sys_block: Path = SYS_BLOCK) -> list[str]:
    names = []
    for name in os.listdir(sys_block):
        d = sys_block / name
        if name.startswith(SKIP_PREFIXES) or _read(d / "hidden") == "1":
            continue
        if name.startswith("loop") and not (d / "loop" / "backing_file").exists():
            continue  # an unattached loop device
        if (_read(d / "size") or "0") == "0":
            continue  # empty drive or unattached nbd
        names.append(name)
    return sorted(names, key=_natural)


def partition_names(disk: str, sys_block: Path = SYS_BLOCK) -> list[str]:
    d = sys_block / disk
    try:
        return sorted((e for e in os.listdir(d) if (d / e / "partition").exists()), key=_natural)
    except OSError:
        return []


# ---------------------------------------------------------------- udev


def udev_properties(names: Iterable[str]) -> tuple[dict[str, dict[str, str]], str | None]:
    """name -> udev properties of the devices udevd has initialised (its rules have run and
    written what they found), and why there are none."""
    import pyudev  # ctypes and libudev: only the disk probe needs them

    try:
        context = pyudev.Context()
    except ImportError as exc:  # libudev.so.1 is not installed
        return {}, f"libudev is not available here ({exc})"
    out: dict[str, dict[str, str]] = {}
    for name in names:
        try:
            device = pyudev.Devices.from_name(context, "block", name)
        except pyudev.DeviceNotFoundError:  # vanished between listing and reading
            continue
        if device.is_initialized:
            out[name] = dict(device.properties)
    if not out:
        return out, "the udev database has no block devices (udevd is not running here)"
    return out, None


# ---------------------------------------------------------------- blkid


def parse_blkid_export(text: str) -> dict[str, dict[str, str]]:
    """`blkid -o export` output (blank-line separated, shell-escaped values) -> DEVNAME -> tags."""
    out: dict[str, dict[str, str]] = {}
    for block in text.strip().split("\n\n"):
        tags: dict[str, str] = {}
        for line in block.splitlines():
            try:
                parts = shlex.split(line)
            except ValueError:
                parts = [line]
            key, _, value = (parts[0] if parts else "").partition("=")
            if key:
                tags[key] = value
        if "DEVNAME" in tags:
            out[tags["DEVNAME"]] = tags
    return out


def blkid_probe(paths: Sequence[str]) -> tuple[dict[str, dict[str, str]], str | None]:
    """A low-level probe (no cache, reads the devices) of each path on its own, and what could not
    be read. One call per device: given several devices, `blkid -p` stops at the first that
    carries no signature and prints nothing for the rest, which would make every later disk
    look blank."""
    tags: dict[str, dict[str, str]] = {}
    failed: list[str] = []
    for path in paths:
        result = runner.run(["blkid", "-p", "-o", "export", path], timeout=20)
        if result.missing or result.timed_out:
            return tags, result.why()
        # exit 2 alone means the device carries no signature (a blank disk); errors name the device
        errors = [ln.removeprefix("blkid: error: ") for ln in result.stderr.splitlines() if ln.strip()]
        if errors:
            failed += errors
        elif result.returncode not in (0, 2):
            failed.append(result.why())
        tags.update(parse_blkid_export(result.stdout))
    return tags, ("blkid -p: " + "; ".join(failed)) if failed else None


def wipefs_signatures(path: str) -> tuple[list[str], str | None]:
    """Every signature `wipefs --no-act` reports on the device, as "<type> at <offset>"."""
    result = runner.run(["wipefs", "--no-act", "--json", path], timeout=20)
    if not result.ok:
        return [], result.why()
    if not result.stdout.strip():
        return [], None  # nothing found: wipefs prints no JSON at all
    try:
        found = json.loads(result.stdout).get("signatures", [])
    except ValueError:
        return [], f"wipefs printed no JSON: {result.stdout.strip()[:80]!r}"
    return [f"{s.get('type')} at {s.get('offset')}" for s in found], None


def _ends(path: str, size_bytes: int) -> tuple[bytes, bytes]:
    """The device's first and last MiB. Raises OSError."""
    with open(path, "rb", buffering=0) as f:
        head = f.read(MIB)
        f.seek(max(size_bytes - MIB, 0))
        return head, f.read(MIB)


def _ends_or_none(path: str, size_bytes: int) -> tuple[bytes, bytes] | None:
    try:
        return _ends(path, size_bytes)
    except OSError:
        return None


def blank_proof(path: str, size_bytes: int, ends: tuple[bytes, bytes] | None = None) -> BlankProof:
    """Read what a blank disk must not hold: non-zero bytes in the first or last MiB, an MBR or
    GPT header, any signature wipefs knows. Needs read access to the device (root). ends: the
    first and last MiB when the caller has read them already."""
    proof = BlankProof()
    try:
        head, tail = ends or _ends(path, size_bytes)
    except OSError as exc:
        proof.error = f"{path}: {exc.strerror or exc}"
        return proof
    proof.first_mib_zero = not any(head)
    proof.last_mib_zero = not any(tail)
    proof.outside_gpt_zero = not any(head[GPT_HEAD_SPAN:]) and not any(tail[:max(len(tail) - GPT_TAIL_SPAN, 0)])
    proof.mbr_signature = head[510:512] == b"\x55\xaa"
    proof.primary_gpt = any(head[o:o + 8] == GPT_MAGIC for o in (512, 4096))
    proof.backup_gpt = any(len(tail) >= o and tail[len(tail) - o:len(tail) - o + 8] == GPT_MAGIC for o in (512, 4096))
    proof.signatures, proof.error = wipefs_signatures(path)
    if proof.error is None:
        proof.sampled_nonzero, error = nonzero_samples(path, size_bytes)
        proof.error = proof.error or error
    return proof


def gpt_traces(head: bytes, tail: bytes, size_bytes: int) -> list[GptEntryTrace]:
    """The named entries of a GPT, read from the bytes of the disk's first and last MiB where no
    tool loads a table. sgdisk writes the backup array, the backup header, the primary array, the
    primary header and the protective MBR last, so a write stopped part-way leaves a table that
    libblkid, partx and sgdisk all refuse ("Invalid partition data!"); a disk that lost its end
    keeps a primary table that libblkid calls "PMBR". A surviving header says where its array
    is; without one, the array is looked for where every partitioner puts it."""
    found: dict[tuple[str, str, int, int], GptEntryTrace] = {}
    tail_start = size_bytes - len(tail)
    for sector in (512, 4096):
        for where, buf, header_at, standard in (
                ("primary", head, sector, 2 * sector),
                ("backup", tail, len(tail) - sector, len(tail) - sector - GPT_STANDARD_ENTRIES)):
            start, count, size = standard, GPT_STANDARD_ENTRIES // 128, 128
            if header_at >= 0 and buf[header_at:header_at + 8] == GPT_MAGIC and len(buf) >= header_at + 92:
                lba, n, esize = struct.unpack_from("<QII", buf, header_at + 72)
                at = lba * sector - (0 if where == "primary" else tail_start)
                if at >= 0 and 128 <= esize <= 4096 and n <= 4096 and at + n * esize <= len(buf):
                    start, count, size = at, n, esize
            for i in range(count):
                o = start + i * size
                if o < 0 or o + GPT_ENTRY.size > len(buf):
                    break
                type_guid, _, first, last, attributes, raw = GPT_ENTRY.unpack_from(buf, o)
                if any(type_guid):
                    name = raw.decode("utf-16-le", "replace").split("\0", 1)[0]
                    found.setdefault((where, name, first, last), GptEntryTrace(
                        where=where, name=name, attributes=attributes, first_lba=first, last_lba=last))
    return list(found.values())


def read_gpt_traces(path: str, size_bytes: int) -> list[GptEntryTrace]:
    """gpt_traces of the device; none when it cannot be read (the blank proof says why)."""
    ends = _ends_or_none(path, size_bytes)
    return gpt_traces(*ends, size_bytes) if ends else []


def sample_offsets(size_bytes: int) -> list[int]:
    """Where a disk that once held partitions keeps traces after its tables were zapped: every
    MiB boundary of the first and last GiB (partitions start on MiB boundaries), and each GiB
    boundary and the MiB after it across the disk (hostctl's data partition starts 1 MiB after a
    whole-GiB swap). About 4,100 reads of 4 KiB on a 4 TB disk."""
    offsets = set(range(0, min(size_bytes, GIB), MIB))
    offsets |= set(range(max(size_bytes - GIB, 0) // MIB * MIB, size_bytes, MIB))
    for g in range(0, size_bytes, GIB):
        offsets |= {g, g + MIB}
    return sorted(o for o in offsets if o + SAMPLE <= size_bytes)


def nonzero_samples(path: str, size_bytes: int, offsets: list[int] | None = None) -> tuple[list[str], str | None]:
    """The sampled offsets (as "<n> MiB") whose first 4 KiB are not all zero."""
    found: list[str] = []
    try:
        with open(path, "rb", buffering=0) as f:
            for offset in sample_offsets(size_bytes) if offsets is None else offsets:
                f.seek(offset)
                if any(f.read(SAMPLE)):
                    found.append(f"{offset // MIB} MiB")
    except OSError as exc:
        return found, f"{path}: {exc.strerror or exc}"
    return found, None


def ext4_backup_superblock(path: str) -> str | None:
    """The offset of an ext4 superblock at one of the first backup locations, or None. A
    partition with no primary signature but a backup superblock is a damaged filesystem (its
    data recoverable with `e2fsck -b`), not an unfinished one."""
    try:
        with open(path, "rb", buffering=0) as f:
            for block in (1024, 2048, 4096):
                group = 8 * block * block  # bytes per block group: 8 * block_size blocks
                for g in (1, 3, 5, 7, 9):
                    offset = g * group + (1024 if block == 1024 else 0)
                    f.seek(offset + EXT4_MAGIC_OFFSET)
                    if f.read(2) == EXT4_MAGIC:
                        return f"{offset:#x} (block size {block})"
    except OSError:
        return None
    return None


def fs_check(path: str, fs_type: str | None) -> FsCheck:
    """Did mkfs finish, and is the filesystem sound: read-only checks of one of hostctl's own
    partitions that nothing uses (never of a user's, never of a mounted one)."""
    check = FsCheck()
    if fs_type is None:
        check.backup_superblock = ext4_backup_superblock(path)
        try:
            with open(path, "rb", buffering=0) as f:
                check.first_mib_zero = not any(f.read(MIB))
        except OSError:
            check.first_mib_zero = None
        return check
    if fs_type == "xfs":
        res = runner.run(["xfs_db", "-r", "-c", "sb 0", "-c", "p inprogress", path], timeout=60)
        out = res.stdout + res.stderr
        # a superblock whose checksum fails proves nothing: one flipped byte reads inprogress = 1
        check.crc_error = "CRC error" in out or "bad magic" in out.lower()
        values = [ln.split("=", 1)[1].strip() for ln in res.stdout.splitlines() if ln.startswith("inprogress")]
        if values:
            check.inprogress = values[-1] != "0"
        if check.inprogress and not check.crc_error:
            return check  # mkfs never finished: there is nothing to check
        res = runner.run(["xfs_repair", "-n", path], timeout=FSCK_TIMEOUT_S)
        if not res.ok:
            # once more after a moment: a mount that was killed can still be finishing in the
            # kernel (CI's kill -9 matrix, 5 ms into hostctl's own mount); real damage stays damage
            time.sleep(XFS_RECHECK_S)
            res = runner.run(["xfs_repair", "-n", path], timeout=FSCK_TIMEOUT_S)
        if not res.ok and XFS_DIRTY_LOG in res.stdout + res.stderr:
            # a log to replay (a mount killed or a host crashed while it was mounted): xfs_repair -n
            # ignores the log and reports what replaying it would settle; mounting replays it, as
            # the ext4 journal below (seen in CI: kill -9 5 ms into hostctl's own mount of an xfs)
            check.fsck, check.detail = "clean", "needs log recovery, which mounting does"
            return check
    elif fs_type == "ext4":
        head = runner.run(["dumpe2fs", "-h", path], timeout=60)
        features = next((ln for ln in head.stdout.splitlines() if ln.startswith("Filesystem features:")), "")
        if "needs_recovery" in features.split():
            # a journal to replay (the host crashed while it was mounted): mounting replays it, and
            # a read-only check cannot judge the filesystem before that
            check.fsck, check.detail = "clean", "needs journal recovery, which mounting does"
            return check
        res = runner.run(["e2fsck", "-n", "-f", path], timeout=FSCK_TIMEOUT_S)
    else:
        return check
    # e2fsck's exit is a bit mask: 4 = errors left uncorrected (with -n, all of them), 8 = an
    # operational error; a badly damaged filesystem gives 12 ("aborted"), which is still damage
    damaged = res.returncode & 4 if fs_type == "ext4" else res.returncode != 0
    if res.ok:
        check.fsck = "clean"
    elif res.missing or res.timed_out or not damaged:
        check.fsck, check.detail = "unknown", res.why()
    else:
        check.fsck = "damaged"
        lines = [ln.strip() for ln in (res.stdout + "\n" + res.stderr).splitlines() if ln.strip()]
        check.detail = "; ".join(lines[:3])[:300]
    return check


# What xfs_repair -n prints when the log holds changes it will not replay (xfsprogs, repair/phase2.c)
XFS_DIRTY_LOG = "valuable metadata changes in a log"
XFS_RECHECK_S = 1.0


def resolve_alias(path: str) -> str | None:
    """The kernel name of the block device a path leads to (through any symlinks), or None."""
    dev = _devnum(os.path.realpath(path))
    if dev is None:
        return None
    target = os.path.realpath(SYS_DEV_BLOCK / dev)
    return os.path.basename(target) if os.path.exists(target) else None


def table_entries(path: str) -> int | None:
    """How many entries the partition table on the device itself holds (not what the kernel has
    loaded); None when there is no readable table or partx is missing."""
    result = runner.run(["partx", "--show", "--noheadings", "--output", "NR", path], timeout=20)
    if not result.ok:
        return None
    return sum(1 for line in result.stdout.splitlines() if line.strip())


# ---------------------------------------------------------------- usage: mounts, swap, root


def _devnum(path: str) -> str | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    if not stat.S_ISBLK(st.st_mode):
        return None
    return f"{os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"


def mounts_by_dev(mounts: Sequence[MountLine]) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for m in mounts:
        devs = {m.dev}
        if m.dev.startswith("0:") and m.entry.source.startswith("/dev/"):
            # btrfs and friends report an anonymous device number; the source names the real one
            real = _devnum(m.entry.source)
            if real:
                devs.add(real)
        for dev in devs:
            targets = out.setdefault(dev, [])
            if m.entry.target not in targets:
                targets.append(m.entry.target)
    return out


def swaps_by_dev(swaps: Sequence[SwapDevice]) -> dict[str, SwapDevice]:
    out = {}
    for s in swaps:
        if s.kind == "partition":
            dev = _devnum(s.path)
            if dev:
                out[dev] = s
    return out


def base_disks(sysdir: Path, depth: int = 0) -> set[str]:
    """The whole disks under a block device: a partition's parent, a dm/md device's slaves' disks."""
    sysdir = sysdir.resolve()
    if depth > 8:
        return set()
    if (sysdir / "partition").exists():
        return {sysdir.parent.name}
    try:
        slaves = os.listdir(sysdir / "slaves")
    except OSError:
        slaves = []
    if not slaves:
        return {sysdir.name}
    disks: set[str] = set()
    for slave in slaves:
        disks |= base_disks(SYS_CLASS_BLOCK / slave, depth + 1)
    return disks


def root_disks(mounts: Sequence[MountLine]) -> set[str]:
    disks: set[str] = set()
    for dev, targets in mounts_by_dev(mounts).items():
        if any(t in ROOT_MOUNTS for t in targets) and not dev.startswith("0:"):
            node = SYS_DEV_BLOCK / dev
            if node.exists():
                disks |= base_disks(node)
    return disks


def _holders(sysdir: Path) -> list[str]:
    try:
        return sorted(os.listdir(sysdir / "holders"))
    except OSError:
        return []


def by_id_links(by_id: Path = BY_ID) -> dict[str, list[str]]:
    """kernel name -> /dev/disk/by-id names pointing at it."""
    out: dict[str, list[str]] = {}
    try:
        entries = sorted(os.listdir(by_id))
    except OSError:
        return out
    for entry in entries:
        target = os.path.basename(os.path.realpath(by_id / entry))
        out.setdefault(target, []).append(entry)
    return out


# ---------------------------------------------------------------- assembling


class _Probe:
    def __init__(self, mounts: Sequence[MountLine], swaps: Sequence[SwapDevice]):
        self.mounts = mounts_by_dev(mounts)
        self.swaps = swaps_by_dev(swaps)
        self.roots = root_disks(mounts)
        self.by_id = by_id_links()
        self.udev: dict[str, dict[str, str]] = {}
        self.blkid: dict[str, dict[str, str]] = {}
        self.check_disks: set[str] = set()  # disks whose hostctl partitions get the read-only fs checks

    def contents(self, name: str) -> dict[str, str | None]:
        """Partition-table, GPT-entry and filesystem tags, from udev or else blkid."""
        if name in self.udev:
            u = self.udev[name]
            return {
                "table_type": u.get("ID_PART_TABLE_TYPE"),
                "fs_type": u.get("ID_FS_TYPE") or None,
                "fs_label": _udev_decode(u.get("ID_FS_LABEL_ENC")) or u.get("ID_FS_LABEL"),
                "fs_uuid": u.get("ID_FS_UUID"),
                "part_type": u.get("ID_PART_ENTRY_TYPE"),
                "part_label": _udev_decode(u.get("ID_PART_ENTRY_NAME")),
                "part_uuid": u.get("ID_PART_ENTRY_UUID"),
                "part_flags": u.get("ID_PART_ENTRY_FLAGS"),
            }
        b = self.blkid.get(f"/dev/{name}", {})
        return {
            "table_type": b.get("PTTYPE"),
            "fs_type": b.get("TYPE"),
            "fs_label": b.get("LABEL"),
            "fs_uuid": b.get("UUID"),
            "part_type": b.get("PART_ENTRY_TYPE"),
            "part_label": b.get("PART_ENTRY_NAME"),
            "part_uuid": b.get("PART_ENTRY_UUID"),
            "part_flags": b.get("PART_ENTRY_FLAGS"),
        }

    def partition(self, disk: str, name: str) -> Partition:
        sysdir = SYS_BLOCK / disk / name
        dev = _read(sysdir / "dev") or ""
        c = self.contents(name)
        swap = self.swaps.get(dev)
        number = _read(sysdir / "partition")
        mountpoints = self.mounts.get(dev, [])
        checked = None
        if (disk in self.check_disks and marks.role_of(c["part_label"], c["fs_label"]) is not None
                and not mountpoints and swap is None and not _holders(sysdir)):
            checked = fs_check(f"/dev/{name}", c["fs_type"])
        return Partition(
            name=name,
            path=f"/dev/{name}",
            dev=dev or None,
            number=int(number) if number and number.isdigit() else None,
            size_bytes=int(_read(sysdir / "size") or 0) * SECTOR,
            part_type=c["part_type"],
            part_label=c["part_label"],
            part_uuid=c["part_uuid"],
            part_flags=_flags(c["part_flags"]),
            fs_type=c["fs_type"],
            fs_label=c["fs_label"],
            fs_uuid=c["fs_uuid"],
            mountpoints=mountpoints,
            holders=_holders(sysdir),
            swap_active=swap is not None,
            swap_priority=swap.priority if swap else None,
            fs_check=checked,
        )

    def disk(self, name: str) -> Disk:
        sysdir = SYS_BLOCK / name
        dev = _read(sysdir / "dev") or ""
        u = self.udev.get(name, {})
        c = self.contents(name)
        parts = [self.partition(name, p) for p in partition_names(name)]
        rotational = _read(sysdir / "queue" / "rotational")
        removable = _read(sysdir / "removable")
        size = int(_read(sysdir / "size") or 0) * SECTOR
        looks_blank = not (c["table_type"] or c["fs_type"] or parts)
        # the first and last MiB, read once for the blank proof and the GPT entries no tool loads
        first_last = None if parts else _ends_or_none(f"/dev/{name}", size)
        after: list[str] = []
        if parts and name in self.check_disks:
            # where a partition deleted by hand would have started: right after each one that remains
            ends = sorted({-(-(_part_end(sysdir / p.name)) // MIB) * MIB for p in parts})
            after, _ = nonzero_samples(f"/dev/{name}", size, [e for e in ends if e + SAMPLE <= size - MIB])
        return Disk(
            name=name,
            path=f"/dev/{name}",
            dev=dev or None,
            model=_udev_decode(u.get("ID_MODEL_ENC")) or u.get("ID_MODEL") or _read(sysdir / "device" / "model") or None,
            # virtio-blk keeps its serial on the disk, SCSI/NVMe on the device
            serial=u.get("ID_SERIAL_SHORT") or _read(sysdir / "device" / "serial") or _read(sysdir / "serial") or None,
            wwn=u.get("ID_WWN_WITH_EXTENSION") or u.get("ID_WWN") or _read(sysdir / "wwid") or _read(sysdir / "device" / "wwid") or None,
            by_id=self.by_id.get(name, []),
            size_bytes=size,
            rotational=None if rotational is None else rotational == "1",
            removable=None if removable is None else removable == "1",
            table_type=c["table_type"],
            table_entries=table_entries(f"/dev/{name}") if c["table_type"] else None,
            fs_type=c["fs_type"],
            fs_label=c["fs_label"] if c["fs_type"] else None,
            mountpoints=self.mounts.get(dev, []),
            holders=_holders(sysdir),
            swap_active=dev in self.swaps,
            is_root_disk=name in self.roots,
            read_only=_read(sysdir / "ro") == "1",
            blank=blank_proof(f"/dev/{name}", size, first_last) if looks_blank else None,
            gpt_traces=gpt_traces(*first_last, size) if first_last else [],
            nonzero_after_partitions=after,
            partitions=parts,
        )


def _part_end(sysdir: Path) -> int:
    return (int(_read(sysdir / "start") or 0) + int(_read(sysdir / "size") or 0)) * SECTOR


def _flags(value: str | None) -> int | None:
    try:
        return int(value, 0) if value else None
    except ValueError:
        return None


def probe_disks(mounts: Sequence[MountLine] | None = None, swaps: Sequence[SwapDevice] | None = None,
                alias_paths: Sequence[str] = (), checked: Sequence[tuple[str, str]] = ()) -> DiskFacts:
    """checked: the drive identities (kind, value) whose disks get the read-only checks of
    hostctl's own partitions (fsck -n, xfs in-progress, traces after the last partition): the
    profile's drives only, never every disk of the host."""
    try:
        names = disk_names()
    except OSError as exc:
        return DiskFacts(available=False, reason=f"cannot list {SYS_BLOCK}: {exc}")
    probe = _Probe(read_mountinfo() if mounts is None else mounts, read_swaps() if swaps is None else swaps)
    all_names = [n for d in names for n in (d, *partition_names(d))]
    probe.udev, no_udev = udev_properties(all_names)
    missing = [f"/dev/{n}" for n in all_names if n not in probe.udev]
    probe.blkid, blkid_error = blkid_probe(missing)
    aliases = {p: resolve_alias(p) for p in alias_paths}
    probe.check_disks = {n for n in names if any(identity_matches(kind, value, _identities(probe, n), aliases)
                                                 for kind, value in checked)}
    if probe.udev:
        source, reason = "udev", None
        if missing:
            reason = f"udev has not initialised {len(missing)} device(s); read them from sysfs and blkid -p"
    else:
        source, reason = "sysfs", f"{no_udev}: identities from sysfs, contents from blkid -p"
    if blkid_error:
        failed = f"{blkid_error} (contents of those devices unknown)"
        reason = f"{reason}; {failed}" if reason else failed
    return DiskFacts(source=source, source_reason=reason, devices=[probe.disk(n) for n in names], aliases=aliases)


def _identities(probe: "_Probe", name: str) -> Disk:
    """Just the identity fields of a disk, for matching before the full probe."""
    sysdir = SYS_BLOCK / name
    u = probe.udev.get(name, {})
    return Disk(name=name, path=f"/dev/{name}", by_id=probe.by_id.get(name, []),
                serial=u.get("ID_SERIAL_SHORT") or _read(sysdir / "device" / "serial") or _read(sysdir / "serial") or None,
                wwn=u.get("ID_WWN_WITH_EXTENSION") or u.get("ID_WWN") or _read(sysdir / "wwid")
                or _read(sysdir / "device" / "wwid") or None)


def identity_matches(kind: str, value: str, disk: Disk, aliases: dict[str, str | None] | None = None) -> bool:
    """Whether a drive identity (serial:, wwn:, by-id:, path:) names this disk. aliases: the
    resolution of `path:` identities (a symlink such as /dev/disk/by-path/... names the disk it
    leads to)."""
    if kind == "serial":
        return disk.serial is not None and disk.serial == value
    if kind == "wwn":
        return disk.wwn is not None and disk.wwn.lower() == value.lower()
    if kind == "by-id":
        return os.path.basename(value) in disk.by_id
    return disk.path == value or (aliases or {}).get(value) == disk.name


def resolve_identity(kind: str, value: str, disks: DiskFacts) -> DriveMatch:
    """What a drive identity (serial:, wwn:, by-id:, path:) names among the probed disks. The one
    place a drive is resolved to its disk: provisioning, init and their checks all read this."""
    return DriveMatch(disks=[d for d in disks.devices if identity_matches(kind, value, d, disks.aliases)],
                      leads_to=disks.aliases.get(value) if kind == "path" else None)
