"""The states a kill -9 during hostctl's own mount of a fresh xfs can leave, each built exactly
(no timed kill), so where the kill lands is not left to chance as in the timed kill matrix
(test_storage_safety.py): the re-run converges on each, and the file written before is intact.

A kill at `mount` lands after the partition's unfinished bit was cleared (the filesystem is
made and may hold data from then on) and before the fstab edit:
- the mount finished in the kernel (mount(2) completes after its caller is killed): hostctl's
  filesystem mounted where the profile says, no fstab line yet;
- the filesystem left with its log to replay (the mount, or the host, stopped mid-way): xfs_repair
  -n calls that "needs log recovery", which mounting does; it is hostctl's own filesystem, not
  damage, and must not be refused with "repair it with xfs_repair".
"""

from __future__ import annotations

from pathlib import Path

import pytest

from hostctl import paths, runner
from hostctl.facts.mounts import read_mountinfo

from loopdrives import check, provisioned, sha256, storage
from loopdrives import host, restore_sysctls, sysroot  # noqa: F401  (fixtures)

pytestmark = pytest.mark.system


def before_the_fstab_edit() -> None:
    """The kill landed before hostctl's fstab block was written."""
    (paths.system_path("/etc/fstab")).write_text("# the user's own line\n")


def converges(cfg: Path, capsys, drive, mount: Path, data: Path, want: str) -> None:
    code, text = storage(cfg, capsys)
    assert code == 0 and "xfs_repair" not in text and "mkfs" not in text, text
    code, text = storage(cfg, capsys)
    assert code == 0 and "storage: no changes\n" in text, text
    assert any(m.entry.source == drive.part(2) and m.entry.target == str(mount) for m in read_mountinfo())
    assert "# BEGIN hostctl storage" in paths.system_path("/etc/fstab").read_text()
    assert sha256(data) == want


def test_the_mount_finished_in_the_kernel_after_the_kill(host, tmp_path, capsys):
    drive, cfg, data, want = provisioned(host, tmp_path, capsys, size="320M", fs="xfs")  # mkfs.xfs: 300 MiB
    mount = tmp_path / "m1"
    before_the_fstab_edit()
    converges(cfg, capsys, drive, mount, data, want)


def test_an_xfs_left_with_its_log_to_replay_is_mounted_not_refused(host, tmp_path, capsys):
    drive, cfg, data, want = provisioned(host, tmp_path, capsys, size="320M", fs="xfs")  # mkfs.xfs: 300 MiB
    mount = tmp_path / "m1"
    check(["xfs_io", "-x", "-c", "shutdown", str(mount)])  # the log as a crash leaves it
    check(["umount", str(mount)])
    check(["swapoff", drive.part(1)])
    before_the_fstab_edit()
    assert runner.run(["xfs_repair", "-n", drive.part(2)], timeout=60).returncode == 1  # "needs log recovery"
    converges(cfg, capsys, drive, mount, data, want)
