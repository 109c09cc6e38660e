"""Disk identities and contents from udev, through pyudev: what this host's udev gives (this
machine runs no udevd, so nothing: the sysfs and blkid fallback then answers, test_facts_probe),
and how udev's properties become a disk's fields, with udev's \\xNN escapes decoded. A real udevd
is met in the VM tier (drives found by serial) and, with a database written for a real loop
device, in tests/system/test_facts_loop.py."""

from __future__ import annotations

from hostctl.facts.disks import _Probe, disk_names, partition_names, udev_properties

# the properties udevd 252 records for an NVMe namespace and a partition of it
NVME = {"ID_SERIAL_SHORT": "S5GXNX0T123456K", "ID_WWN": "eui.002538b131a0c8d4", "ID_MODEL": "Samsung SSD 980 PRO 1TB",
        "ID_MODEL_ENC": "Samsung\\x20SSD\\x20980\\x20PRO\\x201TB\\x20\\x20\\x20\\x20", "ID_PART_TABLE_TYPE": "gpt"}
PART = {"ID_FS_TYPE": "ext4", "ID_FS_LABEL": "models_fast", "ID_FS_LABEL_ENC": "models\\x3dfast",
        "ID_FS_UUID": "0f3c1e7a-5b2d-4c8e-a1f0-9d8e7c6b5a43", "ID_PART_ENTRY_NAME": "hostctl\\x20models",
        "ID_PART_ENTRY_TYPE": "0fc63daf-8483-4772-8e79-3d69d8477de4", "ID_PART_ENTRY_FLAGS": "0x4"}


def test_this_hosts_udev_through_pyudev():
    names = [n for d in disk_names() for n in (d, *partition_names(d))]
    props, reason = udev_properties([*names, "no-such-disk"])  # a device that vanished is left out
    assert "no-such-disk" not in props
    if props:  # udevd runs here: each initialised device as libudev sees it
        assert reason is None
        assert all(p.get("DEVNAME") == f"/dev/{n}" for n, p in props.items()), props
    else:
        assert "udevd is not running" in reason


def test_udev_properties_become_fields_decoded():
    probe = _Probe(mounts=[], swaps=[])
    probe.udev = {"nvme0n1": NVME, "nvme0n1p1": PART}
    disk, part = probe.contents("nvme0n1"), probe.contents("nvme0n1p1")
    assert disk["table_type"] == "gpt" and disk["fs_type"] is None
    assert part["fs_label"] == "models=fast"  # the _ENC value, decoded, over udev's mangled one
    assert part["part_label"] == "hostctl models" and part["part_flags"] == "0x4"
    assert (part["fs_type"], part["part_type"]) == ("ext4", "0fc63daf-8483-4772-8e79-3d69d8477de4")
