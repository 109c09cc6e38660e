"""`hostctl provision --only storage` on real loop drives: GPT tables, mkswap/swapon, ext4 and
xfs, mounts, fstab and sysctl files under a temporary sysroot. Every refusal, idempotency,
convergence from half-provisioned states, interruption after each action, and a file on the
data filesystem that must survive all of it. Needs root; cleans up everything it attaches."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostctl import cli, paths
from hostctl.facts.memory import read_swaps
from hostctl.facts.mounts import read_mountinfo
from hostctl.provision import fstab, sysctl
from hostctl.provision.storage_part import provision_storage, read_system_files, storage_facts
from hostctl.provision.storage import StorageOptions, plan_storage_provision

from loopdrives import SWAP_PRIORITY, check, drive_toml, on_device, sha256, wait_for, write_profile
from loopdrives import host, restore_sysctls, sysroot  # noqa: F401  (fixtures)

pytestmark = pytest.mark.system
ROOT = Path(__file__).resolve().parents[2]
ONE_DRIVE_ROLES = 'planes_cache = "d1"\nexpert_store = "d1"\ncompile_cache = "d1"\nswappiness_serving = 7\npage_cluster = 1'
TWO_DRIVE_ROLES = ('planes_cache = "d1"\nexpert_store = "d2"\nrank_stores = ["d1", "d2"]\ncompile_cache = "d1"\n'
                   "swappiness_serving = 7\npage_cluster = 1")


def provision(cfg, **kw):
    out, err = io.StringIO(), io.StringIO()
    kw.setdefault("yes", True)
    outcome = provision_storage(cfg, out=out, err=err, **kw)
    return outcome, out.getvalue(), err.getvalue()


def cli_run(argv: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def fresh_plan(cfg, erase=()):
    facts = storage_facts(cfg)
    return plan_storage_provision(cfg, facts, read_system_files(cfg, facts), StorageOptions(erase=tuple(erase)))


def swaps_of(drive) -> dict[str, int]:
    return {s.path: s.priority for s in read_swaps() if s.path.startswith(drive.dev + "p")}


def mounts_of(drive) -> dict[str, tuple[str, str]]:
    return {m.entry.source: (m.entry.target, m.entry.options) for m in read_mountinfo()
            if m.entry.source.startswith(drive.dev + "p")}


def blkid(dev: str) -> dict[str, str]:
    res = subprocess.run(["blkid", "-p", "-o", "export", dev], capture_output=True, text=True)
    return dict(line.split("=", 1) for line in res.stdout.splitlines() if "=" in line)


def host_state(drives, sysroot: Path) -> dict:
    """Everything provisioning could change, for before/after comparisons."""
    def ours(path: str) -> bool:
        return any(on_device(path, d.dev) for d in drives)

    # hostctl's own lock file (and the state directory holding it) is not a change to the host
    files = {str(p.relative_to(sysroot)): (p.read_bytes() if p.is_file() else None)
             for p in sorted(sysroot.rglob("*")) if not str(p.relative_to(sysroot)).startswith("var")}
    return {
        "tables": {d.dev: d.table_bytes() for d in drives},
        "signatures": {d.dev: [blkid(p) for p in [d.dev] + sorted(str(x) for x in Path("/dev").glob(d.name + "p*"))]
                       for d in drives},
        "swaps": [s for s in read_swaps() if ours(s.path)],
        "mounts": [m.entry for m in read_mountinfo() if ours(m.entry.source)],
        "sysroot": files,
        "sysctl": {k: Path(f"/proc/sys/vm/{k}").read_text() for k in ("swappiness", "page-cluster")},
    }


def assert_provisioned(cfg, drives, sysroot: Path, owner: tuple[int, int] | None = None) -> None:
    """The host matches the profile, checked directly (not through hostctl's own planner)."""
    block = fstab.current_block(paths.system_path("/etc/fstab").read_text())
    for d, drive in zip(cfg.profile.drives, drives):
        swap, data = blkid(drive.part(1)), blkid(drive.part(2))
        assert (swap.get("TYPE"), swap.get("LABEL"), swap.get("PART_ENTRY_NAME")) == \
            ("swap", f"hcswap-{d.name}", f"hostctl-swap-{d.name}")
        assert (data.get("TYPE"), data.get("LABEL"), data.get("PART_ENTRY_NAME")) == \
            (d.filesystem, f"hcdata-{d.name}", f"hostctl-data-{d.name}")
        assert swaps_of(drive) == {drive.part(1): d.swap_priority}
        target, options = mounts_of(drive)[drive.part(2)]
        assert target == d.mount and "noatime" in options.split(",")
        assert f"UUID={swap['UUID']} none swap pri={d.swap_priority},nofail 0 0" in block
        assert any(line.startswith(f"UUID={data['UUID']} {d.mount} {d.filesystem} defaults,noatime,nofail") for line in block)
    for role_dir in ("moet-planes", "compile-cache"):
        st = os.stat(f"{cfg.profile.drives[0].mount}/{role_dir}")
        if owner:
            assert (st.st_uid, st.st_gid) == owner
    conf = paths.system_path(sysctl.SYSCTL_FILE).read_text()
    assert "vm.swappiness = 7" in conf and "vm.page-cluster = 1" in conf
    assert Path("/proc/sys/vm/swappiness").read_text().strip() == "7"
    assert Path("/proc/sys/vm/page-cluster").read_text().strip() == "1"


@pytest.fixture
def one(host, tmp_path):
    """One small blank drive and its profile."""
    drive = host.drive("160M", "d1")
    cfg = write_profile(tmp_path / "p.toml", [drive_toml("d1", drive.dev, tmp_path / "m1")], storage=ONE_DRIVE_ROLES)
    return drive, cfg


@pytest.fixture
def provisioned(one, sysroot):
    """One provisioned drive with a file on its data filesystem; returns (drive, cfg, file, checksum)."""
    drive, cfg = one
    provision(cfg)
    data = Path(cfg.profile.drives[0].mount) / "moet-planes" / "layer-17.planes"
    data.write_bytes(os.urandom(3 << 20))
    os.sync()
    return drive, cfg, data, sha256(data)


# ---------------------------------------------------------------- end to end, idempotency


def test_two_blank_drives_end_to_end_then_no_changes(host, tmp_path, sysroot, monkeypatch):
    monkeypatch.setenv("SUDO_UID", "4321")
    monkeypatch.setenv("SUDO_GID", "4322")
    a, b = host.drive("160M", "d1"), host.drive("160M", "d2")
    cfg = write_profile(tmp_path / "p.toml", [drive_toml("d1", a.dev, tmp_path / "m1"),
                                              drive_toml("d2", b.dev, tmp_path / "m2")], storage=TWO_DRIVE_ROLES)
    (sysroot / "etc").mkdir()
    user_fstab = "# the user's own lines\nUUID=1111-2222 /boot/efi vfat umask=0077 0 1\n"
    (sysroot / "etc" / "fstab").write_text(user_fstab)

    outcome, out, err = provision(cfg)
    assert outcome.changed > 0 and "verified" in out
    assert "[1/" in err and "mkfs.ext4" in err  # progress on stderr
    assert_provisioned(cfg, [a, b], sysroot, owner=(4321, 4322))
    assert os.stat(tmp_path / "m1" / "moet-store-rank0").st_uid == 4321  # rank 0's store lives on d1
    assert os.path.isdir(tmp_path / "m2" / "moet-store")
    text = (sysroot / "etc" / "fstab").read_text()
    assert text.startswith(user_fstab)  # the user's lines are kept, in place
    assert len(fstab.current_block(text)) == 4

    data = tmp_path / "m2" / "moet-store" / "x.rank1of2.pack"
    data.write_bytes(os.urandom(1 << 20))
    digest, before = sha256(data), host_state([a, b], sysroot)
    again, out, err = provision(cfg)
    assert again.changed == 0 and "storage: no changes" in out and "[1/" not in err
    assert host_state([a, b], sysroot) == before and sha256(data) == digest


def test_cli_provision_exit_codes_and_other_parts(one, tmp_path, capsys):
    drive, cfg = one
    profile = str(tmp_path / "p.toml")
    code, out, err = cli_run(["provision", "--only", "storage", "--yes", "--config", profile], capsys)
    assert code == 0, err
    code, out, err = cli_run(["provision", "--only", "storage", "--config", profile], capsys)
    assert code == 0 and "storage: no changes" in out  # no destructive step: no consent needed
    code, out, err = cli_run(["provision", "--config", profile], capsys)
    # The full run does storage, then stops at system: this profile's plan has errors, so no
    # runtime unit is installed (and the GPU part, which follows system, does not run).
    assert code == 1 and "storage: no changes" in out and "gpu:" not in out
    assert "the plan has errors; no unit was installed" in err
    code, out, err = cli_run(["provision", "--only", "gpu", "--config", profile], capsys)
    assert code == 0 and "gpu: no driver" in out  # installs the boot unit, skips the rest


def test_xfs_data_filesystem(host, tmp_path):
    drive = host.drive("512M", "x1")
    cfg = write_profile(tmp_path / "p.toml", [drive_toml("x1", drive.dev, tmp_path / "mx", fs="xfs")],
                        storage='planes_cache = "x1"\nexpert_store = "x1"')
    provision(cfg)
    assert blkid(drive.part(2))["TYPE"] == "xfs" and blkid(drive.part(2))["LABEL"] == "hcdata-x1"
    assert mounts_of(drive)[drive.part(2)][0] == str(tmp_path / "mx")
    line = next(ln for ln in fstab.current_block(paths.system_path("/etc/fstab").read_text()) if " xfs " in ln)
    assert line.endswith(" xfs defaults,noatime,nofail 0 0")
    assert provision(cfg)[0].changed == 0


def test_converting_phase_sets_its_swappiness(one, tmp_path):
    drive, _ = one
    cfg = write_profile(tmp_path / "p.toml", [drive_toml("d1", drive.dev, tmp_path / "m1")],
                        storage=ONE_DRIVE_ROLES + "\nswappiness_converting = 133", phase="converting")
    provision(cfg)
    assert Path("/proc/sys/vm/swappiness").read_text().strip() == "133"
    assert "vm.swappiness = 133" in paths.system_path(sysctl.SYSCTL_FILE).read_text()


# ---------------------------------------------------------------- dry run


def test_dry_run_changes_nothing_on_a_blank_drive(one, sysroot, capsys, tmp_path):
    drive, cfg = one
    before = host_state([drive], sysroot)
    code, out, err = cli_run(["provision", "--only", "storage", "--dry-run", "--config", str(tmp_path / "p.toml")], capsys)
    assert code == 0, err
    assert f"sgdisk --clear --new=1:0:+16M --typecode=1:8200 --change-name=1:hostctl-swap-d1" in out
    assert f"mkfs.ext4 -q -m 0 -L hcdata-d1 -U " in out and "lazy_itable_init=1" in out
    assert "edit /etc/fstab:" in out and "+# BEGIN hostctl storage" in out
    assert "nothing was changed" in out
    assert host_state([drive], sysroot) == before
    assert not (tmp_path / "m1").exists()


def test_dry_run_changes_nothing_on_a_half_provisioned_drive(provisioned, sysroot):
    drive, cfg, data, digest = provisioned
    check(["swapoff", drive.part(1)])
    check(["umount", cfg.profile.drives[0].mount])
    paths.system_path("/etc/fstab").write_text("# mine\n")
    before = host_state([drive], sysroot)
    outcome, out, _ = provision(cfg, dry_run=True)
    assert "swapon --priority 1" in out and "mount -t ext4" in out and "edit /etc/fstab" in out
    assert "[destructive]" not in out
    assert host_state([drive], sysroot) == before
    provision(cfg)
    assert sha256(data) == digest


# ---------------------------------------------------------------- consent


def test_destructive_steps_without_yes_and_without_a_terminal_are_refused(one, sysroot, tmp_path):
    drive, _ = one
    before = host_state([drive], sysroot)
    res = subprocess.run([sys.executable, "-m", "hostctl", "provision", "--only", "storage", "--config",
                          str(tmp_path / "p.toml")], stdin=subprocess.DEVNULL, capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ})
    assert res.returncode == 3, res.stderr
    assert "stdin is not a terminal" in res.stderr and "d1" in res.stderr
    assert host_state([drive], sysroot) == before


def _run_at_terminal(argv: list[str], answer: str) -> tuple[int, str]:
    """Run hostctl with a pseudo-terminal as stdin and type `answer`."""
    import pty

    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "hostctl", *argv], stdin=slave, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=ROOT)
        os.write(master, (answer + "\n").encode())
        _, err = proc.communicate(timeout=120)
    finally:
        os.close(slave)
        os.close(master)
    return proc.returncode, err


def test_typing_the_identity_at_a_terminal_consents(one, tmp_path):
    drive, cfg = one
    code, err = _run_at_terminal(["provision", "--only", "storage", "--config", str(tmp_path / "p.toml")], "wrong")
    assert code == 3 and "consent for d1 not given" in err
    assert "PTTYPE" not in blkid(drive.dev)
    code, err = _run_at_terminal(["provision", "--only", "storage", "--config", str(tmp_path / "p.toml")], drive.dev)
    assert code == 0, err
    assert f"Type {drive.dev} to continue" in err
    assert blkid(drive.part(2))["LABEL"] == "hcdata-d1"


# ---------------------------------------------------------------- refusals (exit 3, drive and reason named)


def _refused(cfg, capsys, tmp_path, *extra: str) -> str:
    code, out, err = cli_run(["provision", "--only", "storage", "--yes", *extra, "--config", str(tmp_path / "p.toml")],
                             capsys)
    assert code == 3, (out, err)
    return out + err


def _two(provisioned, host, tmp_path, other_size="160M", **kw):
    """The provisioned drive d1 plus a second drive d2 in the profile."""
    drive, cfg, data, digest = provisioned
    other = host.drive(other_size, "d2")
    cfg = write_profile(tmp_path / "p.toml", [drive_toml("d1", drive.dev, tmp_path / "m1"),
                                              drive_toml("d2", other.dev, tmp_path / "m2", **kw)],
                        storage=TWO_DRIVE_ROLES)
    return drive, other, cfg, data, digest


def test_refuses_an_identity_not_found(provisioned, tmp_path, capsys, sysroot):
    drive, cfg, data, digest = provisioned
    write_profile(tmp_path / "p.toml", [drive_toml("d1", drive.dev, tmp_path / "m1"),
                                        drive_toml("d2", "/dev/hc3-no-such-disk", tmp_path / "m2")], storage=ONE_DRIVE_ROLES)
    before = host_state([drive], sysroot)
    text = _refused(cfg, capsys, tmp_path)
    assert "drive d2" in text and "no disk on this host has identity path:/dev/hc3-no-such-disk" in text
    assert host_state([drive], sysroot) == before and sha256(data) == digest


def test_refuses_a_mounted_drive(provisioned, host, tmp_path, capsys, sysroot):
    drive, other, cfg, data, digest = _two(provisioned, host, tmp_path)
    check(["sgdisk", "--new=1:0:+32M", "--change-name=1:users", other.dev])
    check(["partx", "-u", other.dev])
    wait_for([other.part(1)])
    check(["mkfs.ext4", "-q", "-L", "users", other.part(1)])
    (tmp_path / "elsewhere").mkdir()
    check(["mount", "-o", "noinit_itable", other.part(1), str(tmp_path / "elsewhere")])
    before = host_state([drive, other], sysroot)
    text = _refused(cfg, capsys, tmp_path, "--erase", f"path:{other.dev}")  # even --erase does not override
    assert "drive d2" in text and f"partition {other.part(1)} is mounted at {tmp_path / 'elsewhere'}" in text
    assert host_state([drive, other], sysroot) == before and sha256(data) == digest


def test_refuses_active_swap_that_is_not_hostctls(provisioned, host, tmp_path, capsys, sysroot):
    drive, other, cfg, data, digest = _two(provisioned, host, tmp_path)
    check(["sgdisk", "--new=1:0:+16M", "--typecode=1:8200", "--change-name=1:theirs", other.dev])
    check(["partx", "-u", other.dev])
    wait_for([other.part(1)])
    check(["mkswap", "-L", "theirs", other.part(1)])
    check(["swapon", "-p", str(SWAP_PRIORITY), other.part(1)])
    before = host_state([drive, other], sysroot)
    text = _refused(cfg, capsys, tmp_path, "--erase", other.dev)
    assert "drive d2" in text and "active swap that hostctl did not create" in text
    assert host_state([drive, other], sysroot) == before and sha256(data) == digest


def test_refuses_a_drive_smaller_than_the_layout(provisioned, host, tmp_path, capsys, sysroot):
    drive, other, cfg, data, digest = _two(provisioned, host, tmp_path, other_size="40M", swap="32MiB")
    before = host_state([drive, other], sysroot)
    text = _refused(cfg, capsys, tmp_path)
    assert "drive d2" in text and "smaller than the layout: 40 MiB" in text
    assert host_state([drive, other], sysroot) == before and sha256(data) == digest


def test_refuses_a_mount_point_taken_by_another_filesystem(provisioned, host, tmp_path, capsys, sysroot):
    drive, other, cfg, data, digest = _two(provisioned, host, tmp_path)
    squatter = host.drive("32M", "sq")
    check(["mkfs.ext4", "-q", squatter.dev])
    (tmp_path / "m2").mkdir()
    check(["mount", "-o", "noinit_itable", squatter.dev, str(tmp_path / "m2")])
    text = _refused(cfg, capsys, tmp_path)
    assert "drive d2" in text and f"its mount point {tmp_path / 'm2'} is taken by {squatter.dev}" in text
    assert "PTTYPE" not in blkid(other.dev) and sha256(data) == digest


@pytest.mark.parametrize("kind", ["dos table", "foreign gpt partition", "whole-disk filesystem"])
def test_foreign_contents_need_erase_naming_that_drive(kind, provisioned, host, tmp_path, capsys, sysroot):
    drive, other, cfg, data, digest = _two(provisioned, host, tmp_path)
    if kind == "dos table":
        check(["parted", "-s", other.dev, "mklabel", "msdos", "mkpart", "primary", "ext4", "1MiB", "20MiB"])
        expect = "a dos partition table"
    elif kind == "foreign gpt partition":
        check(["sgdisk", "--new=1:0:+24M", "--change-name=1:photos", other.dev])
        check(["partx", "-u", other.dev])
        wait_for([other.part(1)])
        check(["mkfs.ext4", "-q", "-L", "photos", other.part(1)])
        expect = "partition " + other.part(1) + " ('photos'): ext4 'photos'"
    else:
        check(["mkfs.ext4", "-q", "-L", "whole", other.dev])
        expect = "a ext4 filesystem on the whole disk"
    before = host_state([drive, other], sysroot)
    text = _refused(cfg, capsys, tmp_path)
    assert "drive d2" in text and expect in text and f"--erase path:{other.dev}" in text
    text = _refused(cfg, capsys, tmp_path, "--erase", f"path:{drive.dev}")  # naming another drive is not enough
    assert "drive d2" in text
    assert host_state([drive, other], sysroot) == before and sha256(data) == digest

    outcome, out, _ = provision(cfg, erase=(f"path:{other.dev}",))
    assert "ERASE and lay out" in out and outcome.changed > 0
    assert blkid(other.part(2))["LABEL"] == "hcdata-d2" and blkid(other.part(1))["LABEL"] == "hcswap-d2"
    assert sha256(data) == digest
    assert provision(cfg)[0].changed == 0


def test_erase_naming_no_drive_of_the_profile_is_bad_input(provisioned, tmp_path, capsys):
    code, _, err = cli_run(["provision", "--only", "storage", "--yes", "--erase", "serial:NOPE",
                            "--config", str(tmp_path / "p.toml")], capsys)
    assert code == 2 and "--erase serial:NOPE: names no drive" in err


def test_hostctl_data_is_never_erased_even_with_erase(provisioned, tmp_path, capsys, sysroot):
    drive, cfg, data, digest = provisioned
    # the profile now wants a bigger swap partition: only re-partitioning (losing the data) could do that
    cfg = write_profile(tmp_path / "p.toml", [drive_toml("d1", drive.dev, tmp_path / "m1", swap="24MiB")],
                        storage=ONE_DRIVE_ROLES)
    before = host_state([drive], sysroot)
    text = _refused(cfg, capsys, tmp_path, "--erase", f"path:{drive.dev}")
    assert "hostctl never formats its own partitions again, with or without --erase" in text
    assert "the profile asks for 24 MiB" in text
    assert host_state([drive], sysroot) == before and sha256(data) == digest


def test_refuses_the_root_or_boot_disk(provisioned, tmp_path, sysroot):
    """In a private mount namespace the drive's data partition carries /boot (or /): only that
    process sees it, and it ends with the process."""
    drive, cfg, data, digest = provisioned
    target = "/boot" if os.path.isdir("/boot") else "/"
    # the same filesystem, mounted a second time (a read-only mount of it would fail with EBUSY)
    script = (f"mount {drive.part(2)} {target} && exec {sys.executable} -m hostctl provision "
              f"--only storage --yes --config {tmp_path / 'p.toml'}")
    before = host_state([drive], sysroot)
    res = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 3, res.stderr
    assert "drive d1" in res.stderr and "carries the root or boot filesystem" in res.stderr
    assert host_state([drive], sysroot) == before and sha256(data) == digest


def test_refuses_a_drive_with_holders(provisioned, host, tmp_path, sysroot):
    """A drive that a stacking driver (dm, md, bcache) sits on is refused, and nothing changes.

    Holders exist only where such a driver links itself under /sys/block/<disk>/holders, and this
    kernel has none (no /dev/mapper/control device, no modules to load), so `dmsetup create` cannot
    run here. The kernel's report is given instead, in a private mount namespace, as the root-disk
    test above does: a tmpfs over d2's holders directory with the dm-N link the kernel would make.
    hostctl runs unchanged in that namespace and reads the real sysfs path."""
    drive, other, cfg, data, digest = _two(provisioned, host, tmp_path)
    holders = f"/sys/block/{os.path.basename(other.dev)}/holders"
    assert os.listdir(holders) == []  # d2 is a bare loop drive before the holder appears
    script = (f"mount -t tmpfs hc3-holder {holders} && ln -s ../../dm-7 {holders}/dm-7 && exec {sys.executable} "
              f"-m hostctl provision --only storage --yes --config {tmp_path / 'p.toml'}")
    before = host_state([drive, other], sysroot)
    res = subprocess.run(["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
                         capture_output=True, text=True, cwd=ROOT)
    assert res.returncode == 3, (res.stdout, res.stderr)
    text = res.stdout + res.stderr
    assert "drive d2" in text and "it is in use by dm-7 (LVM, md or dm)" in text
    assert host_state([drive, other], sysroot) == before and sha256(data) == digest
    assert os.listdir(holders) == []  # the namespace, and its holder, ended with the process


# ---------------------------------------------------------------- convergence from half-provisioned states


def _converges(cfg, expect_in_plan: list[str], data=None, digest=None, forbid=("[destructive]",)) -> str:
    outcome, out, _ = provision(cfg)
    for needle in expect_in_plan:
        assert needle in out, out
    for needle in forbid:
        assert needle not in out, out
    assert outcome.changed > 0
    again, out2, err2 = provision(cfg)
    assert again.changed == 0 and "storage: no changes" in out2 and "[1/" not in err2
    if data is not None:
        assert sha256(data) == digest
    return out


def test_converges_from_a_table_without_filesystems(one, sysroot):
    drive, cfg = one
    check(["sgdisk", "--new=1:0:+16M", "--typecode=1:8200", "--change-name=1:hostctl-swap-d1",
           "--new=2:0:0", "--typecode=2:8300", "--change-name=2:hostctl-data-d1", drive.dev])
    check(["partx", "-u", drive.dev])
    table = drive.table_bytes()
    out = _converges(cfg, ["mkswap", "mkfs.ext4", "swapon", "mount -t ext4"], forbid=("sgdisk",))
    assert drive.table_bytes() == table
    assert_provisioned(cfg, [drive], sysroot)


def test_converges_from_a_table_the_kernel_has_not_loaded(one, sysroot):
    drive, cfg = one
    check(["sgdisk", "--new=1:0:+16M", "--typecode=1:8200", "--change-name=1:hostctl-swap-d1",
           "--new=2:0:0", "--typecode=2:8300", "--change-name=2:hostctl-data-d1", drive.dev])
    assert not os.path.exists(drive.part(1))  # loop devices: sgdisk alone does not load it
    out = _converges(cfg, ["partx -u", "re-planned", "mkfs.ext4"], forbid=("sgdisk",))
    assert_provisioned(cfg, [drive], sysroot)


def test_converges_when_the_data_partition_is_missing(one, sysroot):
    drive, cfg = one
    check(["sgdisk", "--new=1:0:+16M", "--typecode=1:8200", "--change-name=1:hostctl-swap-d1", drive.dev])
    check(["partx", "-u", drive.dev])
    wait_for([drive.part(1)])
    check(["mkswap", "-L", "hcswap-d1", drive.part(1)])
    swap_uuid = blkid(drive.part(1))["UUID"]
    out = _converges(cfg, ["sgdisk --new=2:0:0"], forbid=("--clear", "mkswap"))
    assert blkid(drive.part(1))["UUID"] == swap_uuid
    assert_provisioned(cfg, [drive], sysroot)


def test_converges_from_filesystems_without_fstab_lines(provisioned, sysroot):
    drive, cfg, data, digest = provisioned
    mine = "# mine\nproc /proc proc defaults 0 0\n"
    paths.system_path("/etc/fstab").write_text(mine)
    _converges(cfg, ["edit /etc/fstab"], data, digest)
    assert paths.system_path("/etc/fstab").read_text().startswith(mine)
    assert_provisioned(cfg, [drive], sysroot)


def test_converges_a_stale_block_and_keeps_user_lines_around_it(provisioned, sysroot):
    drive, cfg, data, digest = provisioned
    p = paths.system_path("/etc/fstab")
    block = p.read_text()
    p.write_text("# before\n" + block.replace("pri=1", "pri=9") + "# after\n/dev/sdz1 /srv ext4 defaults 0 2\n")
    out = _converges(cfg, ["-UUID=", "+UUID="], data, digest)
    text = p.read_text()
    assert text.startswith("# before\n") and text.endswith("# after\n/dev/sdz1 /srv ext4 defaults 0 2\n")
    assert "pri=9" not in text


def test_converges_when_swap_is_not_active(provisioned, sysroot):
    drive, cfg, data, digest = provisioned
    check(["swapoff", drive.part(1)])
    out = _converges(cfg, ["swapon --priority 1"], data, digest, forbid=("[destructive]", "mkswap"))
    assert swaps_of(drive) == {drive.part(1): 1}


def test_converges_a_wrong_swap_priority(provisioned, sysroot):
    drive, cfg, data, digest = provisioned
    check(["swapoff", drive.part(1)])
    check(["swapon", "-p", "5", drive.part(1)])
    _converges(cfg, ["swapoff", "priority 5, the profile says 1", "swapon --priority 1"], data, digest)
    assert swaps_of(drive) == {drive.part(1): 1}


def test_converges_when_not_mounted(provisioned, sysroot):
    drive, cfg, data, digest = provisioned
    check(["umount", cfg.profile.drives[0].mount])
    _converges(cfg, ["mount -t ext4 -o noatime,noinit_itable"], data, digest, forbid=("[destructive]", "mkfs"))
    assert_provisioned(cfg, [drive], sysroot)


def test_converges_a_missing_directory_and_wrong_owner(provisioned, sysroot, monkeypatch):
    drive, cfg, data, digest = provisioned
    mount = Path(cfg.profile.drives[0].mount)
    (mount / "compile-cache").rmdir()
    monkeypatch.setenv("SUDO_UID", "2001")
    monkeypatch.setenv("SUDO_GID", "2002")
    _converges(cfg, [f"mkdir -p {mount}/compile-cache && chown 2001:2002", f"chown 2001:2002 {mount}/moet-planes"],
               data, digest)
    assert os.stat(mount / "compile-cache").st_uid == 2001 and os.stat(mount / "moet-planes").st_gid == 2002


def test_converges_an_edited_sysctl_file_and_runtime_values(provisioned, sysroot):
    drive, cfg, data, digest = provisioned
    paths.system_path(sysctl.SYSCTL_FILE).write_text("vm.swappiness = 99\n")
    Path("/proc/sys/vm/swappiness").write_text("99")
    _converges(cfg, ["edit /etc/sysctl.d/90-hostctl-swap.conf", "sysctl -w vm.swappiness=7 vm.page-cluster=1"],
               data, digest)
    assert_provisioned(cfg, [drive], sysroot)


def test_a_foreign_filesystem_on_hostctls_swap_partition_is_refused_even_with_erase(provisioned, tmp_path, capsys):
    """The partition carries hostctl's name, so the filesystem on it is the user's, made there by
    hand: --erase does not apply to a drive with hostctl's marks; the user gives it back by hand."""
    drive, cfg, data, digest = provisioned
    check(["swapoff", drive.part(1)])
    check(["mkfs.ext4", "-q", "-L", "intruder", drive.part(1)])
    intruder = blkid(drive.part(1))
    for extra in ((), ("--erase", drive.dev)):  # the bare value names the drive too
        text = _refused(cfg, capsys, tmp_path, *extra)
        assert "'intruder'" in text and "with or without --erase" in text and "re-run with --erase" not in text, text
        assert blkid(drive.part(1)) == intruder
    assert sha256(data) == digest and f"`sgdisk --zap-all {drive.dev}` yourself" in text


def test_old_signatures_inside_new_partitions_stop_the_format(one, sysroot, tmp_path, capsys):
    """A drive whose table was zapped but whose old filesystem is still at the data partition's
    offset is not blank: the samples inside the disk find it before anything is written."""
    drive, cfg = one
    check(["sgdisk", "--new=1:0:+16M", "--new=2:0:0", drive.dev])
    check(["partx", "-u", drive.dev])
    wait_for([drive.part(2)])
    check(["mkfs.ext4", "-q", "-L", "olddata", drive.part(2)])
    check(["sgdisk", "--zap-all", drive.dev])
    check(["partx", "-d", "--nr", "1:2", drive.dev])
    assert "PTTYPE" not in blkid(drive.dev)
    before = drive.table_bytes()
    text = _refused(cfg, capsys, tmp_path)
    assert "non-zero bytes inside the disk at" in text and f"--erase path:{drive.dev}" in text
    assert drive.table_bytes() == before
    provision(cfg, erase=(drive.dev,))
    assert_provisioned(cfg, [drive], sysroot)


# ---------------------------------------------------------------- interruption after every action


def test_an_interrupted_run_converges_after_every_action(host, tmp_path, sysroot, restore_sysctls):
    """Stop after action k (as if the process were killed between two steps), for every k, then
    run provision again: the host must end provisioned, and a third run must change nothing."""
    k = 0
    total = None
    while total is None or k < total:
        drive = host.drive("160M", f"k{k}")
        mount = tmp_path / f"mk{k}"
        cfg = write_profile(tmp_path / f"p{k}.toml", [drive_toml("d1", drive.dev, mount)], storage=ONE_DRIVE_ROLES)
        for p in (sysroot / "etc").rglob("*") if (sysroot / "etc").exists() else []:
            if p.is_file():
                p.unlink()
        for key, value in restore_sysctls.items():  # every round starts from the same host
            Path(f"/proc/sys/vm/{key}").write_text(value)
        plan = fresh_plan(cfg)
        total = total or len(plan.actions)
        assert len(plan.actions) == total
        for a in plan.actions[:k]:
            a.run()
        outcome, out, err = provision(cfg)
        # what the first k actions left is taken as it is: at most the whole plan again (a
        # partition whose filesystem was made but whose unfinished mark was not cleared is remade)
        assert 0 < outcome.changed <= total or (k == total and outcome.changed == 0), (k, out)
        assert_provisioned(cfg, [drive], sysroot)
        assert provision(cfg)[0].changed == 0, k
        host.release(drive)
        host.drives.remove(drive)
        k += 1
    assert total >= 10
