"""Storage provisioning must never lose a byte: on real loop drives, every way a careful sysadmin
found to make hostctl format the wrong thing. Each test keeps a checksummed user file and the raw
bytes of every foreign or unrecognised drive, and checks they survive every refusal and re-run:
contents misread when several devices are probed, blank that is not proven, hostctl's own data
under another drive name or filesystem, two drives on one disk, mountpoint spellings, symlinks
and nesting, interrupted mkfs (xfs in progress, damaged filesystems), swap priorities, and the
smaller guards (a mountpoint holding files, a read-only device, fstab lines naming the labels).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from hostctl import cli, paths, runner
from hostctl.facts.disks import probe_disks
from hostctl.facts.mounts import read_mountinfo

from loopdrives import check, drive_toml, sha256, wait_for, write_profile
from loopdrives import host, restore_sysctls, sysroot  # noqa: F401  (fixtures)

pytestmark = pytest.mark.system
ROLES = 'planes_cache = "d1"\nexpert_store = "d1"\ncompile_cache = "d1"\nswappiness_serving = 7\npage_cluster = 1'


def run_cli(argv: list[str], capsys) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def storage(cfg_path: Path, capsys, *extra: str) -> tuple[int, str]:
    return run_cli(["provision", "--only", "storage", "--yes", "--config", str(cfg_path), *extra], capsys)


def disk_digest(dev: str) -> str:
    """Every byte of a (small) drive."""
    h = hashlib.sha256()
    with open(dev, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    return h.hexdigest()


def put_file(mount: str | Path) -> tuple[Path, str]:
    data = Path(mount) / "moet-planes" / "layer-17.planes"
    data.parent.mkdir(exist_ok=True)
    data.write_bytes(os.urandom(2 << 20))
    os.sync()
    return data, sha256(data)


def profile(tmp_path: Path, drives: list[str], name: str = "p.toml", roles: str = ROLES) -> Path:
    path = tmp_path / name
    write_profile(path, drives, storage=roles)
    return path


def provisioned(host, tmp_path, capsys, *, fs: str = "ext4", size: str = "160M", name: str = "d1"):
    drive = host.drive(size if fs == "ext4" else "400M", name)
    cfg = profile(tmp_path, [drive_toml(name, drive.dev, tmp_path / "m1", fs=fs)],
                  roles=ROLES.replace('"d1"', f'"{name}"'))
    code, text = storage(cfg, capsys)
    assert code == 0, text
    data, digest = put_file(tmp_path / "m1")
    return drive, cfg, data, digest


def blkid(dev: str) -> dict[str, str]:
    out = runner.run(["blkid", "-p", "-o", "export", dev], timeout=30).stdout if os.path.exists(dev) else ""
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


# ---------------------------------------------------------------- 1: probing several devices


def test_a_blank_disk_sorting_first_does_not_hide_the_contents_of_later_ones(host, tmp_path, capsys):
    blank = host.drive("160M", "blank")  # attached first: the lower loop number, probed first
    drive = host.drive("160M", "d1")
    assert int(blank.name.removeprefix("loop")) < int(drive.name.removeprefix("loop"))
    cfg = profile(tmp_path, [drive_toml("d1", drive.dev, tmp_path / "m1")])
    assert storage(cfg, capsys)[0] == 0
    data, digest = put_file(tmp_path / "m1")

    facts = probe_disks()
    seen = {p.path: (p.fs_type, p.fs_label) for d in facts.devices if d.path == drive.dev for p in d.partitions}
    assert seen == {drive.part(1): ("swap", "hcswap-d1"), drive.part(2): ("ext4", "hcdata-d1")}
    code, text = storage(cfg, capsys, "--erase", f"path:{drive.dev}")
    assert code == 0 and "storage: no changes" in text, text
    assert sha256(data) == digest


# ---------------------------------------------------------------- 2: blank must be proven


@pytest.mark.parametrize("kind", ["random bytes", "primary GPT zeroed, backup intact", "bytes at the end only"])
def test_a_disk_that_is_not_provably_blank_needs_erase(kind, host, tmp_path, capsys):
    drive = host.drive("160M", "d1")
    if kind == "random bytes":  # what plain dm-crypt looks like: no header, no signature
        with open(drive.dev, "r+b") as f:
            f.write(os.urandom(4 << 20))
        found = "non-zero bytes in its first MiB"
    elif kind == "bytes at the end only":
        with open(drive.dev, "r+b") as f:
            f.seek(-(64 << 10), os.SEEK_END)
            f.write(os.urandom(32 << 10))
        found = "non-zero bytes in its last MiB"
    else:
        check(["sgdisk", "--new=1:0:0", "--change-name=1:photos", drive.dev])
        check(["partx", "-u", drive.dev])
        wait_for([drive.part(1)])
        check(["mkfs.ext4", "-q", "-L", "photos", drive.part(1)])
        check(["partx", "-d", drive.dev])
        with open(drive.dev, "r+b") as f:
            f.write(bytes(1 << 20))  # protective MBR and primary GPT gone; the backup at the end remains
        found = "a backup GPT header at the end of the disk (the primary was erased; the table is recoverable)"
    os.sync()
    assert not blkid(drive.dev) or kind != "random bytes"  # no signature at all: blkid says nothing
    cfg = profile(tmp_path, [drive_toml("d1", drive.dev, tmp_path / "m1")])
    before = disk_digest(drive.dev)
    for extra in ((), ("--dry-run",)):
        code, text = storage(cfg, capsys, *extra)
        assert code == 3 and found in text and f"--erase path:{drive.dev}" in text, text
        assert disk_digest(drive.dev) == before
    code, text = storage(cfg, capsys, "--erase", f"path:{drive.dev}")
    assert code == 0, text
    assert blkid(drive.part(2)).get("LABEL") == "hcdata-d1"


# ---------------------------------------------------------------- 3: hostctl's own data, any name


def test_a_renamed_drive_is_relabelled_never_formatted(host, tmp_path, capsys):
    drive, cfg, data, digest = provisioned(host, tmp_path, capsys)
    uuid = blkid(drive.part(2))["UUID"]
    renamed = profile(tmp_path, [drive_toml("fast", drive.dev, tmp_path / "m1")], "renamed.toml",
                      roles=ROLES.replace('"d1"', '"fast"'))
    code, text = storage(renamed, capsys, "--erase", f"path:{drive.dev}")  # --erase changes nothing here
    assert code == 0 and "relabel" in text, text
    tags = blkid(drive.part(2))
    assert (tags["LABEL"], tags["PART_ENTRY_NAME"], tags["UUID"]) == ("hcdata-fast", "hostctl-data-fast", uuid)
    assert blkid(drive.part(1))["LABEL"] == "hcswap-fast"
    assert sha256(data) == digest
    assert storage(renamed, capsys)[1].count("storage: no changes\n") == 1


def test_a_renamed_xfs_drive_is_relabelled_while_mounted(host, tmp_path, capsys):
    drive, cfg, data, digest = provisioned(host, tmp_path, capsys, fs="xfs", name="x1")
    renamed = profile(tmp_path, [drive_toml("x2", drive.dev, tmp_path / "m1", fs="xfs")], "renamed.toml",
                      roles=ROLES.replace('"d1"', '"x2"'))
    code, text = storage(renamed, capsys)
    assert code == 0, text
    assert blkid(drive.part(2))["LABEL"] == "hcdata-x2" and sha256(data) == digest
    assert storage(renamed, capsys)[1].count("storage: no changes\n") == 1


def test_a_filesystem_change_is_refused_with_the_manual_commands(host, tmp_path, capsys, sysroot):
    drive, cfg, data, digest = provisioned(host, tmp_path, capsys, size="400M")  # room for xfs too
    xfs = profile(tmp_path, [drive_toml("d1", drive.dev, tmp_path / "m1", fs="xfs")], "xfs.toml")
    for extra in (("--dry-run",), (), ("--erase", f"path:{drive.dev}")):
        code, text = storage(xfs, capsys, *extra)
        assert code == 3, text
        assert "hostctl never formats its own partitions again" in text
        assert f"wipefs --all {drive.part(2)}; mkfs.xfs -L hcdata-d1 {drive.part(2)}" in text
        assert 'set filesystem = "ext4"' in text
    os.sync()
    assert sha256(data) == digest
    # the lost state directory and fstab do not make hostctl forget what is its own
    for p in [sysroot / "etc" / "fstab", *(sysroot / "var").rglob("*")]:
        if p.is_file():
            p.unlink()
    assert storage(cfg, capsys)[0] == 0 and sha256(data) == digest
    assert blkid(drive.part(2))["UUID"] in (sysroot / "etc" / "fstab").read_text()


# ---------------------------------------------------------------- 4: two drives, one disk


def test_two_drives_resolving_to_one_disk_are_bad_input(host, tmp_path, capsys):
    drive, cfg, data, digest = provisioned(host, tmp_path, capsys)
    alias = Path(f"/dev/hostctl-test-alias-{os.getpid()}")
    alias.symlink_to(drive.dev)
    try:
        for order in ((str(alias), drive.dev), (drive.dev, str(alias))):
            two = profile(tmp_path, [drive_toml("d1", order[0], tmp_path / "m1"),
                                     drive_toml("d2", order[1], tmp_path / "m2")], "two.toml",
                          roles=ROLES)
            before = disk_digest(drive.dev)
            for extra in (("--dry-run",), ("--erase", f"path:{order[0]}"), ("--erase", f"path:{order[1]}")):
                code, text = storage(two, capsys, *extra)
                assert code == 2, text
                assert "drives d1" in text and "d2" in text and "are the same disk" in text
                assert disk_digest(drive.dev) == before
        # the alias alone is the same drive as before: nothing to do
        code, text = storage(profile(tmp_path, [drive_toml("d1", str(alias), tmp_path / "m1")], "alias.toml"), capsys)
        assert code == 0 and text.count("storage: no changes\n") == 1, text
    finally:
        alias.unlink()
    assert sha256(data) == digest


# ---------------------------------------------------------------- 5: mountpoints


def test_mountpoint_spellings_are_one_directory(host, tmp_path, capsys):
    drive, cfg, data, digest = provisioned(host, tmp_path, capsys)
    for spelling in (f"{tmp_path}/m1/", f"{tmp_path}/./m1", f"{tmp_path}//m1/."):
        other = tmp_path / "spelled.toml"
        other.write_text(cfg.read_text().replace(f'mountpoint = "{tmp_path / "m1"}"', f'mountpoint = "{spelling}"'))
        code, text = storage(other, capsys)
        assert code == 0 and text.count("storage: no changes\n") == 1, (spelling, text)
    dotdot = tmp_path / "dotdot.toml"
    dotdot.write_text(cfg.read_text().replace(f'mountpoint = "{tmp_path / "m1"}"', f'mountpoint = "{tmp_path}/x/../m1"'))
    code, text = storage(dotdot, capsys)
    assert code == 2 and "drives[0].mountpoint" in text and "'..'" in text, text
    assert sha256(data) == digest


def test_a_symlinked_mountpoint_is_refused(host, tmp_path, capsys):
    drive = host.drive("160M", "d1")
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    cfg = profile(tmp_path, [drive_toml("d1", drive.dev, tmp_path / "link" / "m1")])
    before = disk_digest(drive.dev)
    for extra in (("--dry-run",), ()):
        code, text = storage(cfg, capsys, *extra)
        assert code == 3 and f"goes through a symlink ({tmp_path / 'link'} -> {tmp_path / 'real'})" in text, text
    assert disk_digest(drive.dev) == before


def test_nested_mountpoints_are_mounted_outermost_first(host, tmp_path, capsys):
    outer, inner = host.drive("160M", "d1"), host.drive("160M", "d2")
    cfg = profile(tmp_path, [drive_toml("d2", inner.dev, tmp_path / "m" / "inner"),  # the inner one listed first
                             drive_toml("d1", outer.dev, tmp_path / "m")])
    code, text = storage(cfg, capsys)
    assert code == 0, text

    def holder(path: Path) -> str:
        st = os.stat(path)
        return f"{os.major(st.st_dev)}:{os.minor(st.st_dev)}"

    devs = {m.entry.source: m.dev for m in read_mountinfo()}
    assert holder(tmp_path / "m" / "inner") == devs[inner.part(2)]
    assert holder(tmp_path / "m" / "moet-planes") == devs[outer.part(2)]
    fstab = (paths.system_path("/etc/fstab")).read_text()
    assert fstab.index(f"{tmp_path / 'm'} ext4") < fstab.index(f"{tmp_path / 'm' / 'inner'} ext4")
    assert storage(cfg, capsys)[1].count("storage: no changes\n") == 1
    # the inner drive mounted alone (the outer one absent): mounting the outer would hide it
    check(["umount", str(tmp_path / "m" / "inner")])
    check(["umount", str(tmp_path / "m")])
    (tmp_path / "m" / "inner").mkdir()  # on the root filesystem now, under the outer mountpoint
    check(["mount", inner.part(2), str(tmp_path / "m" / "inner")])
    code, text = storage(cfg, capsys)
    assert code == 0 and f"umount {tmp_path / 'm' / 'inner'}" in text, text
    assert holder(tmp_path / "m" / "inner") == {m.entry.source: m.dev for m in read_mountinfo()}[inner.part(2)]
    assert storage(cfg, capsys)[1].count("storage: no changes\n") == 1


# ---------------------------------------------------------------- 6: unfinished vs damaged


def test_an_xfs_whose_mkfs_never_finished_is_made_again(host, tmp_path, capsys):
    drive, cfg, data, digest = provisioned(host, tmp_path, capsys, fs="xfs", name="x1")
    check(["umount", str(tmp_path / "m1")])
    old = blkid(drive.part(2))["UUID"]
    check(["xfs_db", "-x", "-c", "sb 0", "-c", "write inprogress 1", drive.part(2)])
    code, text = storage(cfg, capsys)
    assert code == 0 and "never finished" in text, text
    tags = blkid(drive.part(2))
    assert tags["LABEL"] == "hcdata-x1" and tags["UUID"] != old
    assert storage(cfg, capsys)[1].count("storage: no changes\n") == 1


def test_a_damaged_filesystem_is_refused_with_the_repair(host, tmp_path, capsys):
    drive, cfg, data, digest = provisioned(host, tmp_path, capsys)
    check(["umount", str(tmp_path / "m1")])
    check(["debugfs", "-w", "-R", "clri <2>", drive.part(2)])  # the root directory's inode: fsck fails
    before = disk_digest(drive.dev)
    for extra in (("--dry-run",), (), ("--erase", f"path:{drive.dev}")):
        code, text = storage(cfg, capsys, *extra)
        assert code == 3 and "fails its read-only check" in text and f"e2fsck -f {drive.part(2)}" in text, text
        assert disk_digest(drive.dev) == before


def test_a_lost_primary_superblock_is_damage_not_an_unfinished_mkfs(host, tmp_path, capsys):
    drive, cfg, data, digest = provisioned(host, tmp_path, capsys)
    check(["umount", str(tmp_path / "m1")])
    with open(drive.part(2), "r+b") as f:
        f.seek(1024)
        f.write(bytes(1024))  # the primary superblock: blkid sees nothing; the backups remain
    os.sync()
    before = disk_digest(drive.dev)
    code, text = storage(cfg, capsys)
    assert code == 3 and "backup superblock remains" in text and "e2fsck -b" in text, text
    assert disk_digest(drive.dev) == before


# ---------------------------------------------------------------- 8: the smaller guards


def test_a_mountpoint_holding_files_is_refused(host, tmp_path, capsys):
    drive = host.drive("160M", "d1")
    (tmp_path / "m1").mkdir()
    (tmp_path / "m1" / "notes.txt").write_text("mine")
    cfg = profile(tmp_path, [drive_toml("d1", drive.dev, tmp_path / "m1")])
    before = disk_digest(drive.dev)
    for extra in (("--dry-run",), ()):
        code, text = storage(cfg, capsys, *extra)
        assert code == 3 and "already holds files (notes.txt)" in text, text
    assert disk_digest(drive.dev) == before and (tmp_path / "m1" / "notes.txt").read_text() == "mine"


def test_a_read_only_device_is_refused_before_any_write(host, tmp_path, capsys):
    drive = host.drive("160M", "d1")
    check(["blockdev", "--setro", drive.dev])
    try:
        cfg = profile(tmp_path, [drive_toml("d1", drive.dev, tmp_path / "m1")])
        for extra in (("--dry-run",), ()):
            code, text = storage(cfg, capsys, *extra)
            assert code == 3 and "is read-only" in text, text
        assert not (tmp_path / "m1").exists()
    finally:
        check(["blockdev", "--setrw", drive.dev])


def test_user_fstab_lines_naming_hostctls_labels_are_noted(host, tmp_path, capsys, sysroot):
    drive, cfg, data, digest = provisioned(host, tmp_path, capsys)
    fstab = sysroot / "etc" / "fstab"
    fstab.write_text("LABEL=hcdata-d1 /srv/old ext4 defaults 0 2\nPARTLABEL=hostctl-swap-d1 none swap sw 0 0\n"
                     + fstab.read_text())
    code, text = storage(cfg, capsys)
    assert code == 0, text
    assert "line 1 (LABEL=hcdata-d1" in text and "line 2 (PARTLABEL=hostctl-swap-d1" in text


# ---------------------------------------------------------------- 6: kill -9 at every step


def _fresh_round(host, tmp_path, fs: str, n: int):
    drive = host.drive("160M" if fs == "ext4" else "320M", f"k{n}")
    mount = tmp_path / f"mk{n}"
    cfg = profile(tmp_path, [drive_toml("d1", drive.dev, mount, fs=fs)], f"k{n}.toml")
    etc = paths.system_path("/etc")
    for p in etc.rglob("*") if etc.exists() else []:
        if p.is_file():
            p.unlink()
    return drive, cfg


def _killed_run(cfg: Path, kill_at: str) -> int:
    """hostctl provision in a child of its own process group, killed by the hook at `kill_at`."""
    pid = os.fork()
    if pid == 0:  # the child: a new process group that SIGKILL takes down whole
        os.setsid()
        os.environ["HOSTCTL_TEST_KILL_AT"] = kill_at
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        try:
            code = cli.main(["provision", "--only", "storage", "--yes", "--config", str(cfg)])
        except BaseException:
            code = 98
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    return status


STEPS = ["sgdisk --clear", "partx -u", "mkswap", "mkfs", "sgdisk --attributes", "swapon", "mount", "write:/etc/fstab"]
WHEN = ["0", "0.005", "0.02", "0.06", "end"]


@pytest.mark.parametrize("fs", ["ext4", "xfs"])
@pytest.mark.parametrize("step", STEPS)
def test_kill_9_at_every_step_converges(step, fs, host, tmp_path, capsys, restore_sysctls):
    """Five kills at different moments of each step (the whole process group, the step's program
    with it); each round converges within two re-runs to a provisioned host that needs nothing."""
    what = f"mkfs.{fs}" if step == "mkfs" else step
    for n, when in enumerate(WHEN):
        drive, cfg = _fresh_round(host, tmp_path, fs, n)
        status = _killed_run(cfg, f"{what}@{when}")
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == 9, (what, when, status)
        code, text = storage(cfg, capsys)
        assert code == 0, (what, when, text)
        code, text = storage(cfg, capsys)
        assert code == 0 and text.count("storage: no changes\n") == 1, (what, when, text)
        tags = blkid(drive.part(2))
        assert (tags.get("TYPE"), tags.get("LABEL")) == (fs, "hcdata-d1") and "PART_ENTRY_FLAGS" not in tags
        assert any(m.entry.source == drive.part(2) for m in read_mountinfo())
        host.release(drive)
        host.drives.remove(drive)


# ---------------------------------------------------------------- what an adversarial review found


def refused_untouched(cfg: Path, capsys, dev: str, needle: str, *, erase: bool = False) -> str:
    """Refused (exit 3) with `needle` in the text, by --dry-run and by real runs (twice: a refusal
    must not leave a state that the next run trusts), and not one byte of the drive changed."""
    before = disk_digest(dev)
    runs = [("--dry-run",), (), ()] + ([("--erase", f"path:{dev}")] if erase else [])
    text = ""
    for extra in runs:
        code, text = storage(cfg, capsys, *extra)
        assert code == 3 and needle in text, (extra, text)
        assert disk_digest(dev) == before, extra
    return text


def test_a_partition_deleted_by_hand_is_not_recreated_over_its_data(host, tmp_path, capsys):
    drive, cfg, data, digest = provisioned(host, tmp_path, capsys)
    check(["umount", str(tmp_path / "m1")])
    check(["swapoff", drive.part(1)])
    check(["sgdisk", "--delete=2", drive.dev])
    check(["partx", "-u", drive.dev])
    refused_untouched(cfg, capsys, drive.dev, "a partition deleted from the table by hand", erase=True)


def test_a_zapped_table_over_a_filesystem_is_not_blank(host, tmp_path, capsys):
    """The user's filesystem did not start where hostctl's partitions would: only sampling the
    disk shows it (the first and last MiB are zero after `sgdisk --zap-all`)."""
    drive = host.drive("160M", "d1")
    check(["sgdisk", "--new=1:0:+4M", "--typecode=1:ef02", "--new=2:0:0", drive.dev])
    check(["partx", "-u", drive.dev])
    wait_for([drive.part(2)])
    check(["mkfs.ext4", "-q", "-L", "userdata", drive.part(2)])
    check(["sgdisk", "--zap-all", drive.dev])
    runner.run(["partx", "-d", drive.dev], timeout=30)  # the kernel may have dropped them already
    cfg = profile(tmp_path, [drive_toml("d1", drive.dev, tmp_path / "m1")])
    refused_untouched(cfg, capsys, drive.dev, "non-zero bytes inside the disk at")


def test_random_bytes_in_the_middle_are_not_blank(host, tmp_path, capsys):
    drive = host.drive("160M", "d1")
    with open(drive.dev, "r+b") as f:
        f.seek(40 << 20)
        f.write(os.urandom(60 << 20))
    cfg = profile(tmp_path, [drive_toml("d1", drive.dev, tmp_path / "m1")])
    refused_untouched(cfg, capsys, drive.dev, "non-zero bytes inside the disk at")


def test_an_xfs_whose_magic_was_wiped_is_not_reformatted(host, tmp_path, capsys):
    drive, cfg, data, digest = provisioned(host, tmp_path, capsys, fs="xfs", name="x1")
    check(["umount", str(tmp_path / "m1")])
    check(["wipefs", "--all", drive.part(2)])  # 4 bytes of magic: the rest of the filesystem is there
    refused_untouched(cfg, capsys, drive.dev, "its first MiB is not zero")


def test_a_corrupt_xfs_in_progress_flag_is_damage_not_an_unfinished_mkfs(host, tmp_path, capsys):
    drive, cfg, data, digest = provisioned(host, tmp_path, capsys, fs="xfs", name="x1")
    check(["umount", str(tmp_path / "m1")])
    with open(drive.part(2), "r+b") as f:
        f.seek(126)  # sb_inprogress, written without fixing the superblock's checksum
        f.write(b"\x01")
    os.sync()
    refused_untouched(cfg, capsys, drive.dev, "fails its read-only check")


def test_random_bytes_in_a_partition_named_like_hostctls_are_kept(host, tmp_path, capsys):
    drive = host.drive("160M", "r1")
    check(["sgdisk", "--new=1:0:+16M", "--change-name=1:hostctl-swap-r1", "--new=2:0:0",
           "--change-name=2:hostctl-data-r1", drive.dev])
    check(["partx", "-u", drive.dev])
    wait_for([drive.part(2)])
    with open(drive.part(2), "r+b") as f:
        f.write(os.urandom(20 << 20))  # plain dm-crypt looks like this
    os.sync()
    cfg = profile(tmp_path, [drive_toml("r1", drive.dev, tmp_path / "m1")], roles=ROLES.replace('"d1"', '"r1"'))
    refused_untouched(cfg, capsys, drive.dev, "its first MiB is not zero")


def test_hostctls_name_over_a_users_filesystem_is_refused_before_any_relabel(host, tmp_path, capsys):
    drive = host.drive("160M", "g1")
    check(["sgdisk", "--new=1:0:+16M", "--change-name=1:hostctl-swap-x", "--new=2:0:0",
           "--change-name=2:hostctl-data-x", drive.dev])
    check(["partx", "-u", drive.dev])
    wait_for([drive.part(2)])
    check(["mkfs.ext4", "-q", "-L", "mine", drive.part(2)])
    cfg = profile(tmp_path, [drive_toml("g1", drive.dev, tmp_path / "m1")], roles=ROLES.replace('"d1"', '"g1"'))
    refused_untouched(cfg, capsys, drive.dev, "which is not the ext4 filesystem hostctl makes there")


def test_hostctls_label_on_a_users_partition_is_not_adopted(host, tmp_path, capsys):
    drive = host.drive("160M", "ad")
    check(["sgdisk", "--new=1:0:0", "--change-name=1:home", drive.dev])
    check(["partx", "-u", drive.dev])
    wait_for([drive.part(1)])
    check(["mkfs.ext4", "-q", "-L", "hcdata-ad", drive.part(1)])
    cfg = profile(tmp_path, [drive_toml("ad", drive.dev, tmp_path / "m1", swap="0")], roles=ROLES.replace('"d1"', '"ad"'))
    refused_untouched(cfg, capsys, drive.dev, "carries hostctl's filesystem label but not its GPT name", erase=True)
    assert not (tmp_path / "m1").exists()


def test_files_on_the_way_to_an_inner_mount_are_not_hidden(host, tmp_path, capsys):
    inner = host.drive("160M", "d2")
    cfg = profile(tmp_path, [drive_toml("d2", inner.dev, tmp_path / "na" / "data" / "b")], "inner.toml",
                  roles=ROLES.replace('"d1"', '"d2"'))
    assert storage(cfg, capsys)[0] == 0
    (tmp_path / "na" / "data" / "notes.txt").write_text("mine")
    outer = host.drive("160M", "d1")
    both = profile(tmp_path, [drive_toml("d2", inner.dev, tmp_path / "na" / "data" / "b"),
                              drive_toml("d1", outer.dev, tmp_path / "na")], "both.toml")
    refused_untouched(both, capsys, outer.dev, "already holds files (data)")
    assert (tmp_path / "na" / "data" / "notes.txt").read_text() == "mine"


def test_a_mountpoint_that_is_a_file_is_refused_before_any_write(host, tmp_path, capsys):
    drive = host.drive("160M", "d1")
    (tmp_path / "m1").write_text("not a directory")
    cfg = profile(tmp_path, [drive_toml("d1", drive.dev, tmp_path / "m1")])
    refused_untouched(cfg, capsys, drive.dev, "exists and is not a directory")


def test_a_disk_locked_by_another_process_is_not_written(host, tmp_path, capsys, monkeypatch):
    """The systemd block-device locking convention: while another process (a second hostctl with
    another state directory, a partitioning tool) holds the whole disk's lock, nothing is written."""
    import fcntl

    from hostctl.provision import executor

    monkeypatch.setattr(executor, "DISK_LOCK_WAIT_S", 0.5)
    drive = host.drive("160M", "d1")
    cfg = profile(tmp_path, [drive_toml("d1", drive.dev, tmp_path / "m1")])
    before = disk_digest(drive.dev)
    fd = os.open(drive.dev, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        code, text = storage(cfg, capsys)
        assert code == 1 and f"{drive.dev} is locked by another process" in text, text
        assert disk_digest(drive.dev) == before
    finally:
        os.close(fd)
    assert storage(cfg, capsys)[0] == 0
