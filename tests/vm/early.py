"""The storage guest started early, beside the unit tier, when the session holds both.

The storage guest is the longest item of the suite (about 5.5 min under TCG on CI's machine:
two boots, provision and the in-guest checks) and runs on one emulated CPU; the unit tier runs
on one host CPU and asserts no timing. Started when the first unit test is set up (an autouse
fixture in tests/conftest.py), the guest runs on the machine's other CPU, and the vm tier's
`storage_run` fixture takes the running guest instead of booting one, then waits for it to its
usual deadline (TIMEOUT_S counts from QEMU's start either way). Not earlier: the system tier's
runtime boots use every CPU and their supervisors judge time.

A guest nobody took (the session stopped first) is killed by its PID at the end of the
session (pytest_sessionfinish); QEMU also dies with the test process (qemu.py).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vm.guests import StorageStart

STORAGE_FIXTURE = "storage_run"
LABEL = "storage (started beside the unit tier)"

_storage: StorageStart | None = None
_started = False  # tried once per session, whatever came of it


def start_storage(items, tmp_path_factory) -> None:
    """Start the storage guest if a selected test needs it and this machine can run it."""
    global _storage, _started
    if _started:
        return
    _started = True
    if not any(STORAGE_FIXTURE in getattr(i, "fixturenames", ()) for i in items):
        return
    from vm.conftest import the_image, why_not
    from vm.guests import start_storage as start

    if why_not() is not None:  # the vm tier's own fixture says why (and fails under CI=true)
        return
    try:
        _storage = start(the_image(), tmp_path_factory.mktemp("vm-storage"), LABEL)
    except Exception:  # noqa: BLE001  (the storage_run fixture starts it again and fails with this error there)
        _storage = None


def take_storage() -> StorageStart | None:
    """The guest started early, handed over once."""
    global _storage
    started, _storage = _storage, None
    return started


def stop_untaken() -> None:
    started = take_storage()
    if started is not None:
        from vm.conftest import remove_disks

        started.running.kill()
        remove_disks(started.run_dir)
