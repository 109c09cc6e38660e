"""The host lock: one `up` or `down` at a time on a host (state_dir()/lock, flock), and the same for
provision (state_dir()/provision.lock), tune and a model pull (their own files).

A second command does not wait: it fails at once and names the holder, because an `up` can
legitimately run for the whole load timeout and a queued `down` that fires afterwards would
surprise everyone. The kernel drops a flock when its holder dies, so a crashed hostctl never
leaves a stale lock behind.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from datetime import datetime, timezone
from pathlib import Path

from hostctl import paths
from hostctl.errors import FailedError

LOCK_FILE = "lock"


class HostLock:
    def __init__(self, operation: str, path: Path | None = None, *, fix: str | None = None):
        self.operation = operation
        self.path = path or paths.state_dir() / LOCK_FILE
        self.fix = fix or "wait for it to finish (an `up` ends by its load timeout at the latest), then run this again"
        self._fd: int | None = None

    def __enter__(self) -> "HostLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)  # never through a link
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = self._holder(fd)
            os.close(fd)
            raise FailedError(
                f"another hostctl {holder.get('operation', 'up/down')} is running on this host "
                f"(pid {holder.get('pid', '?')}, since {holder.get('since', '?')}); not starting `{self.operation}`",
                details=[f"lock: {self.path}"],
                fix=self.fix,
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"operation": self.operation, "pid": os.getpid(),
                                  "since": datetime.now(timezone.utc).isoformat(timespec="seconds")}).encode(), 0)
        self._fd = fd
        return self

    @staticmethod
    def _holder(fd: int) -> dict:
        # The holder writes its record right after taking the lock: give it a moment.
        for _ in range(10):
            try:
                data = json.loads(os.pread(fd, 4096, 0).decode() or "{}")
                if data:
                    return data
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        return {}

    def __exit__(self, *exc) -> None:
        if self._fd is not None:
            os.ftruncate(self._fd, 0)
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None
