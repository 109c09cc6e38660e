"""hostctl.safefs: root neither follows nor writes through what another local user planted.

The attacker is `nobody` (uid 65534): the planted links and folders are chowned to it, and the
victim is a root-owned file that must come out unchanged. Needs root (chown); CI runs as root.
"""

from __future__ import annotations

import os
import stat

import pytest

from hostctl import safefs
from need import needs

NOBODY = 65534
pytestmark = needs(os.geteuid() == 0, "needs root: the attacks chown planted files to nobody")


@pytest.fixture(autouse=True)
def _no_sudo(monkeypatch):
    monkeypatch.delenv("SUDO_UID", raising=False)


@pytest.fixture
def victim(tmp_path):
    v = tmp_path / "victim"
    v.mkdir(mode=0o700)
    f = v / "shadow"
    f.write_text("root's secret\n")
    os.chmod(f, 0o600)
    return f


def _shared(tmp_path, mode=0o1777):
    """A folder everyone can write, as /tmp (sticky) or a careless 0777 one."""
    d = tmp_path / f"shared{mode:o}"
    d.mkdir()
    os.chmod(d, mode)
    return d


def _plant_link(at, to):
    os.symlink(to, at)
    os.lchown(at, NOBODY, NOBODY)


def test_write_through_another_users_link_is_refused(tmp_path, victim):
    shared = _shared(tmp_path)
    _plant_link(shared / "out", victim.parent)
    with pytest.raises(safefs.UntrustedPathError) as exc:
        safefs.write_file(shared / "out" / "shadow", "owned\n")
    assert victim.read_text() == "root's secret\n" and os.stat(victim).st_uid == 0
    assert "nobody" in exc.value.message and exc.value.exit_code == 3


def test_folder_of_another_user_is_refused(tmp_path):
    shared = _shared(tmp_path)
    theirs = shared / "project"
    theirs.mkdir()
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(safefs.UntrustedPathError):
        safefs.write_file(theirs / "compose.yaml", "x")
    assert os.listdir(theirs) == []


def test_world_writable_folder_without_sticky_bit_is_refused(tmp_path):
    open_ = _shared(tmp_path, 0o777)
    with pytest.raises(safefs.UntrustedPathError):
        safefs.write_file(open_ / "f", "x")
    with pytest.raises(safefs.UntrustedPathError):
        safefs.check_dir(open_ / "below")  # through it, too


def test_own_link_in_sticky_folder_is_followed(tmp_path):
    shared = _shared(tmp_path)
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, shared / "mine")
    safefs.write_file(shared / "mine" / "f", "x", mode=0o640)
    assert (real / "f").read_text() == "x" and stat.S_IMODE(os.stat(real / "f").st_mode) == 0o640


def test_no_follow_refuses_even_own_links(tmp_path):
    real = tmp_path / "real"
    real.mkdir()
    os.symlink(real, tmp_path / "link")
    with pytest.raises(safefs.UntrustedPathError):
        safefs.open_dir(tmp_path / "link", follow=False)


def test_replacing_another_users_file_does_not_hand_it_back(tmp_path):
    d = tmp_path / "d"
    d.mkdir()
    f = d / "state.json"
    f.write_text("{}")
    os.chown(f, NOBODY, NOBODY)
    safefs.write_file(f, "new")
    st = os.stat(f)
    assert st.st_uid == 0 and stat.S_IMODE(st.st_mode) == 0o644


def test_planted_temporary_name_is_not_written_through(tmp_path, victim):
    d = tmp_path / "d"
    d.mkdir()
    os.chmod(d, 0o1777)
    # A killed writer's leftover and a link planted under a temporary name: neither is followed.
    _plant_link(d / ".f.hostctl-000000000000", victim)
    safefs.write_file(d / "f", "data")
    assert victim.read_text() == "root's secret\n"
    assert (d / "f").read_text() == "data"


def test_created_folders_get_the_owner_on_the_open_fd(tmp_path):
    safefs.write_file(tmp_path / "a" / "b" / "f", "x", owner=(NOBODY, NOBODY), mode=0o600)
    for p in (tmp_path / "a", tmp_path / "a" / "b", tmp_path / "a" / "b" / "f"):
        assert os.stat(p).st_uid == NOBODY


def test_read_trusted(tmp_path):
    f = tmp_path / "hostctl.toml"
    f.write_text("x = 1\n")
    assert safefs.read_trusted(f, max_bytes=100) == b"x = 1\n"
    os.chmod(f, 0o666)
    with pytest.raises(safefs.UntrustedPathError, match="others can change it"):
        safefs.read_trusted(f, max_bytes=100)
    os.chmod(f, 0o644)
    os.chown(f, NOBODY, NOBODY)
    with pytest.raises(safefs.UntrustedPathError, match="nobody"):
        safefs.read_trusted(f, max_bytes=100)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(safefs.UntrustedPathError, match="not a regular file"):
        safefs.read_trusted(tmp_path / "fifo", max_bytes=100)


def test_sudo_user_is_trusted(tmp_path, monkeypatch):
    monkeypatch.setenv("SUDO_UID", str(NOBODY))
    d = tmp_path / "home"
    d.mkdir()
    os.chown(d, NOBODY, NOBODY)
    safefs.write_file(d / "f", "x")
    assert (d / "f").read_text() == "x"


def test_read_trusted_follows_a_trusted_link_only(tmp_path):
    real = tmp_path / "real.toml"
    real.write_text("x = 1\n")
    os.symlink(real, tmp_path / "mine.toml")
    assert safefs.read_trusted(tmp_path / "mine.toml", max_bytes=100) == b"x = 1\n"
    shared = _shared(tmp_path)
    _plant_link(shared / "hostctl.toml", real)
    with pytest.raises(safefs.UntrustedPathError, match="nobody"):
        safefs.read_trusted(shared / "hostctl.toml", max_bytes=100)
    with pytest.raises(IsADirectoryError):
        safefs.read_trusted(tmp_path, max_bytes=100)
