"""`hostctl init` on this machine's real facts, with loop drives: one blank, one with a foreign
ext4 filesystem on the whole disk, one with a foreign GPT partition. Without udev a loop device has
no serial, wwn or by-id name, so the profile names it `path:` with the warning comment. init only
reads: every drive's first and last MiB are unchanged afterwards. Needs root."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from hostctl.cli import main
from hostctl.config import load_config
from hostctl.facts.disks import probe_disks
from loopdrives import check, host, restore_sysctls, sysroot, wait_for  # noqa: F401  (fixtures)

pytestmark = pytest.mark.system


def cli(argv, capsys):
    code = main(argv)
    c = capsys.readouterr()
    return code, c.out, c.err


def prose(text: str) -> str:
    return " ".join(" ".join(line[1:].split()) for line in text.splitlines() if line.startswith("#"))


@pytest.fixture
def drives(host):
    # The foreign drives first: attached before the blank one, they sort before it.
    foreign = host.drive("256M", "foreign")
    check(["mkfs.ext4", "-q", "-F", "-L", "photos", foreign.dev])
    gpt = host.drive("256M", "gpt")
    check(["sgdisk", "--new=1:0:+64M", "--change-name=1:photos", gpt.dev])
    check(["partx", "-u", gpt.dev])
    wait_for([gpt.part(1)])
    check(["mkfs.ext4", "-q", "-F", gpt.part(1)])
    blank = host.drive("256M", "blank")
    seen = {d.path: d for d in probe_disks().devices}
    if seen[foreign.dev].fs_type != "ext4":
        pytest.fail(f"the disk facts read {foreign.dev} (whole-disk ext4) as blank: with no udev, one `blkid -p` "
                    "over several devices stops at the first blank one (issue 10, class 1); init can only be as "
                    "right as the facts")
    before = {d.dev: d.table_bytes() for d in (foreign, gpt, blank)}
    yield {"foreign": foreign, "gpt": gpt, "blank": blank}
    assert {d.dev: d.table_bytes() for d in (foreign, gpt, blank)} == before, "init changed a drive"


def test_named_loop_drive_is_written_loads_and_plans(drives, tmp_path, capsys):
    blank = drives["blank"]
    out = tmp_path / "hostctl.toml"
    code, stdout, err = cli(["init", "--drives", f"path:{blank.dev}", "--out", str(out)], capsys)
    assert code == 0, err
    config = load_config(out)
    assert [str(d.identity) for d in config.profile.drives] == [f"path:{blank.dev}"]
    text = out.read_text()
    assert "named by its kernel path, which can change between boots" in prose(text)
    assert "# CONFIRM" not in text  # named, not proposed
    assert f"drives[0].identity path:{blank.dev}: kernel device names can change" in err
    code, stdout, err = cli(["plan", "--config", str(out)], capsys)
    assert code == 0, stdout + err
    # the storage planner lays it out, and refuses nothing
    code, stdout, err = cli(["provision", "--only", "storage", "--dry-run", "--config", str(out)], capsys)
    assert code == 0, stdout + err
    name = config.profile.drives[0].name
    assert f"drive {name} (path:{blank.dev}, {blank.dev}, 256 MiB): blank (proven: first and last MiB zero, no table, no signature); lay out" in stdout
    assert "dry run:" in stdout and "refused" not in stdout


def test_foreign_drives_are_never_proposed(drives, tmp_path, capsys):
    out = tmp_path / "hostctl.toml"
    code, stdout, err = cli(["init", "--out", str(out)], capsys)
    assert code == 0, err
    profile = tomllib.loads(out.read_text())
    named = [d["identity"] for d in profile.get("drives", [])]
    assert f"path:{drives['foreign'].dev}" not in named
    assert f"path:{drives['gpt'].dev}" not in named
    assert f"path:{drives['blank'].dev}" in named  # blank: proposed, for the user to confirm
    words = prose(out.read_text())
    assert f"{drives['foreign'].dev} (path:{drives['foreign'].dev}, 256 MiB): it holds a ext4 filesystem on the whole disk" in words
    assert f"{drives['gpt'].dev} (path:{drives['gpt'].dev}, 256 MiB): it holds partition {drives['gpt'].part(1)} ('photos')" in words
    assert "CONFIRM: " in words
    code, stdout, err = cli(["plan", "--config", str(out)], capsys)
    assert code == 0, stdout + err


@pytest.mark.parametrize("which", ["foreign", "gpt"])
def test_naming_a_foreign_drive_is_bad_input(which, drives, tmp_path, capsys):
    dev = drives[which].dev
    out = tmp_path / "hostctl.toml"
    code, stdout, err = cli(["init", "--drives", f"path:{dev}", "--out", str(out)], capsys)
    assert code == 2 and stdout == ""
    assert f"--drives path:{dev}: {dev} would be refused: it holds" in err
    assert not out.exists()


def test_an_existing_profile_is_not_overwritten(drives, tmp_path, capsys):
    out = tmp_path / "hostctl.toml"
    out.write_text("# mine\n")
    code, stdout, err = cli(["init", "--drives", f"path:{drives['blank'].dev}", "--out", str(out)], capsys)
    assert code == 3 and "exists; hostctl init never writes over a profile" in err
    assert out.read_text() == "# mine\n"


def test_conversion_swap_on_a_4tb_loop_drive_reaches_the_storage_plan(host, tmp_path, capsys):
    """On a sparse 4 TB drive the recipe's first-conversion swap is laid out in full: the profile's
    swap is what the storage plan's sgdisk command creates."""
    drive = host.drive("4T", "big")
    out = tmp_path / "hostctl.toml"
    code, _, err = cli(["init", "--recipe", "dsv4-flash-0731-tp2-400k", "--drives", f"path:{drive.dev}",
                        "--out", str(out)], capsys)
    assert code == 0, err
    assert "does not fit this host" in err  # no GPU here: written because it was asked for
    config = load_config(out)
    mem = int(Path("/proc/meminfo").read_text().split()[1]) * 1024
    (d,) = config.profile.drives
    need = 220 * 1024**3
    assert d.swap % (1 << 20) == 0 and need - (1 << 20) < mem + d.swap <= need + (1 << 20)
    code, stdout, err = cli(["provision", "--only", "storage", "--dry-run", "--config", str(out)], capsys)
    assert code == 0, stdout + err
    assert f"--new=1:0:+{d.swap >> 20}M" in stdout and f"--change-name=1:hostctl-swap-{d.name}" in stdout
