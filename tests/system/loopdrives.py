"""Helpers and fixtures for system tests on real block devices: sparse-file loop drives, a temporary sysroot
for the files hostctl writes under /etc and /var/lib, and the swap sysctls restored afterwards.
(Not a conftest.py: tests/conftest.py is imported as `conftest` by the unit tests. Test modules
import the fixtures from here by name.)

Nothing may outlive a test: every loop device is detached, every mount on it unmounted and every
swap area on it swapped off by a finalizer, even when the test fails half-way.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from hostctl import paths, runner
from hostctl.config import load_config
from hostctl.facts.memory import read_swaps
from hostctl.facts.mounts import read_mountinfo
from need import need

TOOLS = {"losetup": "util-linux", "partx": "util-linux", "sgdisk": "gdisk", "mkfs.ext4": "e2fsprogs",
         "mkswap": "util-linux", "wipefs": "util-linux", "blkid": "util-linux", "sysctl": "procps",
         "mkfs.xfs": "xfsprogs", "parted": "parted"}
SWAP_PRIORITY = 1  # low: a test's swap must never be preferred over a real one
SYSCTLS = ("swappiness", "page-cluster")


def check(argv: list[str], timeout: float = 120) -> str:
    res = runner.run(argv, timeout=timeout, input_text="")
    assert res.ok, res.why()
    return res.stdout


def wait_for(paths_: list[str], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not all(os.path.exists(p) for p in paths_):
        if time.monotonic() > deadline:
            pytest.fail(f"device nodes did not appear within {timeout}s: {paths_}")
        time.sleep(0.05)


def on_device(path: str, dev: str) -> bool:
    """The device itself or one of its partitions (/dev/loop1 but not /dev/loop10)."""
    return path == dev or re.fullmatch(re.escape(dev) + r"p\d+", path) is not None


@dataclass
class LoopDrive:
    dev: str
    image: Path

    @property
    def name(self) -> str:
        return os.path.basename(self.dev)

    def part(self, n: int) -> str:
        return f"{self.dev}p{n}"

    def table_bytes(self) -> str:
        """A digest of the GPT areas (first and last MiB) of the device itself."""
        h = hashlib.sha256()
        with open(self.dev, "rb") as f:
            h.update(f.read(1 << 20))
            f.seek(-(1 << 20), os.SEEK_END)
            h.update(f.read(1 << 20))
        return h.hexdigest()


@dataclass
class Host:
    """The loop drives and extra mounts one test made; cleanup() undoes all of it."""

    tmp: Path
    drives: list[LoopDrive] = field(default_factory=list)

    def drive(self, size: str, name: str | None = None) -> LoopDrive:
        image = self.tmp / f"{name or 'drive'}-{len(self.drives)}.img"
        check(["truncate", "-s", size, str(image)])  # sparse: a "4 TB" drive costs nothing
        res = runner.run(["losetup", "-P", "--find", "--show", str(image)], timeout=30)
        if not res.ok:
            image.unlink(missing_ok=True)
            pytest.fail(f"cannot attach a loop device: {res.why()}")
        drive = LoopDrive(res.stdout.strip(), image)
        self.drives.append(drive)
        return drive

    def release(self, drive: LoopDrive) -> None:
        for _ in range(5):  # stacked mounts come off one at a time
            mounted = [m.entry.target for m in read_mountinfo() if on_device(m.entry.source, drive.dev)]
            if not mounted:
                break
            for target in reversed(mounted):
                if not runner.run(["umount", target], timeout=60).ok:
                    runner.run(["umount", "-l", target], timeout=60)
        for s in read_swaps():
            if on_device(s.path, drive.dev):
                runner.run(["swapoff", s.path], timeout=120)
        runner.run(["losetup", "-d", drive.dev], timeout=30)
        drive.image.unlink(missing_ok=True)

    def cleanup(self) -> None:
        for drive in reversed(self.drives):
            self.release(drive)
        self.drives.clear()


def _require_tools() -> None:
    need(os.geteuid() == 0, "needs root to attach loop devices")
    for tool, package in TOOLS.items():
        need(shutil.which(tool) is not None, f"{tool} is not installed (apt-get install -y {package}; .ci/run does)")


@pytest.fixture
def sysroot(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "sysroot"
    root.mkdir()
    monkeypatch.setenv(paths.SYSROOT_ENV, str(root))
    monkeypatch.delenv("SUDO_UID", raising=False)
    monkeypatch.delenv("SUDO_GID", raising=False)
    return root


@pytest.fixture
def restore_sysctls():
    before = {k: Path(f"/proc/sys/vm/{k}").read_text() for k in SYSCTLS}
    yield before
    for k, v in before.items():
        Path(f"/proc/sys/vm/{k}").write_text(v)


@pytest.fixture
def host(tmp_path: Path, sysroot: Path, restore_sysctls):
    _require_tools()
    h = Host(tmp_path)
    try:
        yield h
    finally:
        h.cleanup()


def drive_toml(name: str, dev: str, mount: Path, *, swap: str = "16MiB", priority: int = SWAP_PRIORITY,
               fs: str = "ext4", identity: str | None = None) -> str:
    options = '["noinit_itable"]' if fs == "ext4" else "[]"  # ext4's background zeroing would fill the sparse file
    return (f'[[drives]]\nname = "{name}"\nidentity = "{identity or "path:" + dev}"\nswap = "{swap}"\n'
            f'swap_priority = {priority}\nfilesystem = "{fs}"\nmountpoint = "{mount}"\nmount_options = {options}\n')


def write_profile(path: Path, drives: list[str], *, storage: str = "", recipe: str = "dsv4-flash-0731-tp2-400k",
                  phase: str = "serving", extra: str = ""):
    """A profile naming the given [[drives]] blocks; returns the loaded Config."""
    path.write_text(f'name = "systest"\nrecipe = "{recipe}"\nphase = "{phase}"\n'
                    f"[storage]\n{storage}\n{extra}\n" + "\n".join(drives))
    return load_config(path)


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def disk_digest(dev: str) -> str:
    """Every byte of a (small) drive: what a refusal must leave as it was."""
    h = hashlib.sha256()
    with open(dev, "rb") as f:
        while chunk := f.read(8 << 20):
            h.update(chunk)
    return h.hexdigest()


def storage(cfg: Path, capsys, *extra: str) -> tuple[int, str]:
    """`hostctl provision --only storage --yes` through the CLI: (exit status, stdout + stderr)."""
    from hostctl import cli

    capsys.readouterr()
    code = cli.main(["provision", "--only", "storage", "--yes", "--config", str(cfg), *extra])
    out = capsys.readouterr()
    return code, out.out + out.err


OWN_ROLES = 'planes_cache = "d1"\nexpert_store = "d1"\ncompile_cache = "d1"'


def provisioned(host, tmp_path: Path, capsys, *, size: str = "200M", fs: str = "ext4"):
    """One loop drive laid out by `provision --only storage` (drive d1 mounted at tmp_path/m1,
    every cache role on it) with a 2 MiB file of random bytes in its planes cache, synced:
    (drive, profile path, the file, its sha256)."""
    drive = host.drive(size, "t1")
    cfg = tmp_path / "p.toml"
    write_profile(cfg, [drive_toml("d1", drive.dev, tmp_path / "m1", fs=fs)], storage=OWN_ROLES)
    code, text = storage(cfg, capsys)
    assert code == 0, text
    data = tmp_path / "m1" / "moet-planes" / "layer-3.planes"
    data.write_bytes(os.urandom(2 << 20))
    os.sync()
    return drive, cfg, data, sha256(data)
