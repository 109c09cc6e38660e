"""hostctl.facts.processes on real processes: a running child, a zombie, one that has been
reaped, and a process group."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from hostctl.facts import processes


def test_alive_start_and_group_of_a_child():
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], start_new_session=True)
    try:
        assert processes.alive(child.pid)
        start = processes.start_ticks(child.pid)
        assert start is not None and start >= processes.start_ticks(os.getpid())
        assert processes.in_group(child.pid) == [child.pid]  # its own session, so its own group
        child.kill()
        for _ in range(100):  # killed but not reaped: a zombie, which runs no more
            if not processes.alive(child.pid):
                break
            time.sleep(0.02)
        assert not processes.alive(child.pid)
        assert processes.in_group(child.pid) == [child.pid]  # not yet reaped: still counted
    finally:
        child.kill()
        child.wait()
    assert not processes.alive(child.pid) and processes.start_ticks(child.pid) is None
    assert processes.in_group(child.pid) == []
