"""Whole-host tests (tier `vm`): a real Debian guest under QEMU with emulated NVMe drives,
systemd as PID 1, udev and a reboot, provisioned by the hostctl wheel built from this checkout.

The storage guest has two NVMe drives the profile names by serial number and a third it does
not name, which holds a foreign GPT and random bytes and must come back byte for byte. Inside
the guest (tests/vm/guest/) a boot-time unit runs `hostctl provision`, checks the host with
testinfra, reboots once, checks again, and powers off; the results come back on a results
disk. The NUMA guest has two nodes and devices behind PCI expander bridges on each.

Boots are bounded: a guest that has not powered itself off by the deadline is killed by PID.
"""

from __future__ import annotations

import os

import pytest

from vm import early
from vm.conftest import remove_disks
from vm.guests import DRIVES, TIMEOUT_S, finish_storage, run_numa, start_storage
from vm.qemu import Shape, boot

pytestmark = pytest.mark.vm


@pytest.fixture(scope="module")
def storage_run(guest_image, tmp_path_factory):
    started = early.take_storage()
    if started is None:
        started = start_storage(guest_image, tmp_path_factory.mktemp("vm-storage"))
    try:
        yield finish_storage(started)
    finally:
        started.running.kill()
        remove_disks(started.run_dir)


@pytest.fixture(scope="module")
def numa_run(guest_image, tmp_path_factory):
    d = tmp_path_factory.mktemp("vm-numa")
    try:
        yield run_numa(guest_image, d)
    finally:
        remove_disks(d)


# ---------------------------------------------------------------- storage guest


def test_storage_guest_ran_to_the_end_and_powered_off(storage_run):
    b = storage_run.boot
    assert not b.timed_out, f"the guest did not power off within {TIMEOUT_S:.0f} s" + storage_run.context()
    assert b.returncode == 0, f"QEMU exited {b.returncode}" + storage_run.context()
    assert storage_run.state.get("finished"), f"driver state: {storage_run.state}" + storage_run.context()


def test_guest_rebooted_exactly_once(storage_run):
    boots = storage_run.state.get("boots", [])
    assert [b["phase"] for b in boots] == ["boot1", "boot2"], storage_run.state
    assert boots[0]["boot_id"] != boots[1]["boot_id"]
    assert not storage_run.state.get("extra_boots"), storage_run.state
    # systemd greets once per boot on the serial console
    assert storage_run.boot.console_text().count("Welcome to ") == 2, "expected two boots on the console"


@pytest.mark.parametrize("phase", ["boot1", "boot2"])
def test_in_guest_checks_passed(storage_run, phase):
    p = storage_run.phase(phase)
    assert p.cases, f"{phase} ran no check" + storage_run.context()
    assert not p.with_outcome("failed", "error"), p.report()
    print(p.report())  # skipped checks, with their reasons, show with -rA / on failure


def test_drive_the_profile_does_not_name_is_byte_for_byte_untouched(storage_run):
    assert storage_run.spare_after == storage_run.spare_before


def test_named_drives_carry_hostctl_partitions(storage_run):
    """Read on the host, from the drive images themselves, after the guest is gone."""
    for name in DRIVES:
        table = storage_run.tables[name]
        assert f"hostctl-swap-{name}" in table and f"hostctl-data-{name}" in table, table


# ---------------------------------------------------------------- NUMA guest


def test_numa_guest_ran_and_powered_off(numa_run):
    assert not numa_run.boot.timed_out and numa_run.boot.returncode == 0, numa_run.context()
    assert numa_run.state.get("finished"), f"driver state: {numa_run.state}" + numa_run.context()


def test_numa_placement_checks_passed(numa_run):
    p = numa_run.phase("numa")
    assert len(p.cases) >= 8, p.report()
    assert not p.with_outcome("failed", "error", "skipped"), p.report()


# ---------------------------------------------------------------- the deadline


def test_a_guest_past_its_deadline_is_killed_and_leaves_nothing(guest_image, tmp_path):
    b = boot(guest_image, Shape(memory_mib=512), mode="probe", run_dir=tmp_path, timeout_s=3, reboot=False)
    assert b.timed_out and b.returncode is None
    pid = int((tmp_path / "qemu-probe.pid").read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)
    # QEMU's snapshot overlay of the root disk lived in the run folder and went with the process
    leftovers = sorted(p.name for p in tmp_path.iterdir()
                       if p.suffix not in (".log", ".json", ".pid"))
    assert leftovers == [], leftovers
