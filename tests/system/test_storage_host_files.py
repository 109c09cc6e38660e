"""The host files storage provisioning edits (/etc/fstab, the swap sysctl file) are checked
before the first disk is touched, in --dry-run too, on real loop drives: an immutable fstab used
to let a run partition, format, swap on and mount, then fail at the fstab naming a temporary
file; a symlinked fstab (configuration management, NixOS-like layouts) was replaced by a
regular file. Now: an edit that cannot land refuses the run with every byte of the drive kept
(and is a `plan` error), and a link root can trust is followed, its target edited in place, the
link kept.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from hostctl import cli, runner

from loopdrives import drive_toml, write_profile
from loopdrives import disk_digest as digest, storage
from loopdrives import host, restore_sysctls, sysroot  # noqa: F401  (fixtures)

pytestmark = pytest.mark.system
ROLES = 'planes_cache = "d1"\nexpert_store = "d1"\ncompile_cache = "d1"'


def one_drive(host, tmp_path: Path):
    drive = host.drive("160M", "f1")
    cfg = tmp_path / "p.toml"
    write_profile(cfg, [drive_toml("d1", drive.dev, tmp_path / "m1")], storage=ROLES)
    return drive, cfg


@pytest.fixture
def etc(sysroot: Path) -> Path:
    path = sysroot / "etc"
    path.mkdir(exist_ok=True)
    (path / "fstab").write_text("# the user's own line\nUUID=0b6f4c1e-6a52-4f0e-9d1b-5f2a7c3e8d10 / ext4 defaults 0 1\n")
    return path


@pytest.fixture
def immutable():
    """chattr +i on the files given; cleared after the test, whatever happens."""
    done: list[Path] = []

    def _set(path: Path) -> None:
        res = runner.run(["chattr", "+i", str(path)], timeout=10)
        assert res.ok, f"chattr +i {path}: {res.why()} (the test needs a filesystem with the immutable flag)"
        done.append(path)

    yield _set
    for path in done:
        runner.run(["chattr", "-i", str(path)], timeout=10)


@pytest.mark.parametrize("what", ["fstab", "its folder"])
def test_an_immutable_fstab_refuses_the_run_before_any_disk_is_touched(what, host, tmp_path, capsys, etc, immutable):
    drive, cfg = one_drive(host, tmp_path)
    before = digest(drive.dev)
    immutable(etc / "fstab" if what == "fstab" else etc)
    shown = "/etc/fstab" if what == "fstab" else "/etc"
    for extra in (("--dry-run",), ()):
        code, text = storage(cfg, capsys, *extra)
        assert code == 3, (extra, text)
        assert f"/etc/fstab: {'the file' if what == 'fstab' else 'its folder'} {shown} is immutable" in text, text
        assert f"chattr -i {shown}" in text and "nothing was changed" in text and ".tmp" not in text, text
        assert digest(drive.dev) == before, extra
    # `plan` says it as well: what provision would refuse is a plan error
    capsys.readouterr()
    code = cli.main(["plan", "--json", "--config", str(cfg)])
    doc = json.loads(capsys.readouterr().out)
    assert code == 1 and [p["code"] for p in doc["storage"]["problems"] if p["severity"] == "error"] \
        == ["storage.file.uneditable"], doc["storage"]["problems"]
    runner.run(["chattr", "-i", str(etc / "fstab" if what == "fstab" else etc)], timeout=10)
    code, text = storage(cfg, capsys)
    assert code == 0, text
    assert f"{tmp_path / 'm1'} ext4" in (etc / "fstab").read_text()


def test_a_symlinked_fstab_is_edited_where_it_leads_and_stays_a_link(host, tmp_path, capsys, etc):
    drive, cfg = one_drive(host, tmp_path)
    managed = etc / "fstab.d" / "managed"
    managed.parent.mkdir()
    os.replace(etc / "fstab", managed)
    (etc / "fstab").symlink_to("/etc/fstab.d/managed")  # absolute: a host path, as configuration management writes it
    user_line = managed.read_text()
    code, text = storage(cfg, capsys, "--dry-run")
    assert code == 0 and "edit /etc/fstab (a symlink: the edit lands on /etc/fstab.d/managed)" in text, text
    code, text = storage(cfg, capsys)
    assert code == 0, text
    assert (etc / "fstab").is_symlink() and os.readlink(etc / "fstab") == "/etc/fstab.d/managed"
    block = managed.read_text()
    assert block.startswith(user_line) and f"{tmp_path / 'm1'} ext4" in block
    code, text = storage(cfg, capsys)
    assert code == 0 and "storage: no changes" in text, text


@pytest.mark.parametrize("case", ["another user's link", "a link to nothing"])
def test_a_link_root_cannot_follow_refuses_the_run(case, host, tmp_path, capsys, etc):
    drive, cfg = one_drive(host, tmp_path)
    (etc / "fstab").unlink()
    if case == "a link to nothing":
        (etc / "fstab").symlink_to("/etc/fstab.d/gone")
        needle = "/etc/fstab: it is a symlink to /etc/fstab.d/gone, which does not exist"
    else:
        (etc / "fstab.real").write_text("# root's\n")
        (etc / "fstab").symlink_to("fstab.real")
        os.lchown(etc / "fstab", 4242, 4242)
        needle = "/etc/fstab is a symlink owned by uid 4242: root does not follow another user's link"
    before = digest(drive.dev)
    for extra in (("--dry-run",), ()):
        code, text = storage(cfg, capsys, *extra)
        assert code == 3 and needle in text, (extra, text)
        assert digest(drive.dev) == before
    assert (etc / "fstab").is_symlink()


def full_host(host, tmp_path: Path, etc: Path, extra: str = ""):
    """One drive, a profile for every part (`extra`: more of it), and what the system part's units
    call (root's, as install.sh leaves it): (drive, profile, /etc/systemd/system)."""
    drive = host.drive("160M", "f1")
    cfg = tmp_path / "p.toml"
    write_profile(cfg, [drive_toml("d1", drive.dev, tmp_path / "m1")], storage=ROLES, recipe="demo-cpu-tiny-moe",
                  extra='[memory]\nhost_reserve = "4GiB"\n[runtime]\napi_host = "127.0.0.1"\napi_port = 18597\n'
                        + extra)
    installed = etc.parent / "usr" / "local" / "bin" / "hostctl"
    installed.parent.mkdir(parents=True)
    installed.write_text("#!/bin/sh\n")
    installed.chmod(0o755)
    units = etc / "systemd" / "system"
    units.mkdir(parents=True)
    return drive, cfg, units


def refused_before_any_drive(drive, cfg: Path, capsys) -> list[str]:
    """`hostctl provision` (every part), --dry-run then --yes: each exits 3 with the drive's bytes
    unchanged; what each printed."""
    before = digest(drive.dev)
    texts = []
    for extra in (("--dry-run",), ("--yes",)):
        capsys.readouterr()
        code = cli.main(["provision", "--config", str(cfg), *extra])
        out = capsys.readouterr()
        text = out.out + out.err
        assert code == 3, (extra, text)
        assert digest(drive.dev) == before, extra
        texts.append(text)
    return texts


def test_a_unit_folder_the_system_part_cannot_write_refuses_the_whole_run_first(host, tmp_path, capsys, etc,
                                                                                   immutable):
    """`hostctl provision` (every part): the system part's files are checked before the storage
    part touches a drive, as the storage part's own are."""
    drive, cfg, units = full_host(host, tmp_path, etc)
    immutable(units)
    for text in refused_before_any_drive(drive, cfg, capsys):
        assert "the system part would have to write /etc/systemd/system/" in text, text
        assert "its folder /etc/systemd/system is immutable" in text and "nothing was changed" in text, text
    assert not (tmp_path / "m1").exists() or not any((tmp_path / "m1").iterdir())


def test_a_masked_runtime_unit_refuses_the_whole_run_first(host, tmp_path, capsys, etc):
    """The system part never renames its unit over a link (`systemctl mask`'s /dev/null): in a full
    `provision` that refusal comes before the storage part touches a drive."""
    drive, cfg, units = full_host(host, tmp_path, etc)
    (units / "hostctl-runtime.service").symlink_to("/dev/null")
    for text in refused_before_any_drive(drive, cfg, capsys):
        assert "/etc/systemd/system/hostctl-runtime.service -> /dev/null (the unit is masked)" in text, text
        assert "systemctl unmask hostctl-runtime.service" in text, text
    assert os.readlink(units / "hostctl-runtime.service") == "/dev/null"
    assert not (tmp_path / "m1").exists() or not any((tmp_path / "m1").iterdir())


def test_a_masked_power_unit_refuses_the_whole_run_first(host, tmp_path, capsys, etc):
    """The gpu part's own unit masked: a full `provision` refuses before the storage part touches
    a drive and before the system part installs anything (this machine has no GPU driver; the
    power unit is written whether or not the driver is loaded, so its refusal comes all the same)."""
    drive, cfg, units = full_host(host, tmp_path, etc, extra="[gpu]\npower_limit_w = 300\n")
    (units / "hostctl-power.service").symlink_to("/dev/null")
    for text in refused_before_any_drive(drive, cfg, capsys):
        assert "/etc/systemd/system/hostctl-power.service -> /dev/null (the unit is masked)" in text, text
        assert "systemctl unmask hostctl-power.service" in text, text
    assert os.readlink(units / "hostctl-power.service") == "/dev/null"
    assert not (units / "hostctl-runtime.service").exists(), "the system part acted before the gpu part's refusal"
    assert not (etc / "hostctl" / "hostctl.toml").exists()
    assert not (tmp_path / "m1").exists() or not any((tmp_path / "m1").iterdir())
