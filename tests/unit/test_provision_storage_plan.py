"""Storage provisioning decisions on facts snapshots (no host access): the field report's
desktop as provisioned, blank, half-provisioned and unsafe; the fstab block; consent; sysctls."""

from __future__ import annotations

import io
import json
import itertools
import os

import pytest

import snapshots

from hostctl import paths
from hostctl.config import Drive, load_config
from hostctl.errors import FailedError, InputError, RefusedError
from hostctl.facts import load_snapshot
from hostctl.facts.disks import resolve_identity
from hostctl.facts.records import BlankProof, Disk, DiskFacts, FsCheck, MountEntry, Partition
from hostctl.act import consent
from hostctl.provision import fstab, sysctl
from hostctl.provision.storage_part import plan_text
from hostctl.safefs import sudo_owner
from hostctl.provision.storage import (
    StorageOptions,
    SystemFiles,
    layout,
    partition_path,
    plan_storage_provision,
    required_bytes,
)
from hostctl.plan.requests import tensor_parallel

HOSTS = paths.hosts_dir()
SERIAL1, SERIAL2 = "25120G800101", "25120G800102"


@pytest.fixture
def cfg():
    return load_config(HOSTS / "pro6000x2-desktop.toml")


@pytest.fixture
def facts():
    return load_snapshot(HOSTS / "pro6000x2-desktop.facts.json")


def uuids():
    counter = itertools.count(1)
    return lambda: f"00000000-0000-4000-8000-{next(counter):012d}"


def opts(**kw) -> StorageOptions:
    kw.setdefault("owner", (1000, 1000))
    kw.setdefault("new_uuid", uuids())
    return StorageOptions(**kw)


# the user's own root filesystem line, above hostctl's block
USER_FSTAB = "UUID=0b6f4c1e-6a52-4f0e-9d1b-5f2a7c3e8d10 / ext4 errors=remount-ro 0 1\n"


def desktop_files(cfg, facts) -> SystemFiles:
    return snapshots.desktop_files(cfg, facts, user_fstab=USER_FSTAB)


def disk(facts, serial: str) -> Disk:
    return next(d for d in facts.disks.devices if d.serial == serial)


def blank(facts, serial: str) -> None:
    """Make a drive of the snapshot blank: no table, nothing mounted or swapped on it."""
    d = disk(facts, serial)
    names = {p.path for p in d.partitions}
    d.partitions, d.table_type, d.table_entries = [], None, None
    d.blank = BlankProof(first_mib_zero=True, last_mib_zero=True)
    facts.mounts = [m for m in facts.mounts if m.source not in names]
    facts.memory.swaps = [s for s in facts.memory.swaps if s.path not in names]
    mount = "/mnt/hostctl/ssd1" if serial == SERIAL1 else "/mnt/hostctl/ssd2"
    facts.paths = [p for p in facts.paths if not p.path.startswith(mount)]


def with_drive(cfg, index: int, **changes):
    drives = list(cfg.profile.drives)
    data = drives[index].model_dump()
    data.update(changes)
    drives[index] = Drive.model_validate(data)
    return cfg.model_copy(update={"profile": cfg.profile.model_copy(update={"drives": drives})})


def plan(cfg, facts, files=None, **kw):
    return plan_storage_provision(cfg, facts, files if files is not None else SystemFiles(), opts(**kw))


def argvs(sp) -> list[str]:
    return [a.describe.splitlines()[0] for a in sp.actions]


# ---------------------------------------------------------------- the desktop as the report describes it


def test_the_provisioned_desktop_needs_nothing(cfg, facts):
    sp = plan(cfg, facts, desktop_files(cfg, facts))
    assert [d.status for d in sp.drives] == ["ready", "ready"]
    assert sp.actions == [] and sp.notes == []
    assert "ready, nothing to do" in plan_text(sp)


def test_the_desktop_without_hostctls_files_gets_only_file_edits(cfg, facts):
    sp = plan(cfg, facts, SystemFiles(fstab="# mine\n"))
    assert [a.step for a in sp.actions] == ["storage/fstab", "storage/sysctl"]
    edit = sp.actions[0].describe
    assert " # mine" in edit and "+UUID=9d3e0f11-2a4b-4c5d-8e6f-7a8b9c0da01 none swap pri=100,nofail 0 0" in edit
    assert "+UUID=c4f1a2b3-5d6e-4f70-8192-a3b4c5d6a02 /mnt/hostctl/ssd1 ext4 defaults,noatime,nofail 0 2" in edit
    assert not any(a.destructive for a in sp.actions)


def test_cache_directories_follow_the_invoking_user(cfg, facts):
    sp = plan(cfg, facts, desktop_files(cfg, facts), owner=(1001, 1001))
    assert argvs(sp) == ["chown 1001:1001 /mnt/hostctl/ssd1/moet-planes",
                         "chown 1001:1001 /mnt/hostctl/ssd1/compile-cache",
                         "chown 1001:1001 /mnt/hostctl/ssd1/moet-store-rank0",
                         "chown 1001:1001 /mnt/hostctl/ssd2/moet-store"]
    assert plan(cfg, facts, desktop_files(cfg, facts), owner=None).actions == []  # not under sudo: left alone
    assert sudo_owner({"SUDO_UID": "1000", "SUDO_GID": "1000"}) == (1000, 1000)
    assert sudo_owner({}) is None and sudo_owner({"SUDO_UID": "x", "SUDO_GID": "1"}) is None


def test_blank_drives_get_the_whole_layout(cfg, facts):
    files = desktop_files(cfg, facts)
    blank(facts, SERIAL1)
    blank(facts, SERIAL2)
    sp = plan(cfg, facts, files)
    assert [d.status for d in sp.drives] == ["create", "create"]
    a = argvs(sp)
    assert a[:12] == [
        "sgdisk --clear --new=1:0:+132096M --typecode=1:8200 --change-name=1:hostctl-swap-ssd1 "
        "--partition-guid=1:00000000-0000-4000-8000-000000000001 --attributes=1:set:48 "
        "--new=2:0:0 --typecode=2:8300 --change-name=2:hostctl-data-ssd1 "
        "--partition-guid=2:00000000-0000-4000-8000-000000000002 --attributes=2:set:48 /dev/nvme1n1    "
        "# bit 48: unfinished until its filesystem is made",
        "partx -u /dev/nvme1n1    # load the new table; wait for the partition nodes",
        "mkswap --label hcswap-ssd1 --uuid 00000000-0000-4000-8000-000000000001 /dev/nvme1n1p1",
        "mkfs.ext4 -q -m 0 -L hcdata-ssd1 -U 00000000-0000-4000-8000-000000000002 "
        "-E lazy_itable_init=1,lazy_journal_init=1,nodiscard /dev/nvme1n1p2",
        "sgdisk --attributes=1:clear:48 --attributes=2:clear:48 /dev/nvme1n1    # filesystems made: they may hold "
        "data now",
        "partx -u /dev/nvme1n1    # the kernel may have dropped the partitions on the table write; wait for them",
        "swapon --priority 100 /dev/nvme1n1p1",
        "mkdir -p /mnt/hostctl/ssd1",
        "mount -t ext4 -o noatime /dev/nvme1n1p2 /mnt/hostctl/ssd1",
        "mkdir -p /mnt/hostctl/ssd1/moet-planes && chown 1000:1000 /mnt/hostctl/ssd1/moet-planes",
        "mkdir -p /mnt/hostctl/ssd1/compile-cache && chown 1000:1000 /mnt/hostctl/ssd1/compile-cache",
        "mkdir -p /mnt/hostctl/ssd1/moet-store-rank0 && chown 1000:1000 /mnt/hostctl/ssd1/moet-store-rank0",
    ]
    assert [x.destructive for x in sp.actions[:7]] == [True, False, True, True, False, False, False]
    fstab_edit = next(x for x in sp.actions if x.step == "storage/fstab").describe
    assert "+UUID=00000000-0000-4000-8000-000000000001 none swap pri=100,nofail 0 0" in fstab_edit
    assert "-UUID=9d3e0f11" in fstab_edit  # the old filesystems' lines go
    assert "+UUID=00000000-0000-4000-8000-000000000004 /mnt/hostctl/ssd2 ext4 defaults,noatime,nofail 0 2" in fstab_edit


def test_xfs_and_extra_mount_options(cfg, facts):
    blank(facts, SERIAL1)
    cfg = with_drive(cfg, 0, filesystem="xfs", name="s1", mount_options=["discard"], mountpoint="/mnt/s1")
    sp = plan(cfg, facts)
    d = sp.drives[0]
    assert "mkfs.xfs -q -K -L hcdata-s1 -m uuid=00000000-0000-4000-8000-000000000002 /dev/nvme1n1p2" in argvs(sp)
    assert "mount -t xfs -o noatime,discard /dev/nvme1n1p2 /mnt/s1" in argvs(sp)
    assert d.entries[1].line() == "UUID=00000000-0000-4000-8000-000000000002 /mnt/s1 xfs defaults,noatime,nofail,discard 0 0"


def test_no_swap_partition_when_swap_is_zero(cfg, facts):
    blank(facts, SERIAL1)
    cfg = with_drive(cfg, 0, swap=0)
    assert [s.name for s in layout(cfg.profile.drives[0])] == ["hostctl-data-ssd1"]
    assert argvs(plan(cfg, facts))[0] == ("sgdisk --clear --new=1:0:0 --typecode=1:8300 --change-name=1:hostctl-data-ssd1 "
                                         "--partition-guid=1:00000000-0000-4000-8000-000000000001 "
                                         "--attributes=1:set:48 /dev/nvme1n1    # bit 48: unfinished until its "
                                         "filesystem is made")


# ---------------------------------------------------------------- half-provisioned


def test_swap_off_and_wrong_priority(cfg, facts):
    files = desktop_files(cfg, facts)
    disk(facts, SERIAL1).partitions[0].swap_active = False
    p = disk(facts, SERIAL2).partitions[0]
    p.swap_priority = 5
    sp = plan(cfg, facts, files)
    assert argvs(sp) == ["swapon --priority 100 /dev/nvme1n1p1",
                         "swapoff /dev/nvme2n1p1    # priority 5, the profile says 100",
                         "swapon --priority 100 /dev/nvme2n1p1"]
    assert [d.status for d in sp.drives] == ["converge", "converge"]


def test_unmounted_data_filesystem_is_mounted_and_its_directories_made(cfg, facts):
    files = desktop_files(cfg, facts)
    disk(facts, SERIAL2).partitions[1].mountpoints = []
    facts.mounts = [m for m in facts.mounts if m.target != "/mnt/hostctl/ssd2"]
    facts.paths = [p for p in facts.paths if not p.path.startswith("/mnt/hostctl/ssd2")]
    assert argvs(plan(cfg, facts, files)) == [
        "mkdir -p /mnt/hostctl/ssd2",
        "mount -t ext4 -o noatime /dev/nvme2n1p2 /mnt/hostctl/ssd2",
        "mkdir -p /mnt/hostctl/ssd2/moet-store && chown 1000:1000 /mnt/hostctl/ssd2/moet-store",
    ]


def test_table_without_filesystems_is_formatted_not_repartitioned(cfg, facts):
    files = desktop_files(cfg, facts)
    blank(facts, SERIAL1)
    d = disk(facts, SERIAL1)
    d.table_type, d.table_entries = "gpt", 2
    empty = FsCheck(first_mib_zero=True)  # what the probe reads on a partition whose mkfs never started
    d.partitions = [Partition(name="nvme1n1p1", path="/dev/nvme1n1p1", number=1, size_bytes=129 * 1024**3,
                              part_label="hostctl-swap-ssd1", fs_check=empty),
                    Partition(name="nvme1n1p2", path="/dev/nvme1n1p2", number=2, size_bytes=3 * 1024**4,
                              part_label="hostctl-data-ssd1", fs_check=empty)]
    a = argvs(plan(cfg, facts, files))
    assert not any(x.startswith("sgdisk") for x in a)
    assert a[0].startswith("mkswap --label hcswap-ssd1") and a[1].startswith("mkfs.ext4")
    # bytes at the start of a partition named like hostctl's, and no signature: not provably empty
    d.partitions[1].fs_check = FsCheck(first_mib_zero=False)
    sp = plan(cfg, facts, files)
    assert sp.drives[0].refused and "its first MiB is not zero" in _reasons(sp)


def test_the_unfinished_mark_is_trusted_only_for_hostctls_own_filesystem(cfg, facts):
    """A partition marked unfinished holds hostctl's interrupted mkfs only when the filesystem in
    it has the UUID the partition was created for; any other filesystem is older data."""
    files = desktop_files(cfg, facts)
    d = disk(facts, SERIAL1)
    data = d.partitions[1]
    facts.mounts = [m for m in facts.mounts if m.source != data.path]
    data.mountpoints = []
    data.part_flags, data.part_uuid = 1 << 48, data.fs_uuid  # killed between mkfs and clearing the mark
    a = argvs(plan(cfg, facts, files))
    assert any(x.startswith(f"wipefs --all {data.path}") for x in a)
    assert any(x.startswith(f"mkfs.ext4 -q -m 0 -L hcdata-ssd1 -U {data.fs_uuid}") for x in a)
    data.part_uuid = "11111111-2222-4333-8444-555555555555"  # created over an older filesystem
    a = argvs(plan(cfg, facts, files))
    assert not any(x.startswith(("wipefs", "mkfs")) for x in a)
    assert any(x.startswith("sgdisk --attributes=2:clear:48") for x in a)  # kept, and the mark cleared


def test_hostctls_label_without_its_gpt_name_is_neither_formatted_nor_adopted(cfg, facts):
    files = desktop_files(cfg, facts)
    d = disk(facts, SERIAL1)
    d.partitions[1].part_label = "home"
    sp = plan(cfg, facts, files, erase=(SERIAL1,))
    assert sp.drives[0].refused and "carries hostctl's filesystem label but not its GPT name" in _reasons(sp)


def test_a_table_the_kernel_has_not_loaded_is_loaded_first(cfg, facts):
    files = desktop_files(cfg, facts)
    blank(facts, SERIAL1)
    d = disk(facts, SERIAL1)
    d.table_type, d.table_entries = "gpt", 2
    sp = plan(cfg, facts, files)
    assert sp.replan and sp.drives[0].replan
    assert argvs(sp) == ["partx -u /dev/nvme1n1    # load the on-disk table; then re-plan"]
    assert "planned once every drive's partitions are known" in plan_text(sp)


def test_missing_data_partition_is_added_without_clearing_the_table(cfg, facts):
    files = desktop_files(cfg, facts)
    d = disk(facts, SERIAL1)
    d.partitions = d.partitions[:1]
    d.table_entries = 1
    facts.mounts = [m for m in facts.mounts if m.target != "/mnt/hostctl/ssd1"]
    facts.paths = [p for p in facts.paths if not p.path.startswith("/mnt/hostctl/ssd1")]
    a = argvs(plan(cfg, facts, files))
    assert a[0] == ("sgdisk --new=2:0:0 --typecode=2:8300 --change-name=2:hostctl-data-ssd1 "
                    "--partition-guid=2:00000000-0000-4000-8000-000000000001 --attributes=2:set:48 "
                    "/dev/nvme1n1    # bit 48: unfinished until its filesystem is made")
    disk(facts, SERIAL1).nonzero_after_partitions = ["132097 MiB"]  # a data partition deleted by hand
    sp = plan(cfg, facts, files)
    assert sp.drives[0].refused and "a partition deleted from the table by hand" in _reasons(sp)
    assert not any("mkswap" in x for x in a)


# ---------------------------------------------------------------- refusals


def _reasons(sp) -> str:
    return " | ".join(r for d in sp.refused for r in d.reasons)


def test_identity_not_found_and_ambiguous(cfg, facts):
    sp = plan(with_drive(cfg, 0, identity="serial:NOPE"), facts)
    assert sp.refused[0].drive.name == "ssd1" and "no disk on this host has identity serial:NOPE" in _reasons(sp)
    disk(facts, SERIAL2).serial = SERIAL1
    assert "matches 2 disks" in _reasons(plan(cfg, facts))


def test_root_disk_is_refused(cfg, facts):
    sp = plan(with_drive(cfg, 0, identity="serial:24374C8A1F2E"), facts, erase=("serial:24374C8A1F2E",))
    assert "carries the root or boot filesystem" in _reasons(sp)
    assert "partition /dev/nvme0n1p2 is mounted at /" in _reasons(sp)


def test_holders_are_refused(cfg, facts):
    disk(facts, SERIAL2).partitions[1].holders = ["dm-0"]
    sp = plan(cfg, facts, erase=(f"serial:{SERIAL2}",))
    assert [d.drive.name for d in sp.refused] == ["ssd2"]
    assert "partition /dev/nvme2n1p2 is in use by dm-0 (LVM, md or dm)" in _reasons(sp)
    disk(facts, SERIAL1).holders = ["md127"]
    assert "it is in use by md127" in _reasons(plan(cfg, facts))


def test_mounted_elsewhere_is_refused(cfg, facts):
    disk(facts, SERIAL1).partitions[1].mountpoints = ["/srv/elsewhere"]
    assert "partition /dev/nvme1n1p2 is mounted at /srv/elsewhere" in _reasons(plan(cfg, facts))


def test_hostctls_own_mount_plus_a_bind_is_fine(cfg, facts):
    disk(facts, SERIAL1).partitions[1].mountpoints = ["/mnt/hostctl/ssd1", "/srv/bound"]
    assert plan(cfg, facts, desktop_files(cfg, facts)).refused == []


def test_active_swap_that_is_not_hostctls_is_refused(cfg, facts):
    disk(facts, SERIAL1).partitions[0].fs_label = "someone-else"
    assert "active swap that hostctl did not create" in _reasons(plan(cfg, facts, erase=(SERIAL1,)))


def test_smaller_than_the_layout_is_refused(cfg, facts):
    blank(facts, SERIAL1)
    disk(facts, SERIAL1).size_bytes = 100 * 1024**3
    assert required_bytes(cfg.profile.drives[0]) == (1 + 129 * 1024 + 32 + 1) * 1024**2
    assert "smaller than the layout: 100 GiB" in _reasons(plan(cfg, facts))


def test_mount_point_taken_is_refused(cfg, facts):
    blank(facts, SERIAL1)
    facts.mounts.append(MountEntry(source="/dev/sdz1", target="/mnt/hostctl/ssd1", fs_type="ext4", options="rw"))
    assert "its mount point /mnt/hostctl/ssd1 is taken by /dev/sdz1" in _reasons(plan(cfg, facts))


@pytest.mark.parametrize("erase_arg", [f"serial:{SERIAL1}", SERIAL1])
def test_foreign_table_needs_erase_naming_that_drive(cfg, facts, erase_arg):
    blank(facts, SERIAL1)
    d = disk(facts, SERIAL1)
    d.table_type, d.table_entries = "dos", 1
    d.partitions = [Partition(name="nvme1n1p1", path="/dev/nvme1n1p1", number=1, size_bytes=10**9, fs_type="ntfs",
                              fs_label="Games")]
    sp = plan(cfg, facts)
    assert "it holds a dos partition table; partition /dev/nvme1n1p1: ntfs 'Games'" in _reasons(sp)
    assert sp.refused[0].fix == f"if that may be destroyed, re-run with --erase serial:{SERIAL1}"
    assert plan(cfg, facts, erase=(f"serial:{SERIAL2}",)).refused  # the other drive's identity is not enough
    sp = plan(cfg, facts, erase=(erase_arg,))
    assert not sp.refused and sp.drives[0].status == "erase"
    assert argvs(sp)[:4] == ["wipefs --all /dev/nvme1n1p1", "wipefs --all /dev/nvme1n1", "sgdisk --zap-all /dev/nvme1n1",
                             argvs(sp)[3]]
    assert argvs(sp)[3].startswith("sgdisk --clear")
    assert "ERASE and lay out" in plan_text(sp)


def test_whole_disk_filesystem_is_foreign(cfg, facts):
    blank(facts, SERIAL1)
    disk(facts, SERIAL1).fs_type = "btrfs"
    assert "a btrfs filesystem on the whole disk" in _reasons(plan(cfg, facts))


def test_hostctls_label_on_a_whole_disk_filesystem_wins_over_erase(cfg, facts):
    blank(facts, SERIAL1)
    d = disk(facts, SERIAL1)
    d.fs_type, d.fs_label = "ext4", "hcdata-ssd1"
    sp = plan(cfg, facts, erase=(SERIAL1,))
    v = sp.drives[0]
    assert v.status == "refused" and v.found == "hostctl's label on a whole disk" and v.actions == []
    assert f"wipefs --all {d.path}" in v.fix
    d.fs_label = "photos"  # the same filesystem under a label of its own is the user's to erase
    assert plan(cfg, facts, erase=(SERIAL1,)).drives[0].status == "erase"


def test_hostctl_data_is_never_erased_to_change_the_layout(cfg, facts):
    sp = plan(with_drive(cfg, 0, swap="64GiB"), facts, erase=(SERIAL1,))
    assert "hostctl never formats its own partitions again, with or without --erase" in _reasons(sp)
    assert "/dev/nvme1n1p1 is hostctl's swap partition of 129 GiB and the profile asks for 64 GiB" in _reasons(sp)
    assert 'Keep swap = "132096MiB"' in _reasons(sp)


def test_a_refusal_stops_fstab_and_sysctl_decisions(cfg, facts):
    sp = plan(with_drive(cfg, 1, identity="serial:NOPE"), facts)
    assert sp.system == [] and sp.refused


def test_erase_naming_no_drive_is_bad_input(cfg, facts):
    with pytest.raises(InputError, match="--erase serial:X: names no drive"):
        plan(cfg, facts, erase=("serial:X",))


# ---------------------------------------------------------------- identity, names, sizes


def test_identity_forms():
    d = Disk(name="nvme1n1", path="/dev/nvme1n1", serial="S1", wwn="eui.ABC", by_id=["nvme-Model_S1"])

    def matches(identity: str) -> bool:
        ident = Drive(name="x", identity=identity).identity
        return resolve_identity(ident.kind, ident.value, DiskFacts(devices=[d])).disks == [d]

    assert matches("serial:S1") and not matches("serial:s1")
    assert matches("wwn:EUI.abc")
    assert matches("by-id:nvme-Model_S1") and matches("by-id:/dev/disk/by-id/nvme-Model_S1")
    assert matches("path:/dev/nvme1n1") and not matches("path:/dev/nvme1n")


def test_partition_paths():
    assert partition_path("/dev/nvme0n1", 2) == "/dev/nvme0n1p2"
    assert partition_path("/dev/loop7", 1) == "/dev/loop7p1"
    assert partition_path("/dev/sda", 2) == "/dev/sda2"


def test_drive_names_fit_their_labels():
    Drive(name="abcdefghi", identity="serial:x")  # 9: hcdata-abcdefghi is ext4's 16 bytes
    with pytest.raises(ValueError):
        Drive(name="abcdefghij", identity="serial:x")
    Drive(name="abcde", identity="serial:x", filesystem="xfs")
    with pytest.raises(ValueError, match="xfs label holds 12 bytes"):
        Drive(name="abcdef", identity="serial:x", filesystem="xfs")
    with pytest.raises(ValueError, match="mount option"):
        Drive(name="a", identity="serial:x", mount_options=["discard,ro"])


def test_tensor_parallel_size_comes_from_the_recipe(cfg):
    assert tensor_parallel(cfg.recipe) == 2


# ---------------------------------------------------------------- fstab, sysctl, consent


def test_fstab_block_keeps_user_lines_and_replaces_only_its_own():
    e1 = fstab.Entry(spec="UUID=a", file="/mnt/hostctl/x y", vfstype="ext4", options="defaults,noatime,nofail", passno=2)
    e2 = fstab.Entry(spec="UUID=b", file="none", vfstype="swap", options="pri=100,nofail")
    user = "# static file system information\nUUID=root / ext4 defaults 0 1\n"
    once = fstab.with_block(user, [e1])
    assert once.startswith(user) and "UUID=a /mnt/hostctl/x\\040y ext4 defaults,noatime,nofail 0 2" in once
    twice = fstab.with_block(once + "tmpfs /tmp tmpfs defaults 0 0\n", [e2])
    assert twice.startswith(user) and twice.endswith("tmpfs /tmp tmpfs defaults 0 0\n")
    assert fstab.current_block(twice) == ["UUID=b none swap pri=100,nofail 0 0"]
    assert fstab.with_block(twice, [e2]) == twice
    assert fstab.with_block(twice, []) == user + "tmpfs /tmp tmpfs defaults 0 0\n"
    assert fstab.with_block(None, [e2]) == fstab.render_block([e2])


def test_a_damaged_fstab_block_is_not_guessed_at():
    with pytest.raises(FailedError, match="damaged hostctl block: 1 BEGIN and 0 END"):
        fstab.with_block(fstab.BEGIN + "\nUUID=a none swap sw 0 0\n/dev/sdb1 /srv ext4 defaults 0 2\n", [])


def test_user_fstab_lines_naming_hostctls_filesystems_are_reported():
    text = "UUID=abc /mnt/old ext4 defaults 0 2\n/dev/nvme1n1p1 none swap sw 0 0\nLABEL=x /mnt/hostctl/ssd1 ext4 defaults 0 2\n"
    notes = fstab.user_lines_touching(text, {"abc"}, {"/mnt/hostctl/ssd1"}, {"/dev/nvme1n1p1"})
    assert len(notes) == 3 and "line 1" in notes[0] and "remove it" in notes[0]


def test_user_fstab_duplicates_become_plan_notes(cfg, facts):
    files = desktop_files(cfg, facts)
    files.fstab = "UUID=c4f1a2b3-5d6e-4f70-8192-a3b4c5d6a02 /data ext4 defaults 0 2\n" + files.fstab
    sp = plan(cfg, facts, files)
    assert sp.actions == [] and "line 1" in sp.notes[0]


def test_sysctl_values_follow_the_phase(cfg):
    assert sysctl.desired(cfg.profile) == {"vm.swappiness": 10, "vm.page-cluster": 0}
    converting = cfg.profile.model_copy(update={"phase": "converting"})
    assert sysctl.desired(converting) == {"vm.swappiness": 100, "vm.page-cluster": 0}
    assert sysctl.apply_argv({"vm.swappiness": 100, "vm.page-cluster": 0}) == \
        ["sysctl", "-w", "vm.swappiness=100", "vm.page-cluster=0"]
    assert "vm.swappiness = 100\nvm.page-cluster = 0\n" in sysctl.render(converting, sysctl.desired(converting))


def test_runtime_sysctls_are_applied_when_they_differ(cfg, facts):
    files = desktop_files(cfg, facts)
    facts.memory.swappiness = 60
    assert argvs(plan(cfg, facts, files)) == ["sysctl -w vm.swappiness=10 vm.page-cluster=0    "
                                              "# now: vm.swappiness=60, vm.page-cluster=0"]


class Terminal(io.StringIO):
    """What consent needs of stdin: a line to read, and whether it is a terminal."""

    def __init__(self, text: str, tty: bool = True):
        super().__init__(text)
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


REQUEST = consent.Request(drive="ssd1", identity=f"serial:{SERIAL1}", answer=SERIAL1, what="writes a partition table on /dev/nvme1n1")


def test_consent():
    err = io.StringIO()
    consent.obtain([REQUEST], yes=False, stdin=Terminal(SERIAL1 + "\n"), stderr=err)
    assert f"Type {SERIAL1} to continue" in err.getvalue()
    consent.obtain([REQUEST], yes=True, stdin=Terminal("", tty=False), stderr=err)
    consent.obtain([], yes=False, stdin=Terminal("", tty=False), stderr=err)
    with pytest.raises(RefusedError, match="stdin is not a terminal"):
        consent.obtain([REQUEST], yes=False, stdin=Terminal(SERIAL1 + "\n", tty=False), stderr=err)
    with pytest.raises(RefusedError, match="consent for ssd1 not given"):
        consent.obtain([REQUEST], yes=False, stdin=Terminal("ssd1\n"), stderr=err)


# ---------------------------------------------------------------- storage facts, verified copies


def test_storage_facts_say_what_they_did_not_read(tmp_path):
    from hostctl.facts import collect_storage

    f = collect_storage([(str(tmp_path), True)])
    assert not f.gpus.available and "not read" in f.gpus.reason and not f.engine.available
    assert f.paths[0].exists and f.paths[0].files == [] and f.paths[0].owner_uid == os.getuid()
    assert any("storage facts only" in n for n in f.notes)


def test_copy_verified_keeps_the_originals_time_and_leaves_no_partial(tmp_path):
    from hostctl.provision.rankstores import _Progress, copy_verified
    from hostctl.safefs import TEMP_MARK

    src, dst_dir = tmp_path / "a.rank0of2.pack", tmp_path / "rank0"
    src.write_bytes(os.urandom(5 << 20))
    os.utime(src, ns=(1_600_000_000_000_000_000, 1_600_000_000_123_456_789))
    dst_dir.mkdir()
    assert copy_verified(src, dst_dir / src.name, _Progress(io.StringIO()), "rank 0") == 5 << 20
    assert (dst_dir / src.name).read_bytes() == src.read_bytes()
    assert (dst_dir / src.name).stat().st_mtime_ns == src.stat().st_mtime_ns
    assert os.listdir(dst_dir) == [src.name] and not [n for n in os.listdir(dst_dir) if TEMP_MARK in n]


def test_storage_facts_are_read_again_when_a_mount_finishes_while_the_disks_are_checked(monkeypatch):
    """The disks' read-only checks judge partitions the mount table said were free; a mount that
    finished meanwhile (a killed run's mount(2) completing in the kernel) made xfs_repair -n refuse
    "a mounted and writable filesystem", read as damage. The facts are then read again, at one
    moment: the mount table, and the checks, as they are after the mount."""
    import hostctl.facts as facts
    from hostctl.facts.records import DiskFacts, MountEntry
    from hostctl.facts.mounts import MountLine

    before: list = []
    after = [MountLine(dev="7:2", root="/", entry=MountEntry(source="/dev/loop0p2", target="/mnt/d1", fs_type="xfs",
                                                              options="rw"))]
    tables = iter([before, after, after, after])  # the mount lands while the disks are read the first time
    probed = []

    def probe_disks(mounts, *_args):
        probed.append(list(mounts))
        return DiskFacts(available=False, reason="a stand-in: this test is about when the facts are read")

    monkeypatch.setattr(facts, "read_mountinfo", lambda: next(tables), raising=False)
    monkeypatch.setattr(facts, "probe_disks", probe_disks, raising=False)
    f = facts.collect_storage()
    assert probed == [before, after]  # read again once, then the table held still
    assert [m.target for m in f.mounts] == ["/mnt/d1"]


# ---------------------------------------------------------------- a torn table of hostctl's


def _gpt_bytes(names_attrs: list[tuple[str, int]]) -> bytes:
    """A standard GPT entry array (128 x 128 bytes) naming the given partitions."""
    from hostctl.facts.disks import GPT_ENTRY
    array = bytearray(128 * 128)
    for i, (name, attrs) in enumerate(names_attrs):
        GPT_ENTRY.pack_into(array, i * 128, b"\x01" * 16, bytes([i + 1]) * 16, 2048 * (i + 1), 2048 * (i + 2) - 1,
                            attrs, name.encode("utf-16-le"))
    return bytes(array)


def test_gpt_traces_are_read_where_no_header_survives_and_where_one_does():
    from hostctl.facts.disks import GPT_MAGIC, gpt_traces
    size, mib = 64 << 20, 1 << 20
    array = _gpt_bytes([("hostctl-swap-d1", 1 << 48), ("hostctl-data-d1", 1 << 48)])
    head, tail = bytearray(mib), bytearray(mib)
    tail[mib - 512 - len(array):mib - 512] = array  # only the backup array: no header yet
    assert [(t.where, t.name, t.attributes) for t in gpt_traces(bytes(head), bytes(tail), size)] == [
        ("backup", "hostctl-swap-d1", 1 << 48), ("backup", "hostctl-data-d1", 1 << 48)]
    # a primary header that puts its array at LBA 4, not the standard LBA 2
    head[512:520] = GPT_MAGIC
    head[512 + 72:512 + 88] = (4).to_bytes(8, "little") + (128).to_bytes(4, "little") + (128).to_bytes(4, "little")
    head[2048:2048 + len(array)] = array
    found = gpt_traces(bytes(head), bytes(tail), size)
    assert sorted((t.where, t.name) for t in found) == [("backup", "hostctl-data-d1"), ("backup", "hostctl-swap-d1"),
                                                       ("primary", "hostctl-data-d1"), ("primary", "hostctl-swap-d1")]
    assert gpt_traces(bytes(mib), bytes(mib), size) == []


def _torn(facts, *, attrs: int = 1 << 48, **proof):
    from hostctl.facts.records import GptEntryTrace
    blank(facts, SERIAL1)
    d = disk(facts, SERIAL1)
    d.blank = BlankProof(**{"last_mib_zero": False, "first_mib_zero": True, "backup_gpt": True,
                            "outside_gpt_zero": True, "signatures": ["gpt at 0x1d1c1115e00"], **proof})
    d.gpt_traces = [GptEntryTrace(where="backup", name=f"hostctl-{r}-ssd1", attributes=attrs) for r in ("swap", "data")]
    return d


def test_a_table_write_stopped_part_way_is_written_again(cfg, facts):
    files = desktop_files(cfg, facts)
    d = _torn(facts)
    sp = plan(cfg, facts, files)
    v = sp.drives[0]
    assert v.status == "create" and "its write stopped part-way" in v.found
    assert argvs(sp)[:3] == [f"wipefs --all {d.path}    # the torn table", f"sgdisk --zap-all {d.path}",
                             argvs(sp)[2]] and argvs(sp)[2].startswith("sgdisk --clear --new=1:0:")


@pytest.mark.parametrize("what", ["finished", "another signature", "bytes inside", "bytes outside the GPT",
                                  "a foreign entry"])
def test_a_torn_table_of_hostctls_that_may_hold_data_is_refused_with_or_without_erase(cfg, facts, what):
    from hostctl.facts.records import GptEntryTrace
    files = desktop_files(cfg, facts)
    d = _torn(facts, **{"finished": {"attrs": 0}, "another signature": {"signatures": ["gpt at 0x200", "xfs at 0x0"]},
                        "bytes inside": {"sampled_nonzero": ["0 MiB", "4096 MiB"]},
                        "bytes outside the GPT": {"outside_gpt_zero": False}}.get(what, {}))
    if what == "a foreign entry":
        d.gpt_traces.append(GptEntryTrace(where="backup", name="photos"))
    for erase in ((), (str(cfg.profile.drives[0].identity),)):
        sp = plan(cfg, facts, files, erase=erase)
        v = sp.drives[0]
        assert v.status == "refused" and v.actions == [], what
        assert "never formats its own partitions, with or without --erase" in v.reasons[0]
        assert f"gdisk {d.path}" in v.fix and "rebuild the primary table from the backup" in v.fix


def test_a_foreign_backup_table_is_not_hostctls(cfg, facts):
    from hostctl.facts.records import GptEntryTrace
    files = desktop_files(cfg, facts)
    d = _torn(facts)
    d.gpt_traces = [GptEntryTrace(where="backup", name="photos")]
    v = plan(cfg, facts, files).drives[0]
    assert v.status == "refused" and "--erase" in v.fix and "gdisk" not in v.fix
    # --erase does apply to a table that is not hostctl's
    assert plan(cfg, facts, files, erase=(str(cfg.profile.drives[0].identity),)).drives[0].status == "erase"


# ---------------------------------------------------------------- the plan says what provision will refuse


def test_the_plan_reports_what_provision_would_refuse(cfg, facts):
    from hostctl.plan import build_plan
    from hostctl.provision.storage import add_drive_problems

    def errors(config):
        plan = add_drive_problems(build_plan(config, facts), config, facts)
        return [(p.code, p.message) for p in plan.errors]

    assert errors(cfg) == []  # the provisioned desktop: nothing to refuse
    by_id = disk(facts, SERIAL1).by_id[0]
    same = with_drive(cfg, 1, identity=f"by-id:{by_id}")  # the second drive names the first one's disk
    assert [c for c, _ in errors(same)] == ["storage.drives.invalid"]
    assert "are the same disk" in errors(same)[0][1]
    huge = with_drive(cfg, 0, swap="99999999999999999999TiB")
    (code, message), = errors(huge)
    assert code == "storage.drive.refused" and "provision would refuse drive ssd1" in message
    assert "it is smaller than the layout" in message


def test_a_drive_the_facts_do_not_hold_is_an_error_on_the_host_and_a_warning_on_a_snapshot(cfg, facts):
    from hostctl.plan import build_plan
    from hostctl.provision.storage import add_drive_problems

    missing = with_drive(cfg, 1, identity="serial:NOT-FITTED-YET")
    for snapshot, severity in ((False, "error"), (True, "warn")):
        plan = add_drive_problems(build_plan(missing, facts), missing, facts, snapshot=snapshot)
        found = [(p.code, p.severity) for p in plan.storage.problems if p.code.startswith("storage.drive")]
        assert found == [("storage.drive.unresolved", severity)], found
    # on a snapshot too, what the disk that is there holds still refuses
    huge = with_drive(missing, 0, swap="99999999999999999999TiB")
    plan = add_drive_problems(build_plan(huge, facts), huge, facts, snapshot=True)
    assert [p.code for p in plan.errors] == ["storage.drive.refused"]


def test_doctor_fails_the_drives_check_with_the_plans_error(cfg, facts):
    from hostctl.doctor.checks.storage import drives
    from hostctl.doctor.registry import CheckContext
    from hostctl.plan import build_plan
    from hostctl.provision.storage import add_drive_problems

    huge = with_drive(cfg, 0, swap="99999999999999999999TiB")
    for config, status in ((cfg, "pass"), (huge, "fail")):
        plan = add_drive_problems(build_plan(config, facts), config, facts)
        result = drives(CheckContext(facts=facts, config=config, plan=plan, level="quick", facts_source="snapshot"))
        assert result.status == status, result


def test_a_snapshot_with_two_gpus_at_one_index_is_bad_input(tmp_path, facts):

    doc = facts.model_dump(mode="json", by_alias=True)
    doc["gpus"]["devices"][1]["index"] = 0
    path = tmp_path / "two-zero.facts.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(InputError) as err:
        load_snapshot(path)
    assert "gpus.devices" in err.value.render() and "two GPUs have index 0" in err.value.render()


def test_disks_that_could_not_be_read_are_not_called_missing(cfg, facts):
    facts.disks = DiskFacts(available=False, reason="disk probe failed: TypeError: boom")
    sp = plan(cfg, facts)
    assert [v.found for v in sp.drives] == ["disks not read"] * len(cfg.profile.drives)
    assert "could not be read (disk probe failed: TypeError: boom)" in _reasons(sp)
    assert "no disk on this host has identity" not in _reasons(sp)
