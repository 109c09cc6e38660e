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

from conftest import (CACHE_DIRS, DRIVES, INSTALLED_PROFILE, PROFILE, RECIPE, SKIPPED_RESULT, SPARE,
                      SWAP_PRIORITY, by_id, hostctl, lsblk, mount_of, partition, sh, sha256, unit_props)

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


# ---------------------------------------------------------------- the host, as provisioned


@pytest.mark.usefixtures("storage_ready")
def test_verify_proves_the_host_matches_the_plan(shared):
    """`hostctl verify`: every part decides no action on fresh facts, and its testinfra suite
    (mounts with sources and options, swaps with priorities, the fstab block, the sysctl file and
    live values, the cache directories on their drives, the installed profile, recipe and units,
    both units enabled) passes; the power limits skip: no driver in the guest."""
    res = hostctl("--config", str(PROFILE), "verify", "--json", "--only", "storage,system,gpu")
    shared["boot1_verify"] = res.returncode
    assert res.stdout, f"exit {res.returncode}: {res.stderr}"
    doc = json.loads(res.stdout)
    checks = {c["id"]: c for c in doc["checks"]}
    failed = [f"{c['id']}: {c['found']} (expected {c['expected']})" for c in checks.values() if c["status"] == "fail"]
    assert res.returncode == 0 and not failed, "\n".join(failed) or res.stderr
    assert {p["part"]: p["status"] for p in doc["parts"]} == {"storage": "pass", "system": "pass", "gpu": "pass"}
    expected = ["storage/converged", "storage/fstab", "storage/sysctl", "storage/sysctl/vm.swappiness",
                "storage/sysctl/vm.page-cluster", "system/converged", f"system/file{INSTALLED_PROFILE}",
                f"system/file{INSTALLED_PROFILE.parent / RECIPE.name}", "system/enabled/hostctl-runtime.service",
                "gpu/converged", "gpu/power-unit"]
    expected += [f"storage/{d}/{what}" for d in DRIVE_NAMES for what in ("mount", "swap")]
    expected += [f"storage/dirs/{role}" for role in CACHE_DIRS]
    assert {i: checks[i]["status"] for i in expected if i in checks} == {i: "pass" for i in expected}
    assert checks["gpu/power/0"]["status"] == "skip" and checks["gpu/power/0"]["found"].startswith("no driver")
    for role, directory in CACHE_DIRS.items():  # root's: provision ran without sudo (no SUDO_UID)
        assert checks[f"storage/dirs/{role}"]["found"].startswith(f"{directory} is a directory (owner 0:0)")
    assert checks["storage/ssd1/swap"]["found"].endswith(f"at priority {SWAP_PRIORITY}")


@pytest.mark.usefixtures("storage_ready")
@pytest.mark.parametrize("drive", DRIVE_NAMES)
def test_partitions_carry_hostctl_names_and_labels(drive):
    swap, data = partition(drive, "swap"), partition(drive, "data")
    assert (swap["fstype"], swap["label"]) == ("swap", f"hcswap-{drive}")
    assert (data["fstype"], data["label"]) == ("ext4", f"hcdata-{drive}")


@pytest.mark.usefixtures("storage_ready")
def test_fstab_does_not_name_the_drives_by_kernel_name():
    entries = [ln.split() for ln in Path("/etc/fstab").read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    assert not [e for e in entries if e[0].startswith("/dev/nvme")], "fstab must not use kernel names for the drives"


@pytest.mark.usefixtures("storage_ready")
@pytest.mark.parametrize("drive", DRIVE_NAMES)
def test_write_a_file_on_each_data_partition(shared, drive):
    path = Path(mount_of(drive)) / "vmtest-canary.bin"
    path.write_bytes(os.urandom(4 * 1024 * 1024))
    os.sync()
    shared[f"canary_{drive}"] = sha256(path)


# ---------------------------------------------------------------- units at boot


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
