"""Boot 2 of the whole-host test, inside the guest, after one real reboot: what provision set
up in boot 1 came back by itself (`hostctl verify`: fstab mounts and swap, sysctls, files and
units, every part converged; the units started or skipped by systemd at boot), the files written
in boot 1 are intact, running provision again changes nothing, and the drive the profile does not
name still has its original bytes.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from conftest import (CACHE_DIRS, DRIVES, INSTALLED_PROFILE, PROFILE, SKIPPED_RESULT, SPARE, by_id, hostctl,
                      mount_of, partition, sh, sha256, swaps, unit_props, wait_until)

DRIVE_NAMES = sorted(DRIVES)


def test_this_is_a_second_boot(shared):
    assert "hostctl.vmtest=storage" in Path("/proc/cmdline").read_text()
    assert shared.get("boot1_id"), "boot 1 left no boot id"
    assert Path("/proc/sys/kernel/random/boot_id").read_text().strip() != shared["boot1_id"]


@pytest.mark.usefixtures("storage_ready")
def test_mounts_and_swaps_come_up_from_fstab(host):
    """nofail mounts and swaps may still be coming up when multi-user.target is reached: wait for
    them (what they are is verify's to judge, next)."""
    for drive in DRIVE_NAMES:
        wait_until(f"{mount_of(drive)} mounted", lambda d=drive: host.mount_point(mount_of(d)).exists)
    want = {partition(d, "swap")["path"] for d in DRIVE_NAMES}
    wait_until("both swap partitions active", lambda: want <= set(swaps()))


@pytest.mark.usefixtures("storage_ready")
def test_verify_proves_the_host_came_back_as_planned():
    """After the reboot, with nothing run but systemd: every part still decides no action, and the
    mounts, swaps at their priority, sysctls, files and enabled units all pass."""
    res = hostctl("--config", str(PROFILE), "verify", "--json", "--only", "storage,system,gpu")
    assert res.stdout, f"exit {res.returncode}: {res.stderr}"
    doc = json.loads(res.stdout)
    failed = [f"{c['id']}: {c['found']} (expected {c['expected']})" for c in doc["checks"] if c["status"] == "fail"]
    assert res.returncode == 0 and not failed, "\n".join(failed) or res.stderr
    assert {p["part"]: p["status"] for p in doc["parts"]} == {"storage": "pass", "system": "pass", "gpu": "pass"}
    ran = {c["id"] for c in doc["checks"] if c["status"] == "pass"}
    assert {f"storage/{d}/{what}" for d in DRIVE_NAMES for what in ("mount", "swap")} <= ran
    assert {"storage/sysctl/vm.swappiness", "system/enabled/hostctl-runtime.service", "gpu/power-unit"} <= ran


@pytest.mark.usefixtures("storage_ready")
@pytest.mark.parametrize("drive", DRIVE_NAMES)
def test_file_written_before_the_reboot_is_intact(shared, drive):
    wait_until(f"{mount_of(drive)} mounted", lambda: os.path.ismount(mount_of(drive)))
    assert sha256(Path(mount_of(drive)) / "vmtest-canary.bin") == shared[f"canary_{drive}"]


def test_power_unit_was_skipped_at_boot_by_its_condition():
    """Started by systemd at boot (multi-user.target wants it) and skipped: no NVIDIA driver."""
    p = unit_props("hostctl-power.service")
    assert p["UnitFileState"] == "enabled"
    assert int(p["InactiveExitTimestampMonotonic"]) > 0, f"systemd did not try it in this boot: {p}"
    assert (p["ConditionResult"], p["ActiveState"], p["Result"]) == ("no", "inactive", SKIPPED_RESULT), p
    assert int(p["ExecMainStartTimestampMonotonic"]) == 0, f"ExecStart (hostctl) ran: {p}"
    failed = sh(["systemctl", "--failed", "--no-legend", "--plain"]).stdout
    assert "hostctl-power" not in failed


def test_runtime_unit_was_started_by_systemd_at_boot(shared):
    """Enabled means systemd starts it at boot. Whether `hostctl up` then succeeds is not this
    guest's question (it has no Docker); what it did is kept on the results disk."""
    p = unit_props("hostctl-runtime.service")
    shared["runtime_unit_at_boot2"] = p
    assert (p["UnitFileState"], p["LoadState"]) == ("enabled", "loaded")
    assert int(p["ExecMainStartTimestampMonotonic"]) > 0, f"systemd never started it in this boot: {p}"


def test_no_unit_failed_at_boot():
    """No unit failed but the runtime's, and that one only because `hostctl up` itself failed: this
    guest has no Docker, so each start fails its preflight and, restarted at once (RestartSec=1),
    the unit stops at its start limit (README "Supervision"). A unit systemd could not run at all
    would fail with another Result (resources, core-dump, ...) or never reach ExecStart."""
    failed = [ln.split()[0] for ln in sh(["systemctl", "--failed", "--no-legend", "--plain"]).stdout.splitlines()
              if ln.strip()]
    assert [u for u in failed if u != "hostctl-runtime.service"] == [], f"failed units: {failed}"
    if "hostctl-runtime.service" in failed:
        p = unit_props("hostctl-runtime.service")
        assert p["Result"] == "exit-code" and int(p["ExecMainStatus"]) != 0, p


# hostctl's own lock files in its state directory (hostctl/provision/executor.py, hostctl/act/lock.py)
LOCK_FILES = {"provision.lock", "lock"}


def _host_state() -> dict:
    """Everything provision could change, read afresh: partition tables, filesystem identities,
    fstab, sysctl files, mounts, swaps, /etc/hostctl and the units (content and mtime)."""
    state: dict = {}
    for drive, serial in sorted(DRIVES.items()):
        dev = str(by_id(serial).resolve())
        state[f"table {drive}"] = sh(["sfdisk", "-d", dev], check=False).stdout
        parts = sorted(str(p) for p in Path("/dev").glob(Path(dev).name + "p*"))
        # -p: read the superblocks themselves, not blkid's cache
        state[f"blkid {drive}"] = sh(["blkid", "-p", "-o", "export", *parts], check=False).stdout if parts else ""
    state["fstab"] = Path("/etc/fstab").read_text()
    for p in sorted(Path("/etc/sysctl.d").glob("*")):
        state[f"file {p}"] = p.read_text()
    state["mounts"] = sh(["findmnt", "-rn", "-o", "SOURCE,TARGET,FSTYPE,OPTIONS"]).stdout
    state["swaps"] = sorted(swaps().items())
    for root in ("/etc/hostctl", "/etc/systemd/system", "/var/lib/hostctl", *CACHE_DIRS.values()):
        for p in sorted(Path(root).rglob("*")) if Path(root).exists() else []:
            if p.name in LOCK_FILES:
                continue  # each run records its holder there (who waits is told who holds it): not host state
            st = p.lstat()
            key = f"stat {p}"
            state[key] = (stat.filemode(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns if p.is_file() else None,
                          os.readlink(p) if p.is_symlink() else None)
    return state


@pytest.mark.usefixtures("storage_ready")
def test_second_provision_changes_nothing():
    before = _host_state()
    preview = hostctl("--config", str(PROFILE), "provision", "--only", "system", "--dry-run")
    assert preview.returncode == 0 and preview.stdout.strip() == "system: nothing to change", preview.stdout
    res = hostctl("--config", str(PROFILE), "provision", "--only", "storage", "--yes")
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    res = hostctl("--config", str(PROFILE), "provision", "--only", "system")
    assert res.returncode == 0 and res.stdout.strip() == "system: nothing to change", res.stdout + res.stderr
    res = hostctl("--config", str(INSTALLED_PROFILE), "provision", "--only", "gpu", "--yes")
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    acted = [ln for ln in res.stdout.splitlines() if ln.split()[:1] in (["changed"], ["would"], ["fail"])]
    assert acted == [], res.stdout
    after = _host_state()
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert changed == [], "changed by the second provision: " + ", ".join(changed)


@pytest.mark.usefixtures("storage_ready")
@pytest.mark.parametrize("drive", DRIVE_NAMES)
def test_canary_survives_the_second_provision(shared, drive):
    assert sha256(Path(mount_of(drive)) / "vmtest-canary.bin") == shared[f"canary_{drive}"]


def test_drive_the_profile_does_not_name_is_untouched(shared):
    assert sh(["sfdisk", "-d", str(by_id(SPARE).resolve())]).stdout == shared["spare_table"]
    assert sha256(by_id(SPARE)) == shared["spare_sha256"]
