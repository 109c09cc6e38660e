"""Disk and path facts on a real loop device with a real GPT: an ext4 partition (mounted for
the test) and an active swap partition. Needs root; everything is undone afterwards."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from pathlib import Path

import pytest

from hostctl import runner
from loopdrives import check, wait_for
from hostctl.facts import collect
from hostctl.facts.disks import probe_disks
from hostctl.facts.mounts import probe_paths
from need import need

pytestmark = pytest.mark.system

LINUX_FS_GUID = "0fc63daf-8483-4772-8e79-3d69d8477de4"
LINUX_SWAP_GUID = "0657fd6d-a4ab-43c4-84e5-0933c84b4f4f"
SWAP_PRIORITY = 1  # low: the test swap must never be preferred over a real one
TOOLS = {"losetup": "util-linux", "partx": "util-linux", "sgdisk": "gdisk", "mkfs.ext4": "e2fsprogs", "mkswap": "util-linux"}


@pytest.fixture
def loop_disk(tmp_path: Path):
    need(os.geteuid() == 0, "needs root to attach loop devices")
    for tool, package in TOOLS.items():
        need(shutil.which(tool) is not None, f"{tool} is not installed (apt-get install -y {package}; .ci/run does)")
    image = tmp_path / "disk.img"
    with open(image, "wb") as f:
        f.truncate(64 * 1024 * 1024)  # sparse
    attach = runner.run(["losetup", "-P", "--find", "--show", str(image)], timeout=30)
    need(attach.ok, f"cannot attach a loop device here: {attach.why()}")
    dev = attach.stdout.strip()
    mnt = tmp_path / "mnt"
    mounted = swapped = False
    try:
        check(
            ["sgdisk", "-n1:0:+24M", "-t1:8300", "-c1:hostctl-test", "-n2:0:+16M", "-t2:8200", "-c2:hostctl-test-swap", dev]
        )
        check(["partx", "-u", dev])
        p1, p2 = f"{dev}p1", f"{dev}p2"
        wait_for([p1, p2])
        fs_uuid, swap_uuid = str(uuid.uuid4()), str(uuid.uuid4())
        check(["mkfs.ext4", "-q", "-F", "-L", "hostctl-data", "-U", fs_uuid, p1])
        check(["mkswap", "-L", "hostctl-swap", "-U", swap_uuid, p2])
        check(["swapon", "-p", str(SWAP_PRIORITY), p2])
        swapped = True
        mnt.mkdir()
        check(["mount", "-t", "ext4", p1, str(mnt)])
        mounted = True
        (mnt / "b.bin").write_bytes(b"x" * 3000)
        (mnt / "a.bin").write_bytes(b"y" * 10)
        (mnt / "subdir").mkdir()
        yield {"dev": dev, "name": os.path.basename(dev), "p1": p1, "p2": p2, "fs_uuid": fs_uuid, "swap_uuid": swap_uuid, "mnt": str(mnt)}
    finally:
        if mounted:
            runner.run(["umount", str(mnt)], timeout=30)
        if swapped:
            runner.run(["swapoff", f"{dev}p2"], timeout=30)
        runner.run(["losetup", "-d", dev], timeout=30)
        image.unlink(missing_ok=True)


def test_loop_disk_partitions_filesystems_and_swap(loop_disk):
    facts = probe_disks()
    disk = next((d for d in facts.devices if d.name == loop_disk["name"]), None)
    assert disk is not None, f"{loop_disk['dev']} missing from {[d.name for d in facts.devices]}"
    assert disk.size_bytes == 64 * 1024 * 1024
    assert disk.table_type == "gpt"
    assert disk.is_root_disk is False
    assert disk.swap_active is False  # the swap is on a partition, not the whole disk
    assert [p.name for p in disk.partitions] == [f"{loop_disk['name']}p1", f"{loop_disk['name']}p2"]

    data, swap = disk.partitions
    assert data.number == 1 and data.path == loop_disk["p1"]
    assert data.size_bytes == 24 * 1024 * 1024
    assert data.part_label == "hostctl-test"
    assert data.part_type == LINUX_FS_GUID
    assert data.part_uuid
    assert (data.fs_type, data.fs_label, data.fs_uuid) == ("ext4", "hostctl-data", loop_disk["fs_uuid"])
    assert data.mountpoints == [loop_disk["mnt"]]
    assert data.swap_active is False and data.holders == []

    assert swap.part_label == "hostctl-test-swap"
    assert swap.part_type == LINUX_SWAP_GUID
    assert (swap.fs_type, swap.fs_label, swap.fs_uuid) == ("swap", "hostctl-swap", loop_disk["swap_uuid"])
    assert swap.swap_active is True
    assert swap.swap_priority == SWAP_PRIORITY
    assert swap.mountpoints == []


def test_loop_disk_in_collected_facts(loop_disk):
    facts = collect([(loop_disk["mnt"], True), (loop_disk["mnt"] + "/not-yet", False)])
    disk = next(d for d in facts.disks.devices if d.name == loop_disk["name"])
    assert disk.partitions[1].swap_active
    swaps = {s.path: s for s in facts.memory.swaps}
    assert swaps[loop_disk["p2"]].kind == "partition"
    assert swaps[loop_disk["p2"]].priority == SWAP_PRIORITY
    assert swaps[loop_disk["p2"]].size_bytes > 15 * 1024 * 1024

    store, missing = facts.paths
    assert store.exists and store.fs_type == "ext4"
    assert (store.mount_target, store.mount_source) == (loop_disk["mnt"], loop_disk["p1"])
    assert store.total_bytes and 0 < store.free_bytes <= store.total_bytes
    assert store.files == [("a.bin", 10), ("b.bin", 3000)]  # sorted, regular files only
    # a directory not made yet is described by the filesystem it would be created on
    assert not missing.exists and missing.mount_target == loop_disk["mnt"] and missing.files is None


def test_probe_paths_standalone(loop_disk):
    (facts,) = probe_paths([(loop_disk["mnt"], False)])
    assert facts.fs_type == "ext4" and facts.files is None


def test_an_xfs_with_a_log_to_replay_is_clean_not_damaged(tmp_path):
    """A mount killed (or a host crashed) while an xfs was mounted leaves its log to replay:
    `xfs_repair -n` then exits 1, but mounting replays the log, so the facts call it clean (as
    an ext4 journal to recover), not damaged (which would make provision refuse its own drive)."""
    from hostctl.facts.disks import fs_check

    need(os.geteuid() == 0 and shutil.which("mkfs.xfs") and shutil.which("xfs_io"), "root and xfsprogs")
    img, mnt = tmp_path / "x.img", tmp_path / "m"
    img.write_bytes(b"")
    os.truncate(img, 320 << 20)
    mnt.mkdir()
    dev = check(["losetup", "-f", "--show", str(img)]).strip()
    try:
        check(["mkfs.xfs", "-q", "-f", dev])
        check(["mount", dev, str(mnt)])
        (mnt / "f").write_text("kept")
        os.sync()
        check(["xfs_io", "-x", "-c", "shutdown", str(mnt)])  # the log is left as a crash leaves it
        check(["umount", str(mnt)])
        assert runner.run(["xfs_repair", "-n", dev]).returncode == 1
        got = fs_check(dev, "xfs")
        assert (got.fsck, got.detail) == ("clean", "needs log recovery, which mounting does")
        check(["mount", dev, str(mnt)])  # the replay
        assert (mnt / "f").read_text() == "kept"
        check(["umount", str(mnt)])
        assert (fs_check(dev, "xfs").fsck, fs_check(dev, "xfs").detail) == ("clean", None)
    finally:
        runner.run(["umount", str(mnt)])
        for _ in range(50):  # a just-unmounted device can be busy for a moment (udev's probe)
            runner.run(["losetup", "-d", dev])
            if not Path(f"/sys/block/{Path(dev).name}/loop").exists():  # detached
                break
            time.sleep(0.1)


def test_udev_identities_of_a_loop_disk_through_pyudev(loop_disk):
    """What udevd records for a device (its database, /run/udev/data/b<major>:<minor>) is read
    through pyudev: identities and decoded labels come from it, and the devices it has not
    initialised still from sysfs and blkid. This machine runs no udevd, so the test writes the
    records udevd would write for the loop disk and its first partition, and removes them after."""
    run_udev = Path("/run/udev")
    need(not run_udev.exists(), "udevd keeps /run/udev here: the VM tier tests a real udevd")
    name, p1 = loop_disk["name"], os.path.basename(loop_disk["p1"])
    records = {
        name: "E:ID_SERIAL_SHORT=HOSTCTL-LOOP-1\nE:ID_MODEL_ENC=Loop\\x20Disk\\x20\nE:ID_PART_TABLE_TYPE=gpt\n",
        p1: (f"E:ID_FS_TYPE=ext4\nE:ID_FS_UUID={loop_disk['fs_uuid']}\nE:ID_FS_LABEL=models_fast\n"
             "E:ID_FS_LABEL_ENC=models\\x3dfast\nE:ID_PART_ENTRY_NAME=hostctl\\x2dtest\n"
             f"E:ID_PART_ENTRY_TYPE={LINUX_FS_GUID}\n"),
    }
    data = run_udev / "data"
    data.mkdir(parents=True)
    try:
        for dev_name, record in records.items():
            devnum = Path(f"/sys/class/block/{dev_name}/dev").read_text().strip()
            (data / f"b{devnum}").write_text(f"I:{int(time.time() * 1e6)}\n{record}")
        facts = probe_disks()
    finally:
        shutil.rmtree(run_udev)
    assert facts.source == "udev" and "udev has not initialised" in facts.source_reason
    disk = next(d for d in facts.devices if d.name == name)
    assert (disk.serial, disk.model, disk.table_type) == ("HOSTCTL-LOOP-1", "Loop Disk", "gpt")
    data_part, swap_part = disk.partitions
    assert (data_part.fs_label, data_part.part_label) == ("models=fast", "hostctl-test")  # from udev, decoded
    assert (swap_part.fs_type, swap_part.fs_label) == ("swap", "hostctl-swap")  # not initialised: blkid -p
