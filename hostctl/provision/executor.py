"""How provision runs on the one executor (hostctl.act): its command line, its lock, the schema
tag of its report, and the lock on each disk it may write to.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager

from hostctl import paths
from hostctl.act.lock import HostLock
from hostctl.errors import FailedError

COMMAND = "hostctl provision"
LOCK_FILE = "provision.lock"
SCHEMA = "hostctl.provision/v1"


@contextmanager
def provision_lock() -> Iterator[None]:
    """One lock for all of provision: a second run fails at once (naming the first) instead of
    deciding on a host the first one is changing. The same helper as up/down's lock."""
    with HostLock("provision", paths.state_dir() / LOCK_FILE, fix="wait for it to finish, then re-run"):
        yield


DISK_LOCK_WAIT_S = 10.0


@contextmanager
def disk_lock(path: str) -> Iterator[None]:
    """An exclusive BSD lock on a whole disk while provision may write to it: the convention of
    systemd's block-device locking, which udev honours (it does not probe a locked disk) and which
    keeps a second hostctl (another state directory) or a partitioning tool that locks off it.
    udev's own short shared locks are waited out."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise FailedError(f"cannot open {path} to lock it: {exc.strerror or exc}") from exc
    try:
        deadline = time.monotonic() + DISK_LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise FailedError(f"{path} is locked by another process (a second `hostctl provision`, or a "
                                      f"partitioning tool) for more than {DISK_LOCK_WAIT_S:g} s",
                                      fix=f"find it with `fuser -v {path}` or `lslocks`, wait for it, then re-run") from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)
