"""Booting the test guest under QEMU: drives, the results disk, the accelerator, and a hard
deadline. No network device exists in the guest (-nodefaults, -nic none).

The guest boots with -kernel/-initrd from the cached image; its root disk is opened with
snapshot=on, so the cached image is never written while writes survive an in-guest reboot
(the QEMU process stays; only the guest resets). The kernel command line carries
`hostctl.vmtest=MODE`, which is the only thing that lets the in-guest test unit run.

Software emulation (TCG) is the default. KVM is used only where a short probe boot proved it
works on this machine (on these machines a KVM guest hangs after "Probing EDD"); the verdict
is kept in the cache folder, keyed by what could change it.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import platform
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from vm.image import GuestImage, cache_dir

ACCEL_ENV = "HOSTCTL_VM_ACCEL"  # auto (default) | tcg | kvm
QEMU = "qemu-system-x86_64"
PROBE_MARKER = "HOSTCTL-VMTEST-PROBE-OK"
PROBE_TIMEOUT_S = 45.0
RESULTS_LABEL = "hcresults"


@dataclass(frozen=True)
class Nvme:
    serial: str
    image: Path
    bus: str | None = None  # a PCI bus id (e.g. a pxb's bridge); default: the root bus
    addr: str | None = None


@dataclass
class Shape:
    """The guest's hardware."""

    memory_mib: int = 1024
    cpus: int = 1
    numa_nodes: int = 1  # >1: one CPU and memory_mib / numa_nodes of memory per node
    nvme: list[Nvme] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # more -device/-object arguments (pxb, bridges)


@dataclass
class Boot:
    returncode: int | None
    seconds: float
    timed_out: bool
    accel: str
    console: Path
    argv: list[str]

    def console_text(self) -> str:
        try:
            return self.console.read_text(errors="replace")
        except OSError:
            return ""

    def console_tail(self, lines: int = 60) -> str:
        return "\n".join(self.console_text().splitlines()[-lines:])


def make_results_disk(path: Path, size_mib: int = 64) -> None:
    """An empty ext4 disk the guest mounts by label, writes its results to, and the host reads
    back with debugfs (no mount on the host)."""
    with open(path, "wb") as f:
        f.truncate(size_mib * 1024 * 1024)
    subprocess.run(["mkfs.ext4", "-q", "-F", "-L", RESULTS_LABEL, str(path)], check=True, capture_output=True, timeout=60)


def _argv(image: GuestImage, shape: Shape, *, mode: str, accel: str, console: Path,
          results: Path | None, reboot: bool) -> list[str]:
    cmdline = f"root=/dev/vda rw console=ttyS0 panic=-1 loglevel=4 hostctl.vmtest={mode}"
    argv = [
        QEMU, "-nodefaults", "-no-user-config", "-machine", "pc",
        "-display", "none", "-vga", "none", "-nic", "none",
        "-serial", f"file:{console}",
        "-m", f"{shape.memory_mib}M", "-smp", str(shape.cpus),
        "-kernel", str(image.kernel), "-initrd", str(image.initrd), "-append", cmdline,
        # explicit virtio-blk on the root bus: with a pxb present QEMU would pick its bus
        "-drive", f"file={image.root},if=none,id=root,format=raw,snapshot=on,cache=unsafe",
        "-device", "virtio-blk-pci,drive=root,bus=pci.0",
    ]
    if accel == "kvm":
        argv += ["-accel", "kvm"]
    else:
        argv += ["-accel", "tcg,thread=multi" if shape.cpus > 1 else "tcg"]
    if not reboot:
        argv.append("-no-reboot")
    if shape.numa_nodes > 1:
        per = shape.memory_mib // shape.numa_nodes
        for n in range(shape.numa_nodes):
            argv += ["-object", f"memory-backend-ram,id=m{n},size={per}M",
                     "-numa", f"node,nodeid={n},cpus={n},memdev=m{n}"]
    if results is not None:
        argv += ["-drive", f"file={results},if=none,id=results,format=raw",
                 "-device", "virtio-blk-pci,drive=results,bus=pci.0"]
    argv += shape.extra
    for i, d in enumerate(shape.nvme):
        dev = f"nvme,serial={d.serial},drive=nvme{i},bus={d.bus or 'pci.0'}" + (f",addr={d.addr}" if d.addr else "")
        argv += ["-drive", f"file={d.image},if=none,id=nvme{i},format=raw", "-device", dev]
    return argv


def _die_with_parent() -> None:
    """In the QEMU child before exec: SIGKILL it if the test process dies (even by SIGKILL),
    so no guest outlives the run that started it."""
    PR_SET_PDEATHSIG = 1
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


@dataclass
class Running:
    """A guest booted and not yet waited for: its deadline counts from its start."""

    proc: subprocess.Popen
    t0: float
    timeout_s: float
    accel: str
    console: Path
    argv: list[str]

    def finish(self) -> Boot:
        """Wait until the guest powers itself off, or kill QEMU (by its PID) at the deadline."""
        timed_out = False
        try:
            self.proc.wait(timeout=max(0.0, self.t0 + self.timeout_s - time.monotonic()))
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:
            self.kill()  # timed out, or interrupted: never leave a guest running
        return Boot(returncode=None if timed_out else self.proc.returncode, seconds=time.monotonic() - self.t0,
                    timed_out=timed_out, accel=self.accel, console=self.console, argv=self.argv)

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)


def start(image: GuestImage, shape: Shape, *, mode: str, run_dir: Path, timeout_s: float,
          results: Path | None = None, reboot: bool = True, accel: str | None = None) -> Running:
    """Start QEMU and return at once (tests/vm/early.py runs the storage guest beside the unit tier)."""
    accel = accel or choose_accel(image)
    console = run_dir / f"console-{mode}.log"
    argv = _argv(image, shape, mode=mode, accel=accel, console=console, results=results, reboot=reboot)
    (run_dir / f"qemu-{mode}.argv.json").write_text(json.dumps(argv, indent=1))
    # QEMU writes its snapshot overlay to TMPDIR: keep it in the run folder, cleaned with it.
    env = dict(os.environ, TMPDIR=str(run_dir))
    t0 = time.monotonic()
    with open(run_dir / f"qemu-{mode}.log", "wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True, preexec_fn=_die_with_parent)
    (run_dir / f"qemu-{mode}.pid").write_text(f"{proc.pid}\n")  # for a person who must stop it by hand
    return Running(proc=proc, t0=t0, timeout_s=timeout_s, accel=accel, console=console, argv=argv)


def boot(image: GuestImage, shape: Shape, *, mode: str, run_dir: Path, timeout_s: float,
         results: Path | None = None, reboot: bool = True, accel: str | None = None) -> Boot:
    """Boot until the guest powers itself off, or kill QEMU (by its PID) at the deadline."""
    return start(image, shape, mode=mode, run_dir=run_dir, timeout_s=timeout_s, results=results, reboot=reboot,
                 accel=accel).finish()


# ---------------------------------------------------------------- accelerator


def _probe_key() -> str:
    qemu = subprocess.run([QEMU, "--version"], capture_output=True, text=True, timeout=30).stdout.splitlines()[:1]
    try:
        cpu = next((ln for ln in Path("/proc/cpuinfo").read_text().splitlines() if ln.startswith("model name")), "")
    except OSError:
        cpu = ""
    return hashlib.sha256(json.dumps([qemu, platform.release(), cpu]).encode()).hexdigest()[:16]


def probe_kvm(image: GuestImage, run_dir: Path) -> tuple[bool, str]:
    """Boot the guest under KVM in probe mode: it prints a marker and powers off at once."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm is absent or not usable"
    b = boot(image, Shape(memory_mib=512), mode="probe", run_dir=run_dir, timeout_s=PROBE_TIMEOUT_S,
             reboot=False, accel="kvm")
    if PROBE_MARKER in b.console_text() and b.returncode == 0:
        return True, f"a KVM probe boot reached systemd and powered off in {b.seconds:.1f} s"
    last = (b.console_text().strip().splitlines() or ["<no console output>"])[-1][-120:]
    why = "timed out" if b.timed_out else f"exited {b.returncode}"
    qemu_log = (run_dir / "qemu-probe.log").read_text(errors="replace").strip().splitlines()[-1:] or [""]
    return False, f"a KVM probe boot {why} after {b.seconds:.1f} s; last console line: {last!r} {qemu_log[0][:160]}"


def choose_accel(image: GuestImage, run_dir: Path | None = None) -> str:
    want = os.environ.get(ACCEL_ENV, "auto")
    if want in ("tcg", "kvm"):
        return want
    if shutil.which(QEMU) is None:
        return "tcg"
    verdict_file = cache_dir() / "kvm-probe.json"
    key = _probe_key()
    try:
        saved = json.loads(verdict_file.read_text())
        if saved.get("key") == key:
            return "kvm" if saved["works"] else "tcg"
    except (OSError, ValueError, KeyError):
        pass
    scratch = run_dir or Path(os.environ.get("TMPDIR", "/var/tmp"))
    probe_dir = Path(__import__("tempfile").mkdtemp(prefix="hostctl-kvm-probe-", dir=scratch))
    try:
        works, why = probe_kvm(image, probe_dir)
    finally:
        shutil.rmtree(probe_dir, ignore_errors=True)
    verdict_file.parent.mkdir(parents=True, exist_ok=True)
    verdict_file.write_text(json.dumps({"key": key, "works": works, "why": why, "at": time.time()}, indent=2))
    return "kvm" if works else "tcg"


def accel_verdict() -> str:
    try:
        saved = json.loads((cache_dir() / "kvm-probe.json").read_text())
        return f"{'kvm' if saved['works'] else 'tcg'}: {saved['why']}"
    except (OSError, ValueError, KeyError):
        return f"{os.environ.get(ACCEL_ENV, 'auto')}: no probe recorded"
