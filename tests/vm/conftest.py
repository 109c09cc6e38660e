"""Host side of the whole-host tier: the guest image (built or found in the cache once per
session) and a summary of how long the image and each guest took, printed at the end."""

from __future__ import annotations

import functools
import os
import shutil

import pytest

from need import missing

# tests/vm/guest/ is copied into the guest and run there (check_*.py), never on the host.
collect_ignore = ["guest"]

TIMINGS: list[str] = []


def why_not() -> str | None:
    """Why this machine cannot run the vm tier, or None."""
    from vm.image import missing_tools

    if os.geteuid() != 0:
        return "needs root (debootstrap, chroot, loop-free image builds)"
    missing = missing_tools()
    if missing:
        return f"missing {', '.join(missing)} (apt-get install qemu-system-x86 debootstrap e2fsprogs; .ci/run does)"
    return None


@functools.cache
def the_image():
    """The guest image, built or found once per session (early.py may ask first)."""
    from vm.image import ensure_image

    image = ensure_image()
    TIMINGS.append(f"guest image {image.key} (base {image.base_key}): "
                   f"{'built ' + '+'.join(image.built) if image.built else 'from the cache'} in {image.seconds:.1f} s")
    return image


@pytest.fixture(scope="session")
def guest_image():
    why = why_not()
    if why:
        missing(f"vm tier cannot run: {why}")
    return the_image()


def pytest_terminal_summary(terminalreporter):
    if TIMINGS:
        terminalreporter.section("whole-host guests")
        for line in TIMINGS:
            terminalreporter.write_line(line)


def keep_runs() -> bool:
    """HOSTCTL_VM_KEEP=1 keeps each run's disks (drives, results, console) for debugging."""
    return os.environ.get("HOSTCTL_VM_KEEP") == "1"


def remove_disks(run_dir) -> None:
    if keep_runs():
        return
    for p in run_dir.glob("*.img"):
        p.unlink(missing_ok=True)
    if not any(run_dir.iterdir()):
        shutil.rmtree(run_dir, ignore_errors=True)
