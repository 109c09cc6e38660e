"""A partition table of hostctl's whose write stopped part-way, on real loop drives.

sgdisk writes the backup entry array, the backup header, the primary array, the primary header
and the protective MBR last; a kill or a power cut in between leaves a table no tool loads. Each
state is built here exactly (sgdisk writes the whole table into a scratch image, and only the
sectors written by that moment are copied onto the drive), so the test does not depend on where
a timed kill happens to land. A table whose partitions are all still marked unfinished, on a disk
that holds nothing else, is laid out again; anything more is refused with every byte kept.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from hostctl import cli, marks, runner

from loopdrives import check, drive_toml, write_profile
from loopdrives import host, restore_sysctls, sysroot  # noqa: F401  (fixtures)

pytestmark = pytest.mark.system
ROLES = 'planes_cache = "d1"\nexpert_store = "d1"\ncompile_cache = "d1"'
SECTOR, ARRAY = 512, 128 * 128


def storage(cfg: Path, capsys, *extra: str) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(["provision", "--only", "storage", "--yes", "--config", str(cfg), *extra])
    out = capsys.readouterr()
    return code, out.out + out.err


def digest(dev: str) -> str:
    h = hashlib.sha256()
    with open(dev, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    return h.hexdigest()


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
