"""The sd_notify protocol, spoken directly: READY=1, WATCHDOG=1, STOPPING=1 and STATUS= to the
socket systemd names in $NOTIFY_SOCKET, and the watchdog interval it asks for.

Why not a package: the protocol is one datagram of newline-separated KEY=VALUE to a unix socket
(an abstract one when the path starts with '@'; see sd_notify(3)). The small PyPI packages
(sdnotify, systemd-python) are either unmaintained or a C extension that needs libsystemd's
headers at install time, and hostctl keeps its dependencies to a chosen few (pyproject.toml);
twenty lines here have none of these problems and are tested against a real socket (tests/unit/test_supervise.py) and a real systemd (tests/system/test_supervise_systemd.py).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping

SOCKET_ENV = "NOTIFY_SOCKET"


def _address(path: str) -> str:
    return "\0" + path[1:] if path.startswith("@") else path


def notify(state: str, env: Mapping[str, str] | None = None) -> bool:
    """Send one notification; False when not under a notifying service manager or the send failed
    (a lost WATCHDOG=1 is what the watchdog is for; it must not end the supervisor)."""
    path = (os.environ if env is None else env).get(SOCKET_ENV)
    if not path or path[0] not in "/@":
        return False
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as s:
            s.connect(_address(path))
            s.sendall(state.encode())
        return True
    except OSError:
        return False


def watchdog_interval_s(env: Mapping[str, str] | None = None, pid: int | None = None) -> float | None:
    """systemd's WatchdogSec= as WATCHDOG_USEC (for this process: WATCHDOG_PID, when set, must be
    ours); None when no watchdog is asked for."""
    env = os.environ if env is None else env
    usec, owner = env.get("WATCHDOG_USEC"), env.get("WATCHDOG_PID")
    if not usec:
        return None
    if owner and owner != str(os.getpid() if pid is None else pid):
        return None
    try:
        value = int(usec)
    except ValueError:
        return None
    return value / 1e6 if value > 0 else None
