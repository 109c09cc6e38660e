"""The record of the running supervisor (`hostctl up --foreground`, supervise.py) in the state
directory, and stopping it: `down` ends a supervisor first, or it would see the runtime's death
and restart nothing. Below supervise.py and lifecycle.py, which both use it.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable

from hostctl import paths
from hostctl.facts import processes
from hostctl.safefs import write_file

SUPERVISOR_FILE = "supervisor.json"  # pid of the running supervisor: `down` stops it first


def save(container: str, since: str) -> None:
    """Record this process as the supervisor of `container`."""
    write_file(paths.state_dir() / SUPERVISOR_FILE,
               json.dumps({"pid": os.getpid(), "start": processes.start_ticks(os.getpid()), "container": container,
                           "since": since}) + "\n")


def _record() -> dict | None:
    """The recorded supervisor, or None when there is none or it is not a record (bounded like any
    outside file: a 4,000-digit pid would reach os.kill as an OverflowError)."""
    from hostctl.errors import InputError, UntrustedPathError
    from hostctl.safeload import MAX_CONFIG_BYTES, load_json

    try:
        doc = load_json(paths.state_dir() / SUPERVISOR_FILE, "supervisor record", limit=MAX_CONFIG_BYTES)
    except (InputError, UntrustedPathError):
        return None
    return doc if isinstance(doc, dict) else None


def clear() -> None:
    """Remove the record when it is this process's."""
    doc = _record()
    if doc is not None and doc.get("pid") == os.getpid():
        with contextlib.suppress(OSError):
            (paths.state_dir() / SUPERVISOR_FILE).unlink()


def running() -> dict | None:
    """The supervisor recorded in the state directory, when its process still runs."""
    try:
        doc = _record()
        if doc is None:
            return None
        pid, start = int(doc["pid"]), int(doc["start"])
        os.kill(pid, 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    # A reused pid is not ours: the process must be the one that wrote the record (its name
    # proves nothing: any Python of a venv under a "hostctl" directory has it in its cmdline).
    return doc if processes.start_ticks(pid) == start else None


def stop_running(say: Callable[[str], None], wait_s: float = 170) -> bool:
    """`down` while a supervisor runs: SIGTERM it (it takes the runtime down and exits 0, so
    systemd does not restart it) and wait for it to end."""
    doc = running()
    if doc is None:
        return False
    pid = int(doc["pid"])
    say(f"stopping the supervisor (pid {pid}, `hostctl up --foreground`): it takes the runtime down")
    try:
        os.kill(pid, signal.SIGTERM)
    except OSError:
        return False
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and processes.alive(pid):
        time.sleep(0.2)
    return True

