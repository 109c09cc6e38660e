"""`hostctl plan` says what `provision --dry-run` will refuse, on real loop drives: two drives of
the profile naming one disk (a path and a link to it), and a swap larger than the drive, used
to plan clean (exit 0) and be refused only by provision. Now both exit non-zero, naming the same
thing, and nothing is written to the drive.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hostctl import cli

from loopdrives import drive_toml, write_profile
from loopdrives import host, restore_sysctls, sysroot  # noqa: F401  (fixtures)

pytestmark = pytest.mark.system
ROLES = 'planes_cache = "d1"\nexpert_store = "d1"\ncompile_cache = "d1"'


def run(argv: list[str], capsys) -> tuple[int, str, str]:
    capsys.readouterr()
    code = cli.main(argv)
    out = capsys.readouterr()
    return code, out.out, out.err


def both(cfg: Path, capsys) -> tuple[tuple[int, str], tuple[int, str], dict]:
    code, out, err = run(["plan", "--config", str(cfg)], capsys)
    jcode, jout, _ = run(["plan", "--json", "--config", str(cfg)], capsys)
    assert jcode == code
    pcode, pout, perr = run(["provision", "--only", "storage", "--dry-run", "--config", str(cfg)], capsys)
    return (code, out + err), (pcode, pout + perr), json.loads(jout)


@pytest.fixture
def dev_alias(tmp_path):
    """A second name for a device under /dev (a `path:` identity must be one), removed after."""
    link = Path(f"/dev/hostctl-test-{os.getpid()}-{tmp_path.name[-8:]}")

    def _make(dev: str) -> Path:
        link.symlink_to(dev)
        return link

    yield _make
    link.unlink(missing_ok=True)


def test_two_drives_on_one_disk_are_a_plan_error(host, tmp_path, capsys, dev_alias):
    drive = host.drive("160M", "p1")
    link = dev_alias(drive.dev)
    cfg = tmp_path / "p.toml"
    write_profile(cfg, [drive_toml("d1", drive.dev, tmp_path / "m1"),
                        drive_toml("d2", drive.dev, tmp_path / "m2", identity=f"path:{link}")],
                  storage=ROLES)
    (code, text), (pcode, ptext), doc = both(cfg, capsys)
    assert pcode == 2 and "are the same disk" in ptext, ptext
    assert code == 1 and "are the same disk" in text, text
    assert [p["code"] for p in doc["storage"]["problems"] if p["severity"] == "error"] == ["storage.drives.invalid"]


def test_a_swap_larger_than_the_drive_is_a_plan_error(host, tmp_path, capsys):
    drive = host.drive("160M", "p2")
    cfg = tmp_path / "p.toml"
    write_profile(cfg, [drive_toml("d1", drive.dev, tmp_path / "m1", swap="99999999999999999999TiB")],
                  storage=ROLES)
    (code, text), (pcode, ptext), doc = both(cfg, capsys)
    assert pcode == 3 and "it is smaller than the layout" in ptext, ptext
    assert code == 1 and "provision would refuse drive d1" in text and "it is smaller than the layout" in text, text
    assert [p["code"] for p in doc["storage"]["problems"] if p["severity"] == "error"] == ["storage.drive.refused"]
