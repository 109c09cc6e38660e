"""The whole-host guests' hardware, how each is started and how its run is read back: the
storage guest (two named NVMe drives and a foreign one that must survive byte for byte) and the
NUMA guest (two nodes, devices behind PCI expander bridges). test_vm.py asserts on the runs;
early.py starts the storage guest beside the unit tier.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from vm.conftest import TIMINGS
from vm.image import GuestImage
from vm.qemu import Boot, Nvme, Running, Shape, boot, make_results_disk, start
from vm.results import Phase, read_junit, read_results, read_state

DRIVES = {"ssd1": "HCVMSSD1", "ssd2": "HCVMSSD2"}  # as in tests/vm/guest/hostctl.toml
SPARE = "HCVMSPARE"
DRIVE_MIB, SPARE_MIB = 1024, 64
# Under TCG one storage run (two boots, provision, pytest in the guest) takes minutes; the
# deadline is generous because the machine is shared. HOSTCTL_VM_TIMEOUT overrides.
TIMEOUT_S = float(os.environ.get("HOSTCTL_VM_TIMEOUT", "1500"))
# RAM is allocated by the host only as the guest touches it; the plan refuses a runtime cap
# below 2 GiB (whole GiB, MemTotal minus the host reserve rounded down), so with the profile's
# least host reserve of 512 MiB the guest needs MemTotal of at least 2.5 GiB.
GUEST_MIB = 3072


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def blank(path: Path, mib: int) -> Path:
    with open(path, "wb") as f:
        f.truncate(mib * 1024 * 1024)  # sparse
    return path


def foreign_drive(path: Path, mib: int) -> Path:
    """A drive holding somebody else's data: random bytes under a GPT with one partition."""
    with open(path, "wb") as f:
        f.write(os.urandom(mib * 1024 * 1024))
    subprocess.run(["sgdisk", "-n1:0:0", "-t1:8300", "-c1:someone-elses-data", str(path)], check=True,
                   capture_output=True, timeout=60)
    return path


@dataclass
class Run:
    boot: Boot
    run_dir: Path
    out: Path | None
    read_error: str | None
    state: dict
    spare_before: str = ""
    spare_after: str = ""
    tables: dict = field(default_factory=dict)  # drive name -> `sgdisk -p` of its image, read on the host

    def context(self) -> str:
        """What to show when an assertion about this run fails."""
        err = (self.out / "driver-error.txt") if self.out else None
        driver = err.read_text() if err and err.exists() else ""
        return (f"\n--- guest console (last lines) ---\n{self.boot.console_tail()}\n"
                + (f"--- driver error ---\n{driver}" if driver else "")
                + (f"--- results disk unreadable: {self.read_error}" if self.read_error else "")
                + f"\n(run folder: {self.run_dir}; HOSTCTL_VM_KEEP=1 keeps its disks)")

    def phase(self, name: str) -> Phase:
        assert self.out is not None and (self.out / f"{name}.xml").exists(), f"no JUnit XML for {name}" + self.context()
        return read_junit(self.out / f"{name}.xml")


def read_run(b: Boot, run_dir: Path, results: Path, label: str) -> Run:
    out, read_error = None, None
    try:
        out = read_results(results, run_dir / "results")
    except Exception as exc:
        read_error = str(exc)
    state = read_state(out) if out else {}
    phases = ", ".join(f"{p['phase']} {p['seconds']:.0f} s (guest uptime {p['uptime_at_start']:.0f} s at start)"
                       for p in state.get("boots", []))
    TIMINGS.append(f"{label} guest ({b.accel}): {b.seconds:.1f} s from QEMU start to exit"
                   + (" (TIMED OUT, killed)" if b.timed_out else "") + (f"; {phases}" if phases else ""))
    return Run(boot=b, run_dir=run_dir, out=out, read_error=read_error, state=state)


@dataclass
class StorageStart:
    """The storage guest while it runs: its folder, results disk and the spare's digest before."""

    running: Running
    run_dir: Path
    results: Path
    spare: Path
    spare_before: str
    label: str  # for the timings line


def start_storage(image: GuestImage, d: Path, label: str = "storage") -> StorageStart:
    spare = foreign_drive(d / "nvme-spare.img", SPARE_MIB)
    spare_before = sha256(spare)
    nvme = [Nvme(serial, blank(d / f"nvme-{name}.img", DRIVE_MIB)) for name, serial in sorted(DRIVES.items())]
    nvme.append(Nvme(SPARE, spare))
    results = d / "results.img"
    make_results_disk(results)
    running = start(image, Shape(memory_mib=GUEST_MIB, nvme=nvme), mode="storage", run_dir=d, timeout_s=TIMEOUT_S,
                    results=results)
    return StorageStart(running=running, run_dir=d, results=results, spare=spare, spare_before=spare_before,
                        label=label)


def finish_storage(started: StorageStart) -> Run:
    """Wait for the guest (to its deadline), then read its results and the drives on the host."""
    d = started.run_dir
    run = read_run(started.running.finish(), d, started.results, started.label)
    run.spare_before, run.spare_after = started.spare_before, sha256(started.spare)
    run.tables = {name: subprocess.run(["sgdisk", "-p", str(d / f"nvme-{name}.img")], capture_output=True,
                                       text=True, timeout=60).stdout for name in DRIVES}
    return run


def run_numa(image: GuestImage, d: Path) -> Run:
    results = d / "results.img"
    make_results_disk(results)
    # One PCI expander bridge per node (its _PXM gives the devices behind it their node), a
    # bridge behind each (pxb takes only bridges), one NVMe behind each, and one on the root
    # bus, which has no proximity domain (sysfs says -1).
    extra = []
    for node, bus_nr in ((0, 64), (1, 128)):
        extra += ["-device", f"pxb,id=pxb{node},bus_nr={bus_nr},numa_node={node},bus=pci.0",
                  "-device", f"pci-bridge,id=br{node},bus=pxb{node},chassis_nr={node + 1},addr=0x1"]
    nvme = [Nvme("HCVMNUMA0", blank(d / "numa0.img", 16), bus="br0", addr="0x1"),
            Nvme("HCVMNUMA1", blank(d / "numa1.img", 16), bus="br1", addr="0x1"),
            Nvme("HCVMROOTBUS", blank(d / "rootbus.img", 16))]
    b = boot(image, Shape(memory_mib=GUEST_MIB, cpus=2, numa_nodes=2, nvme=nvme, extra=extra),
             mode="numa", run_dir=d, timeout_s=TIMEOUT_S, results=results, reboot=False)
    return read_run(b, d, results, "numa")
