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
import stat
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


class WriteTarget(Data):
    """Where a write to one of the files hostctl edits would land, and what would stop it there:
    read before any disk is changed, so that a run never partitions and formats only to fail at
    the fstab (an immutable file, a read-only /etc, configuration management's symlink)."""

    host_path: str  # the path hostctl edits: /etc/fstab
    real_path: str  # the host path the edit lands on: the link's target when host_path is a symlink
    link: str | None = None  # what the symlink says (None: not a link)
    problem: str | None = None  # why it cannot be written in place (None: it can)


class SystemFiles(Data):
    """What the storage part reads of its system files (under the sysroot) before deciding."""

    fstab: str | None = None
    sysctl: str | None = None
    plain_dirs: dict[str, DirState] = Field(default_factory=dict)  # role directories not on a drive
    # host path -> where its edit lands and what would stop it (read on this machine only)
    targets: dict[str, WriteTarget] = Field(default_factory=dict)


# chattr's flags (linux/fs.h): the kernel refuses every write, rename and unlink of such a file
FS_IOC_GETFLAGS = 0x80086601
FS_IMMUTABLE_FL, FS_APPEND_FL = 0x10, 0x20
MAX_LINKS = 8


def _under_root(host_path: str, link: str) -> str:
    """A symlink's target as a host path: absolute targets name the host (the sysroot's root)."""
    return os.path.normpath(link if link.startswith("/") else os.path.join(os.path.dirname(host_path), link))


def write_target(host_path: str) -> WriteTarget:
    """Follow `host_path` through the symlinks root can trust (root's own, up to MAX_LINKS) to the
    file an edit would replace, and say what would stop that edit: the file or its folder
    immutable or append-only, a read-only filesystem, another user's link, a link to nothing."""
    from hostctl.safefs import owner_name, trusted_uids

    path, link = host_path, None
    for _ in range(MAX_LINKS):
        real = paths.system_path(path)
        try:
            st = os.lstat(real)
        except FileNotFoundError:
            if link is not None:
                return WriteTarget(host_path=host_path, real_path=path, link=link,
                                   problem=f"it is a symlink to {path}, which does not exist")
            break
        except OSError as exc:
            return WriteTarget(host_path=host_path, real_path=path, link=link, problem=f"{path}: {exc.strerror}")
        if not stat.S_ISLNK(st.st_mode):
            if not stat.S_ISREG(st.st_mode):
                return WriteTarget(host_path=host_path, real_path=path, link=link, problem=f"{path} is not a regular file")
            break
        if st.st_uid not in trusted_uids():
            return WriteTarget(host_path=host_path, real_path=path, link=link,
                               problem=f"{path} is a symlink owned by {owner_name(st.st_uid)}: root does not follow "
                                       "another user's link")
        link = link or os.readlink(real)
        path = _under_root(path, os.readlink(real))
    else:
        return WriteTarget(host_path=host_path, real_path=path, link=link, problem=f"more than {MAX_LINKS} symlinks")
    target = WriteTarget(host_path=host_path, real_path=path, link=link)
    folder = os.path.dirname(path)
    for what, where in (("the file", path), ("its folder", folder)):
        flags = _chattr_flags(paths.system_path(where))
        if flags & FS_IMMUTABLE_FL:
            target.problem = f"{what} {where} is immutable (`lsattr` shows i; `chattr -i {where}` clears it)"
        elif flags & FS_APPEND_FL:
            target.problem = f"{what} {where} is append-only (`lsattr` shows a; `chattr -a {where}` clears it)"
        if target.problem:
            return target
    try:
        if os.statvfs(paths.system_path(folder)).f_flag & os.ST_RDONLY:
            target.problem = f"{folder} is on a read-only filesystem"
    except OSError:
        pass  # a folder that does not exist yet is made by the write
    return target


def _chattr_flags(path: Path) -> int:
    import fcntl
    import struct

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return 0
    try:
        return struct.unpack("l", fcntl.ioctl(fd, FS_IOC_GETFLAGS, b"\0" * 8))[0]
    except OSError:
        return 0  # a filesystem without these flags (tmpfs, some overlays): nothing to stop a write
    finally:
        os.close(fd)


def read_storage_files(reader: Reader, fstab_path: str, sysctl_path: str, plain_dirs: list[str]) -> SystemFiles:
    dirs: dict[str, DirState] = {}
    for directory in plain_dirs:
        st = reader.stat(directory)
        dirs[directory] = DirState(exists=False) if st is None else DirState(exists=st.is_dir, owner=(st.uid, st.gid))
    # where the edits would land is read on this machine only (the run that edits them is local)
    targets = {p: write_target(p) for p in (fstab_path, sysctl_path)} if isinstance(reader, LocalReader) else {}
    fstab_now = sysctl_now = None
    for host_path in (fstab_path, sysctl_path):
        t = targets.get(host_path)
        # through the link root trusts; another user's link is not read either
        data = None if t is not None and t.link is not None and t.problem else \
            reader.read_bytes(t.real_path if t is not None else host_path)
        if host_path == fstab_path:
            fstab_now = text_of(data)
        else:
            sysctl_now = text_of(data)
    return SystemFiles(fstab=fstab_now, sysctl=sysctl_now, plain_dirs=dirs, targets=targets)


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
