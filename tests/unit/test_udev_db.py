"""Disk identities from udev's database, read as files (/run/udev/data/b<major>:<minor>) the way
libudev reads them. This machine runs no udevd, so the database here is a fixture written in the
database's own format (as udevd 252 writes it for an NVMe namespace and a partition); the VM tier
(tests/vm, real udevd) finds its drives by serial through the same reader."""

from __future__ import annotations

from pathlib import Path

from hostctl.facts.disks import read_udev_db, udev_properties

NVME_DB = """\
S:disk/by-id/nvme-eui.002538b131a0c8d4
S:disk/by-path/pci-0000:02:00.0-nvme-1
S:disk/by-id/nvme-Samsung_SSD_980_PRO_1TB_S5GXNX0T123456K
W:5
I:1733040000123456
E:ID_SERIAL_SHORT=S5GXNX0T123456K
E:ID_WWN=eui.002538b131a0c8d4
E:ID_MODEL=Samsung SSD 980 PRO 1TB
E:ID_MODEL_ENC=Samsung\\x20SSD\\x20980\\x20PRO\\x201TB\\x20\\x20\\x20\\x20
E:ID_PART_TABLE_TYPE=gpt
E:ID_PART_TABLE_UUID=6c1b1a7e-2f39-4d8e-9b1c-0a5f3e6d7c21
E:ID_PATH=pci-0000:02:00.0-nvme-1
G:systemd
Q:systemd
V:1
"""
PART_DB = """\
S:disk/by-partlabel/models
S:disk/by-uuid/0f3c1e7a-5b2d-4c8e-a1f0-9d8e7c6b5a43
I:1733040000234567
E:ID_FS_UUID=0f3c1e7a-5b2d-4c8e-a1f0-9d8e7c6b5a43
E:ID_FS_TYPE=ext4
E:ID_FS_LABEL=models=fast
E:ID_PART_ENTRY_NAME=models
E:ID_PART_ENTRY_TYPE=0fc63daf-8483-4772-8e79-3d69d8477de4
G:systemd
Q:systemd
V:1
"""


def _host(tmp_path: Path) -> tuple[Path, Path]:
    data, block = tmp_path / "run-udev-data", tmp_path / "sys-class-block"
    data.mkdir()
    for name, devnum, db in [("nvme0n1", "259:0", NVME_DB), ("nvme0n1p1", "259:1", PART_DB),
                             ("loop0", "7:0", None)]:  # loop0: udevd has not run its rules for it
        (block / name).mkdir(parents=True)
        (block / name / "dev").write_text(devnum + "\n")
        if db is not None:
            (data / f"b{devnum}").write_text(db)
    (data / "c1:3").write_text("I:1\nE:ANOTHER=device\n")  # a character device: never read for a disk
    return data, block


def test_properties_are_the_e_lines_only(tmp_path):
    data, _ = _host(tmp_path)
    props = read_udev_db(data / "b259:1")
    assert props["ID_FS_LABEL"] == "models=fast"  # split at the first "=" only
    assert props["ID_PART_ENTRY_NAME"] == "models"
    assert not any(k.startswith(("S:", "I:", "G:", "disk/")) for k in props)
    assert set(read_udev_db(data / "b259:0")) == {"ID_SERIAL_SHORT", "ID_WWN", "ID_MODEL", "ID_MODEL_ENC",
                                                  "ID_PART_TABLE_TYPE", "ID_PART_TABLE_UUID", "ID_PATH"}


def test_initialised_devices_only_and_a_vanished_one_is_left_out(tmp_path):
    data, block = _host(tmp_path)
    props, reason = udev_properties(["nvme0n1", "nvme0n1p1", "loop0", "sdz"], data, block)
    assert reason is None
    assert sorted(props) == ["nvme0n1", "nvme0n1p1"]  # loop0 has no database file; sdz is gone
    assert props["nvme0n1"]["ID_SERIAL_SHORT"] == "S5GXNX0T123456K"
    assert props["nvme0n1"]["ID_MODEL_ENC"].startswith("Samsung\\x20SSD")  # kept escaped, decoded by the caller


def test_no_database_says_udevd_is_not_running(tmp_path):
    _, block = _host(tmp_path)
    props, reason = udev_properties(["nvme0n1", "loop0"], tmp_path / "absent", block)
    assert props == {} and "udevd is not running" in reason
