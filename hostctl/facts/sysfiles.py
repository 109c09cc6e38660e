"""System files as facts: what hostctl reads of the files it manages (/etc/fstab, the swap sysctl
file, the systemd units and their enablement, the installed profile, plain directories) before a
provision part decides, so that deciding stays pure.

Everything is read through a Reader: LocalReader reads this machine (files under the sysroot,
HOSTCTL_SYSROOT in tests); `hostctl verify --host` passes one that reads another machine through
testinfra (hostctl/verify/remote.py). Paths given to a Reader are host paths (/etc/fstab); the
reader maps them under its sysroot, except `real_*`, which read the running system itself
(/run/systemd/system says whether systemd is PID 1).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from pydantic import ConfigDict, Field

from hostctl import paths, runner
from hostctl.data import Data

SYSTEMCTL_TIMEOUT = 60


class Stat(Data):
    model_config = ConfigDict(frozen=True)

    is_dir: bool
    uid: int
    gid: int


class Reader(Protocol):
    sysroot: str  # "/" on a real host

    def read_bytes(self, host_path: str) -> bytes | None: ...  # None: absent

    def stat(self, host_path: str) -> Stat | None: ...  # None: absent

    def readlink(self, host_path: str) -> str | None: ...  # None: not a symlink

    def real_is_dir(self, path: str) -> bool: ...

    def run(self, argv: list[str]) -> tuple[int, str]: ...  # (exit status, stdout); 127: not installed


class LocalReader:
    """This machine, under the current sysroot."""

    def __init__(self) -> None:
        self.sysroot = str(paths.sysroot())

    def read_bytes(self, host_path: str) -> bytes | None:
        try:
            return paths.system_path(host_path).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def stat(self, host_path: str) -> Stat | None:
        try:
            st = paths.system_path(host_path).stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        return Stat(is_dir=os.path.isdir(paths.system_path(host_path)), uid=st.st_uid, gid=st.st_gid)

    def readlink(self, host_path: str) -> str | None:
        try:
            return os.readlink(paths.system_path(host_path))
        except OSError:
            return None

    def real_is_dir(self, path: str) -> bool:
        return Path(path).is_dir()

    def run(self, argv: list[str]) -> tuple[int, str]:
        res = runner.run(argv, timeout=SYSTEMCTL_TIMEOUT)
        return (127 if res.missing else res.returncode), res.stdout


def text_of(data: bytes | None) -> str | None:
    return None if data is None else data.decode(errors="replace")


# ---------------------------------------------------------------- storage's files


class DirState(Data):
    model_config = ConfigDict(frozen=True)

    exists: bool
    owner: tuple[int, int] | None = None


class SystemFiles(Data):
    """What the storage part reads of its system files (under the sysroot) before deciding."""

    fstab: str | None = None
    sysctl: str | None = None
    plain_dirs: dict[str, DirState] = Field(default_factory=dict)  # role directories not on a drive


def read_storage_files(reader: Reader, fstab_path: str, sysctl_path: str, plain_dirs: list[str]) -> SystemFiles:
    dirs: dict[str, DirState] = {}
    for directory in plain_dirs:
        st = reader.stat(directory)
        dirs[directory] = DirState(exists=False) if st is None else DirState(exists=st.is_dir, owner=(st.uid, st.gid))
    return SystemFiles(fstab=text_of(reader.read_bytes(fstab_path)), sysctl=text_of(reader.read_bytes(sysctl_path)),
                       plain_dirs=dirs)


# ---------------------------------------------------------------- units and /etc files (system, gpu)


class ManagedFiles(Data):
    """The files, links and units a part manages, as they are now."""

    files: dict[str, bytes | None] = Field(default_factory=dict)  # host path -> bytes (None: absent)
    links: dict[str, str | None] = Field(default_factory=dict)  # host path -> symlink target (None: none)
    enabled: dict[str, bool] = Field(default_factory=dict)  # unit -> `systemctl is-enabled` says enabled
    present: dict[str, bool] = Field(default_factory=dict)  # host path -> is a file (the hostctl binary)
    systemctl: bool = True  # installed
    systemd_running: bool = False  # PID 1 of this (real, not test-sysroot) host


def systemd_running(reader) -> bool:
    """sd_booted(): systemd is PID 1 of the host the reader reads (/run/systemd/system exists), and
    the reader reads that host itself, not a test sysroot. The one probe for it (local or over SSH)."""
    return reader.sysroot in ("", "/") and reader.real_is_dir("/run/systemd/system")


def systemctl_argv(sysroot: str, *args: str) -> list[str]:
    """systemctl on the host, or offline on a sysroot (`--root`): tests never touch the running systemd."""
    return ["systemctl", *([] if sysroot in ("", "/") else [f"--root={sysroot}"]), *args]


def read_managed(reader: Reader, *, files: list[str] = (), links: list[str] = (), units: list[str] = (),
                 present: list[str] = ()) -> ManagedFiles:
    snap = ManagedFiles()
    snap.systemd_running = systemd_running(reader)
    for f in files:
        snap.files[f] = reader.read_bytes(f)
    for link in links:
        snap.links[link] = reader.readlink(link)
    for p in present:
        st = reader.stat(p)
        snap.present[p] = st is not None and not st.is_dir
    if units:
        rc, _ = reader.run(["systemctl", "--version"])
        snap.systemctl = rc != 127
        for unit in units:
            if not snap.systemctl:
                snap.enabled[unit] = False
                continue
            rc, out = reader.run(systemctl_argv(reader.sysroot, "is-enabled", unit))
            snap.enabled[unit] = rc == 0 and out.strip() == "enabled"
    return snap
