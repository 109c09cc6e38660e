"""hostctl's marks win over every flag, on real loop drives: a drive that carries them anywhere (a
GPT half, a partition name) is hostctl's, and hostctl never formats it on --erase.

- A table write stopped part-way. sgdisk writes the backup entry array, the backup header, the
  primary array, the primary header and the protective MBR last; a kill or a power cut in between
  leaves a table no tool loads. Each state is built exactly (sgdisk writes the whole table into a
  scratch image, and only the sectors written by that moment are copied onto the drive), so the
  test does not depend on where a timed kill lands. Entries all still unfinished on a disk that
  holds nothing else are laid out again; anything more is refused with every byte kept.
- A disk whose end is gone (an enclosure that reports a smaller size, an image cut short): the
  backup table is lost and libblkid calls the rest "PMBR". Refused, --erase included, until the
  disk shows its whole size again; then the file on it is still there.
- hostctl's data partition reformatted by hand (an xfs with files where hostctl made ext4):
  refused, --erase included, with how to give the drive back by hand.
- hostctl's label on a filesystem that fills a whole disk (a partition image copied onto it):
  refused the same way.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hostctl import marks, runner

from loopdrives import check, drive_toml, sha256, wait_for, write_profile
from loopdrives import OWN_ROLES as ROLES, disk_digest as digest, provisioned, storage
from loopdrives import host, restore_sysctls, sysroot  # noqa: F401  (fixtures)

pytestmark = pytest.mark.system
SECTOR, ARRAY = 512, 128 * 128


def regions(size: int) -> dict[str, tuple[int, int]]:
    """Where sgdisk's writes land, in the order it makes them."""
    return {"backup array": (size - SECTOR - ARRAY, ARRAY), "backup header": (size - SECTOR, SECTOR),
            "primary array": (2 * SECTOR, ARRAY), "primary header": (SECTOR, SECTOR)}


def torn_table(tmp_path: Path, dev: str, upto: str, *, unfinished: bool = True) -> None:
    """Copy onto `dev` the sectors a table write of hostctl's names has written up to `upto`."""
    size = int(check(["blockdev", "--getsize64", dev]))
    scratch = tmp_path / "table.img"
    scratch.unlink(missing_ok=True)
    with open(scratch, "wb") as f:
        f.truncate(size)
    argv = ["sgdisk", "--clear"]
    for n, role, end in ((1, "swap", "+16M"), (2, "data", "0")):
        argv += [f"--new={n}:0:{end}", f"--change-name={n}:{marks.part_name(role, 'd1')}"]
        if unfinished:
            argv.append(f"--attributes={n}:set:{marks.UNFINISHED_BIT}")
    check(argv + [str(scratch)])
    order = list(regions(size))
    with open(scratch, "rb") as src, open(dev, "r+b") as dst:
        for name in order[:order.index(upto) + 1]:
            offset, length = regions(size)[name]
            src.seek(offset)
            dst.seek(offset)
            dst.write(src.read(length))
    os.sync()


def tags(dev: str) -> dict[str, str]:
    out = runner.run(["blkid", "-p", "-o", "export", dev], timeout=30).stdout if os.path.exists(dev) else ""
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def one_drive(host, tmp_path: Path, fs: str = "ext4"):
    drive = host.drive("160M" if fs == "ext4" else "320M", "t1")
    cfg = tmp_path / "p.toml"
    write_profile(cfg, [drive_toml("d1", drive.dev, tmp_path / "m1", fs=fs)], storage=ROLES)
    return drive, cfg


@pytest.mark.parametrize("upto", list(regions(0)))
def test_a_table_write_stopped_part_way_is_laid_out_again(upto, host, tmp_path, capsys):
    drive, cfg = one_drive(host, tmp_path)
    torn_table(tmp_path, drive.dev, upto)
    code, text = storage(cfg, capsys, "--dry-run")
    assert code == 0 and "hostctl's own table, its write stopped part-way" in text, text
    assert f"wipefs --all {drive.dev}" in text and "hostctl-data-d1 (backup table, unfinished)" in text, text
    code, text = storage(cfg, capsys)
    assert code == 0, text
    code, text = storage(cfg, capsys)
    assert code == 0 and "storage: no changes" in text, text
    assert (tags(drive.part(2)).get("TYPE"), tags(drive.part(2)).get("LABEL")) == ("ext4", "hcdata-d1")


@pytest.mark.parametrize("case", ["filesystems made", "data inside the disk"])
def test_a_torn_table_that_may_hold_data_is_refused_even_with_erase(case, host, tmp_path, capsys):
    drive, cfg = one_drive(host, tmp_path)
    torn_table(tmp_path, drive.dev, "backup header", unfinished=case != "filesystems made")
    if case == "data inside the disk":
        with open(drive.dev, "r+b") as f:
            f.seek(64 << 20)  # inside the data partition the torn table names
            f.write(os.urandom(1 << 20))
        os.sync()
        needle = "it also holds non-zero bytes inside the disk at 64 MiB"
    else:
        needle = "partition(s) hostctl-swap-d1, hostctl-data-d1 had their filesystems made"
    before = digest(drive.dev)
    for extra in ((), ("--dry-run",), ("--erase", f"path:{drive.dev}")):
        code, text = storage(cfg, capsys, *extra)
        assert code == 3 and needle in text, (extra, text)
        assert "never formats its own partitions, with or without --erase" in text, text
        assert f"gdisk {drive.dev}" in text and "`b` and `c` (rebuild the primary table from the backup)" in text
        assert digest(drive.dev) == before, extra


def refused_untouched(cfg: Path, capsys, dev: str, needles: list[str]) -> str:
    before = digest(dev)
    text = ""
    for extra in (("--dry-run",), (), ("--erase", f"path:{dev}")):
        code, text = storage(cfg, capsys, *extra)
        assert code == 3 and all(n in text for n in needles), (extra, text)
        assert digest(dev) == before, extra
    return text


def test_a_disk_whose_end_is_gone_is_refused_until_it_shows_its_whole_size(host, tmp_path, capsys):
    drive, cfg, data, want = provisioned(host, tmp_path, capsys)
    check(["umount", str(tmp_path / "m1")])
    check(["swapoff", drive.part(1)])
    size = drive.image.stat().st_size
    with open(drive.image, "rb") as f:
        f.seek(size - (1 << 20))
        end = f.read()
    check(["partx", "-d", drive.dev])
    os.truncate(drive.image, size - (48 << 20))  # what a USB bridge that reports less would show
    check(["losetup", "-c", drive.dev])
    assert tags(drive.dev).get("PTTYPE") == "PMBR"  # libblkid no longer calls it a GPT
    text = refused_untouched(cfg, capsys, drive.dev, [
        "names hostctl's partitions: hostctl-data-d1 (primary table)", "the disk's end is missing",
        "never formats its own partitions, with or without --erase", "connect the disk where it shows its whole size"])
    assert "re-run with --erase" not in text
    os.truncate(drive.image, size)  # back in a bay that shows all of it
    with open(drive.image, "r+b") as f:
        f.seek(size - (1 << 20))
        f.write(end)
    check(["losetup", "-c", drive.dev])
    check(["partx", "-a", drive.dev])
    wait_for([drive.part(2)])
    code, text = storage(cfg, capsys)
    assert code == 0 and "mkfs" not in text and "mkswap" not in text, text
    assert sha256(data) == want


def test_hostctls_data_partition_reformatted_by_hand_is_never_formatted_again(host, tmp_path, capsys):
    drive, cfg, data, _ = provisioned(host, tmp_path, capsys, size="400M")  # mkfs.xfs needs 300 MiB
    check(["umount", str(tmp_path / "m1")])
    check(["mkfs.xfs", "-q", "-f", "-L", "photos", drive.part(2)])  # the user's own filesystem, by hand
    mnt = tmp_path / "mine"
    mnt.mkdir()
    check(["mount", drive.part(2), str(mnt)])
    (mnt / "holiday.jpg").write_bytes(os.urandom(1 << 20))
    want = sha256(mnt / "holiday.jpg")
    check(["umount", str(mnt)])
    refused_untouched(cfg, capsys, drive.dev, [
        "which is not the ext4 filesystem hostctl makes there", "with or without --erase",
        f"`sgdisk --zap-all {drive.dev}` yourself"])
    check(["mount", "-o", "ro", drive.part(2), str(mnt)])
    try:
        assert sha256(mnt / "holiday.jpg") == want
    finally:
        check(["umount", str(mnt)])


def test_hostctls_label_on_a_whole_disk_filesystem_is_never_formatted(host, tmp_path, capsys):
    # a data partition's image copied straight onto a disk (dd): no table, but hostctl's label
    drive, cfg = one_drive(host, tmp_path)
    check(["mkfs.ext4", "-q", "-F", "-L", marks.fs_label("data", "d1"), drive.dev])
    mnt = tmp_path / "mine"
    mnt.mkdir()
    check(["mount", drive.dev, str(mnt)])
    (mnt / "layer-3.planes").write_bytes(os.urandom(1 << 20))
    want = sha256(mnt / "layer-3.planes")
    check(["umount", str(mnt)])
    text = refused_untouched(cfg, capsys, drive.dev, [
        "hostctl's label on a whole disk", f"labelled {marks.fs_label('data', 'd1')!r}",
        f"`wipefs --all {drive.dev}`", "--erase never applies"])
    assert "re-run with --erase" not in text
    check(["mount", "-o", "ro", drive.dev, str(mnt)])
    try:
        assert sha256(mnt / "layer-3.planes") == want
    finally:
        check(["umount", str(mnt)])
