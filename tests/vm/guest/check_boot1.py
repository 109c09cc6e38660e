"""Boot 1 of the whole-host test, inside the guest: the drives are found by serial through
udev, `hostctl provision` (storage, then system) runs as a user would run it, and the host
it leaves is checked with testinfra; then a file is written on each data partition. The
driver reboots the guest afterwards; check_boot2.py checks what came back.

Tests run in file order and depend on it (provision first, then the checks).
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from conftest import (CACHE_DIRS, DRIVES, INSTALLED_PROFILE, PAGE_CLUSTER, PROFILE, RECIPE,
                      SKIPPED_RESULT, SPARE, SWAP_PRIORITY, SWAPPINESS, UNITS, by_id, hostctl, lsblk, mount_of,
                      partition, sh, sha256, swaps, unit_props)

DRIVE_NAMES = sorted(DRIVES)


def test_this_is_the_test_guest(shared):
    assert "hostctl.vmtest=storage" in Path("/proc/cmdline").read_text()
    assert sh(["systemd-detect-virt", "--vm"], check=False).stdout.strip() == "qemu"
    shared["boot1_id"] = Path("/proc/sys/kernel/random/boot_id").read_text().strip()


@pytest.mark.parametrize("serial", sorted(DRIVES.values()) + [SPARE])
def test_nvme_drives_are_found_by_serial_through_udev(serial):
    link = by_id(serial)
    assert link.is_symlink(), f"udev made no {link}"
    dev = link.resolve()
    assert re.fullmatch(r"nvme\dn1", dev.name), dev
    assert Path(f"/sys/block/{dev.name}/device/serial").read_text().strip() == serial
    assert lsblk(dev) == [] or serial == SPARE, f"{serial} should be blank before provision: {lsblk(dev)}"


def test_fingerprint_the_drive_the_profile_does_not_name(shared):
    shared["spare_sha256"] = sha256(by_id(SPARE))
    shared["spare_table"] = sh(["sfdisk", "-d", str(by_id(SPARE).resolve())]).stdout


def test_hostctl_runs_from_the_installed_wheel():
    res = hostctl("--version")
    assert res.returncode == 0 and res.stdout.startswith("hostctl "), res.stderr
    probe = sh(["/opt/hostctl/bin/python3", "-c",
                "import hostctl, hostctl.paths as p; print(hostctl.__file__); print(p.resource_root())"]).stdout.split()
    assert probe[0].startswith("/opt/hostctl/lib/python3"), probe
    assert probe[1] == "/opt/hostctl/share/hostctl", probe  # templates and recipes from the wheel's data files
    assert os.path.realpath("/usr/local/bin/hostctl") == "/opt/hostctl/bin/hostctl"


def test_facts_identify_the_drives_by_serial_from_udev():
    res = hostctl("--config", str(PROFILE), "facts", "--json")
    assert res.returncode == 0, res.stderr
    disks = json.loads(res.stdout)["disks"]
    assert disks["available"] and disks["source"] == "udev", disks.get("source_reason")
    found = {d["serial"]: d for d in disks["devices"] if d.get("serial")}
    for serial in list(DRIVES.values()) + [SPARE]:
        assert serial in found, f"no disk with serial {serial} in facts: {sorted(found)}"
        assert f"nvme-QEMU_NVMe_Ctrl_{serial}" in found[serial]["by_id"]
        assert not found[serial]["is_root_disk"]
    root = [d for d in disks["devices"] if d["is_root_disk"]]
    assert [d["name"] for d in root] == ["vda"]


def test_provision_storage(shared):
    res = hostctl("--config", str(PROFILE), "provision", "--only", "storage", "--yes")
    shared["storage"] = f"failed: exit {res.returncode}"
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    shared["storage"] = "provisioned"


def test_provision_system():
    res = hostctl("--config", str(PROFILE), "provision", "--only", "system")
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout}\n{res.stderr}"


def test_provision_gpu_from_the_installed_profile():
    """The recommended order: `--only system` installs the profile in /etc, then the gpu part
    runs from there, so the power unit reads the same profile as the runtime unit."""
    res = hostctl("--config", str(INSTALLED_PROFILE), "provision", "--only", "gpu", "--yes")
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    assert re.search(r"^skip\b.*no (NVIDIA )?driver", res.stdout, re.M | re.I), res.stdout


# ---------------------------------------------------------------- storage, as provisioned


@pytest.mark.usefixtures("storage_ready")
@pytest.mark.parametrize("drive", DRIVE_NAMES)
def test_partitions_carry_hostctl_names_and_labels(drive):
    swap, data = partition(drive, "swap"), partition(drive, "data")
    assert (swap["fstype"], swap["label"]) == ("swap", f"hcswap-{drive}")
    assert (data["fstype"], data["label"]) == ("ext4", f"hcdata-{drive}")


@pytest.mark.usefixtures("storage_ready")
@pytest.mark.parametrize("drive", DRIVE_NAMES)
def test_data_partition_is_mounted(host, drive):
    mp = host.mount_point(mount_of(drive))
    assert mp.exists, f"{mount_of(drive)} is not mounted"
    assert mp.filesystem == "ext4"
    assert os.path.realpath(mp.device) == partition(drive, "data")["path"]


@pytest.mark.usefixtures("storage_ready")
def test_swap_partitions_active_with_equal_priority():
    active = swaps()
    for drive in DRIVE_NAMES:
        dev = partition(drive, "swap")["path"]
        assert active.get(dev) == SWAP_PRIORITY, f"{drive} swap {dev}: {active}"


@pytest.mark.usefixtures("storage_ready")
def test_fstab_names_partitions_by_uuid_with_nofail():
    entries = [ln.split() for ln in Path("/etc/fstab").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    by_spec = {e[0]: e for e in entries}
    assert not [e for e in entries if e[0].startswith("/dev/nvme")], "fstab must not use kernel names for the drives"
    for drive in DRIVE_NAMES:
        data, swap = partition(drive, "data"), partition(drive, "swap")
        d = by_spec.get(f"UUID={data['uuid']}")
        assert d is not None, f"no fstab line for {drive}'s data partition UUID={data['uuid']}"
        assert d[1:3] == [mount_of(drive), "ext4"] and "nofail" in d[3].split(","), d
        s = by_spec.get(f"UUID={swap['uuid']}")
        assert s is not None, f"no fstab line for {drive}'s swap partition UUID={swap['uuid']}"
        assert s[2] == "swap" and "nofail" in s[3].split(",") and f"pri={SWAP_PRIORITY}" in s[3].split(","), s


@pytest.mark.usefixtures("storage_ready")
def test_swap_sysctls_set_and_persisted(host):
    assert host.sysctl("vm.swappiness") == SWAPPINESS
    assert host.sysctl("vm.page-cluster") == PAGE_CLUSTER
    persisted = "".join(p.read_text() for p in sorted(Path("/etc/sysctl.d").glob("*.conf")))
    assert re.search(rf"^vm\.swappiness\s*=\s*{SWAPPINESS}\s*$", persisted, re.M), persisted
    assert re.search(rf"^vm\.page-cluster\s*=\s*{PAGE_CLUSTER}\s*$", persisted, re.M), persisted


@pytest.mark.usefixtures("storage_ready")
@pytest.mark.parametrize("role", sorted(CACHE_DIRS))
def test_cache_directories_exist_with_owner(host, role):
    d = host.file(CACHE_DIRS[role])
    assert d.is_directory, CACHE_DIRS[role]
    assert (d.user, d.group) == ("root", "root")
    if CACHE_DIRS[role].startswith("/mnt/hostctl/"):
        drive = CACHE_DIRS[role].split("/")[3]
        assert sh(["findmnt", "-n", "-o", "TARGET", "-T", CACHE_DIRS[role]]).stdout.strip() == mount_of(drive)


@pytest.mark.usefixtures("storage_ready")
@pytest.mark.parametrize("drive", DRIVE_NAMES)
def test_write_a_file_on_each_data_partition(shared, drive):
    path = Path(mount_of(drive)) / "vmtest-canary.bin"
    path.write_bytes(os.urandom(4 * 1024 * 1024))
    os.sync()
    shared[f"canary_{drive}"] = sha256(path)


# ---------------------------------------------------------------- system, as provisioned


def test_profile_and_recipe_installed():
    assert INSTALLED_PROFILE.read_bytes() == PROFILE.read_bytes()
    assert (INSTALLED_PROFILE.parent / RECIPE.name).read_bytes() == RECIPE.read_bytes()


@pytest.mark.parametrize("unit", UNITS)
def test_units_installed_and_enabled(host, unit):
    assert host.file(f"/etc/systemd/system/{unit}").is_file
    assert host.service(unit).is_enabled
    assert "--config /etc/hostctl/hostctl.toml" in host.file(f"/etc/systemd/system/{unit}").content_string


def test_runtime_unit_requires_the_cache_mounts():
    value = sh(["systemctl", "show", "-p", "RequiresMountsFor", "--value", "hostctl-runtime.service"]).stdout.split()
    assert sorted(value) == sorted(mount_of(d) for d in DRIVE_NAMES)


def test_power_unit_started_now_is_skipped_by_its_condition():
    """No NVIDIA driver in the guest: starting the unit is a clean skip, not a failure."""
    assert not Path("/proc/driver/nvidia/version").exists()
    sh(["systemctl", "start", "hostctl-power.service"])
    p = unit_props("hostctl-power.service")
    assert (p["ConditionResult"], p["ActiveState"], p["Result"]) == ("no", "inactive", SKIPPED_RESULT), p
    assert int(p["ExecMainStartTimestampMonotonic"]) == 0, f"ExecStart (hostctl) ran: {p}"
    assert sh(["systemctl", "is-failed", "hostctl-power.service"], check=False).returncode != 0
