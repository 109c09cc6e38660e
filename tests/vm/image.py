"""The whole-host test guest: a small Debian 12 root filesystem with a Debian kernel, systemd,
udev, Python and hostctl installed from a wheel built from this checkout, as an ext4 disk
image plus the kernel and initramfs QEMU boots directly (-kernel/-initrd).

Two cached tiers under /var/cache/hostctl-vm (HOSTCTL_VM_CACHE overrides), each keyed by a
content hash so CI reuses them:
- base-<hash>: debootstrap (package list below) + a venv with hostctl's pinned dependencies
  and the test tools. Keyed by the package list, the requirements and the code that builds
  it. Slow (minutes, network); rebuilt only when one of those changes.
- image-<hash>: the base + the hostctl wheel + the in-guest tests (tests/vm/guest/),
  written to root.img with `mkfs.ext4 -d`. Keyed by the base, the wheel's contents and the
  guest files. Fast (seconds); rebuilt whenever hostctl changes.
A guest never writes to the cached image: QEMU opens it with snapshot=on.

Run `python3 tests/vm/image.py` to build (or find) the image and print where it is.
Standard library only: this file also runs as a script.
"""

from __future__ import annotations

import fcntl
import hashlib
import inspect
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
GUEST_DIR = Path(__file__).resolve().parent / "guest"
CACHE_ENV = "HOSTCTL_VM_CACHE"
DEFAULT_CACHE = Path("/var/cache/hostctl-vm")
SUITE = "bookworm"
# What a real host has that hostctl relies on: systemd as PID 1, udev (for /dev/disk/by-id),
# the partitioning and filesystem tools provision calls, numactl for NUMA placement.
PACKAGES = (
    "linux-image-amd64",
    "systemd-sysv",
    "udev",
    "dbus",
    "kmod",
    "procps",
    "python3",
    "python3-venv",
    "util-linux",
    "fdisk",
    "gdisk",
    "parted",
    "e2fsprogs",
    "numactl",
    "pciutils",
)
# Parts of the root nobody in the guest reads: dropped so mkfs and the disk image stay small.
TRIM = (
    "var/cache/apt/archives",
    "var/lib/apt/lists",
    "usr/share/doc",
    "usr/share/man",
    "usr/share/locale",
    "usr/share/info",
)
TRIM_MODULES = (
    "kernel/drivers/gpu",
    "kernel/drivers/net/wireless",
    "kernel/drivers/net/ethernet",
    "kernel/drivers/media",
    "kernel/drivers/infiniband",
    "kernel/drivers/staging",
    "kernel/drivers/bluetooth",
    "kernel/drivers/iio",
    "kernel/drivers/isdn",
    "kernel/drivers/comedi",
    "kernel/sound",
    "kernel/net/wireless",
    "kernel/net/mac80211",
    "kernel/net/bluetooth",
)
# Timers that would start apt or a scrub in the middle of a test.
MASKED = ("apt-daily.timer", "apt-daily-upgrade.timer", "e2scrub_all.timer", "e2scrub_reap.service", "fstrim.timer")
VENV = "/opt/hostctl"  # hostctl's venv in the guest; /usr/local/bin/hostctl links to its console script
GUEST_TESTS = "/opt/hostctl-vmtest"  # where tests/vm/guest lands in the guest
ROOT_LABEL = "hcroot"
KEEP_BASES, KEEP_IMAGES = 2, 3

Log = Callable[[str], None]


def _stderr(msg: str) -> None:
    print(f"vm-image: {msg}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


@dataclass(frozen=True)
class GuestImage:
    root: Path  # ext4 image of the root filesystem (read-only to guests: snapshot=on)
    kernel: Path
    initrd: Path
    key: str
    base_key: str
    built: list[str]  # tiers built by this call ("base", "image"); empty when both came from the cache
    seconds: float  # time this call spent, cache hits included


def requirements() -> list[str]:
    """hostctl's pinned dependencies and its test extra (pytest, pytest-testinfra)."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return list(project["dependencies"]) + list(project["optional-dependencies"]["test"])


def _digest(*parts: object) -> str:
    h = hashlib.sha256()
    for part in parts:
        data = part if isinstance(part, bytes) else json.dumps(part, sort_keys=True).encode()
        h.update(len(data).to_bytes(8, "little") + data)
    return h.hexdigest()[:16]


def base_key() -> str:
    return _digest(SUITE, PACKAGES, TRIM, TRIM_MODULES, MASKED, VENV, requirements(),
                   inspect.getsource(_build_base), inspect.getsource(_configure_root))


def guest_files() -> list[Path]:
    return sorted(p for p in GUEST_DIR.rglob("*") if p.is_file() and "__pycache__" not in p.parts)


def image_key(base: str, wheel: Path) -> str:
    files = [(str(p.relative_to(GUEST_DIR)), p.read_bytes()) for p in guest_files()]
    return _digest(base, wheel_digest(wheel), [name for name, _ in files], *[data for _, data in files],
                   inspect.getsource(_build_image))


def wheel_digest(wheel: Path) -> str:
    """The wheel's contents (names and bytes), not its zip bytes, which carry timestamps."""
    with zipfile.ZipFile(wheel) as z:
        return _digest(*[[info.filename, z.read(info).hex()] for info in sorted(z.infolist(), key=lambda i: i.filename)])


def _run(argv: list[str], *, timeout: float, log: Log, cwd: Path | None = None) -> str:
    log("$ " + " ".join(argv))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, stdin=subprocess.DEVNULL)
    if proc.returncode != 0:
        tail = "\n".join((proc.stderr.strip() or proc.stdout.strip()).splitlines()[-15:])
        raise RuntimeError(f"{' '.join(argv)} exited {proc.returncode}:\n{tail}")
    return proc.stdout


def _source_files() -> list[str]:
    """What a checkout holds (tracked and new files, not ignored build output)."""
    if (REPO / ".git").exists() and shutil.which("git"):
        out = subprocess.run(["git", "-C", str(REPO), "ls-files", "-z", "-co", "--exclude-standard"],
                             capture_output=True, timeout=60, check=True).stdout
        return sorted(f for f in out.decode().split("\0") if f and (REPO / f).is_file())
    skip = {".git", "build", "dist", ".venv", "__pycache__", ".pytest_cache"}
    return sorted(str(p.relative_to(REPO)) for p in REPO.rglob("*")
                  if p.is_file() and not skip & set(p.relative_to(REPO).parts))


def build_wheel(dest: Path, log: Log = _stderr) -> Path:
    """Build the hostctl wheel from a clean copy of the checkout (no stale build/ output)."""
    with tempfile.TemporaryDirectory(prefix="hostctl-wheel-src-") as tmp:
        src = Path(tmp) / "src"
        for rel in _source_files():
            target = src / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, target)
        dest.mkdir(parents=True, exist_ok=True)
        _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(dest), str(src)], timeout=600, log=log)
    wheels = sorted(dest.glob("hostctl-*.whl"))
    if len(wheels) != 1:
        raise RuntimeError(f"expected one hostctl wheel in {dest}, found {[w.name for w in wheels]}")
    return wheels[0]


def _configure_root(root: Path, log: Log) -> None:
    """Turn a debootstrap tree into a bootable test guest (no network, root on /dev/vda)."""
    (root / "etc/hostname").write_text("hostctl-vm\n")
    (root / "etc/hosts").write_text("127.0.0.1 localhost\n127.0.1.1 hostctl-vm\n::1 localhost\n")
    (root / "etc/fstab").write_text("# root is the virtio disk QEMU gives the guest\n/dev/vda / ext4 rw,errors=remount-ro 0 1\n")
    # A persistent journal: the second boot copies the first boot's log to the results disk.
    (root / "var/log/journal").mkdir(parents=True, exist_ok=True)
    # KVM inside the guest is not wanted; the module only costs boot time.
    (root / "etc/modprobe.d/hostctl-vm.conf").write_text("blacklist kvm\nblacklist kvm_amd\nblacklist kvm_intel\n")
    _run(["systemctl", f"--root={root}", "mask", *MASKED], timeout=60, log=log)
    for rel in TRIM:
        shutil.rmtree(root / rel, ignore_errors=True)
        (root / rel).mkdir(parents=True, exist_ok=True)
    (kver,) = [p.name for p in (root / "lib/modules").iterdir()]
    for rel in TRIM_MODULES:
        shutil.rmtree(root / "lib/modules" / kver / rel, ignore_errors=True)
    _run(["chroot", str(root), "depmod", "-a", kver], timeout=300, log=log)


def _build_base(work: Path, log: Log) -> None:
    """debootstrap + the guest's venv with hostctl's dependencies (hostctl itself comes later)."""
    root = work / "root"
    _run(["debootstrap", "--variant=minbase", f"--include={','.join(PACKAGES)}", SUITE, str(root)],
         timeout=1800, log=log)
    _configure_root(root, log)
    # Binary wheels for the guest's Python (3.11 on glibc 2.36, the same ABI as this machine's
    # CPython 3.11): the guest has no network, so pip installs from this wheelhouse.
    wheels = root / "tmp/wheels"
    wheels.mkdir(parents=True)
    (wheels / "requirements.txt").write_text("\n".join(requirements()) + "\n")
    _run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "-d", str(wheels),
          "-r", str(wheels / "requirements.txt")], timeout=900, log=log)
    _run(["chroot", str(root), "python3", "-m", "venv", VENV], timeout=300, log=log)
    _run(["chroot", str(root), f"{VENV}/bin/python3", "-m", "pip", "install", "-q", "--no-index", "--no-compile",
          "--find-links", "/tmp/wheels", "-r", "/tmp/wheels/requirements.txt"], timeout=900, log=log)
    shutil.rmtree(wheels)
    boot = root / "boot"
    (kernel,) = boot.glob("vmlinuz-*")
    (initrd,) = boot.glob("initrd.img-*")
    shutil.copy2(kernel, work / "vmlinuz")
    shutil.copy2(initrd, work / "initrd.img")


def _build_image(base: Path, wheel: Path, work: Path, log: Log) -> None:
    """The base + the hostctl wheel + the guest tests, as an ext4 image made with mkfs.ext4 -d."""
    root = work / "root"
    _run(["cp", "-a", "--reflink=auto", str(base / "root"), str(root)], timeout=600, log=log)
    shutil.copy2(wheel, root / "tmp" / wheel.name)
    # Installed as a user would: `pip install hostctl-*.whl` into a venv, outside any checkout.
    _run(["chroot", str(root), f"{VENV}/bin/python3", "-m", "pip", "install", "-q", "--no-index", "--no-deps",
          "--no-compile", f"/tmp/{wheel.name}"], timeout=600, log=log)
    (root / "tmp" / wheel.name).unlink()
    # Byte-compile now, on the host: under emulation the guest would spend seconds doing it
    # at every first import.
    _run(["chroot", str(root), f"{VENV}/bin/python3", "-m", "compileall", "-q", "-j0", VENV],
         timeout=600, log=log)
    (root / "usr/local/bin/hostctl").symlink_to(f"{VENV}/bin/hostctl")
    tests = root / GUEST_TESTS.lstrip("/")
    for src in guest_files():
        target = tests / src.relative_to(GUEST_DIR)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target)
    unit = root / "etc/systemd/system/hostctl-vmtest.service"
    shutil.copy2(GUEST_DIR / "hostctl-vmtest.service", unit)
    _run(["systemctl", f"--root={root}", "enable", "hostctl-vmtest.service"], timeout=60, log=log)
    used = int(_run(["du", "-s", "-B1M", str(root)], timeout=300, log=log).split()[0])
    # Headroom for what the guest writes (journal, pytest) goes to QEMU's snapshot overlay anyway.
    size_mib = used + 512
    _run(["mkfs.ext4", "-q", "-F", "-L", ROOT_LABEL, "-d", str(root), str(work / "root.img"), f"{size_mib}M"],
         timeout=600, log=log)
    shutil.rmtree(root)
    shutil.copy2(base / "vmlinuz", work / "vmlinuz")
    shutil.copy2(base / "initrd.img", work / "initrd.img")


def _build_tier(final: Path, build: Callable[[Path], None], log: Log) -> None:
    """Build into a scratch folder beside `final`, then rename: a crash never leaves half a tier."""
    work = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        build(work)
        (work / "manifest.json").write_text(json.dumps({"built": time.time(), "key": final.name}, indent=2))
        work.rename(final)
    finally:
        if work.exists():
            shutil.rmtree(work, ignore_errors=True)


def _prune(cache: Path, prefix: str, keep: int, in_use: Path, log: Log) -> None:
    tiers = sorted((p for p in cache.glob(f"{prefix}-*") if p.is_dir() and p != in_use),
                   key=lambda p: p.stat().st_mtime, reverse=True)
    for old in tiers[keep - 1:]:
        log(f"pruning {old}")
        shutil.rmtree(old, ignore_errors=True)


def missing_tools() -> list[str]:
    return [t for t in ("debootstrap", "chroot", "mkfs.ext4", "systemctl", "qemu-system-x86_64", "debugfs")
            if shutil.which(t) is None]


def ensure_image(log: Log = _stderr) -> GuestImage:
    """Find or build the guest image for this checkout. Needs root (debootstrap, chroot)."""
    t0 = time.monotonic()
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    built: list[str] = []
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one builder at a time; others wait, then hit the cache
        bkey = base_key()
        base = cache / f"base-{bkey}"
        if not base.is_dir():
            log(f"building the base guest {base.name} (debootstrap, a few minutes)")
            _build_tier(base, lambda work: _build_base(work, log), log)
            built.append("base")
        os.utime(base)
        with tempfile.TemporaryDirectory(prefix="hostctl-wheel-") as tmp:
            wheel = build_wheel(Path(tmp), log)
            key = image_key(bkey, wheel)
            image = cache / f"image-{key}"
            if not image.is_dir():
                log(f"building the guest image {image.name} from {base.name} and {wheel.name}")
                _build_tier(image, lambda work: _build_image(base, wheel, work, log), log)
                built.append("image")
        os.utime(image)
        _prune(cache, "base", KEEP_BASES, base, log)
        _prune(cache, "image", KEEP_IMAGES, image, log)
    return GuestImage(root=image / "root.img", kernel=image / "vmlinuz", initrd=image / "initrd.img", key=key,
                      base_key=bkey, built=built, seconds=time.monotonic() - t0)


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("vm-image: needs root (debootstrap and chroot)")
    if missing_tools():
        sys.exit(f"vm-image: missing tools: {', '.join(missing_tools())} (see .ci/run)")
    img = ensure_image()
    print(json.dumps({"root": str(img.root), "kernel": str(img.kernel), "initrd": str(img.initrd),
                      "built": img.built, "seconds": round(img.seconds, 1)}, indent=2))
