"""hostctl.safefs: root neither follows nor writes through what another local user planted.

The attacker is `nobody` (uid 65534): the planted links and folders are chowned to it, and the
victim is a root-owned file that must come out unchanged. Needs root (chown); CI runs as root.
"""

from __future__ import annotations

import os
import stat

import pytest

from hostctl import safefs
from attacker import NOBODY, make_victim, run_as
from need import needs

pytestmark = needs(os.geteuid() == 0, "needs root: the attacks chown planted files to nobody")


@pytest.fixture(autouse=True)
def _no_sudo(monkeypatch):
    monkeypatch.delenv("SUDO_UID", raising=False)


@pytest.fixture
def victim(tmp_path):
    return make_victim(tmp_path)


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


# ---------------------------------------------------------------- below an open folder (names from outside)


def _model_dir(tmp_path):
    d = tmp_path / "model"
    d.mkdir()
    return d


@pytest.mark.parametrize("owner", [NOBODY, 0], ids=["nobody's link", "root's own link"])
def test_open_below_follows_no_link_whoever_owns_it(tmp_path, victim, owner):
    d = _model_dir(tmp_path)
    os.symlink(victim.parent, d / "sub")
    os.lchown(d / "sub", owner, owner)
    with safefs.opened_dir(d) as base:
        with pytest.raises(safefs.UntrustedPathError) as exc:
            safefs.open_below(base, "sub/deeper", shown=d, create=True)
        with pytest.raises(safefs.UntrustedPathError):
            safefs.open_file_below(base, "sub/shadow", shown=d)
        with pytest.raises(safefs.UntrustedPathError):
            safefs.unlink_below(base, "sub/shadow", shown=d)
    assert exc.value.exit_code == 3 and str(d / "sub") in exc.value.message
    assert sorted(os.listdir(victim.parent)) == ["shadow"] and victim.read_text() == "root's secret\n"


def test_open_file_below_refuses_a_link_as_the_file_itself(tmp_path, victim):
    d = _model_dir(tmp_path)
    os.symlink(victim, d / "config.json")
    with safefs.opened_dir(d) as base, pytest.raises(safefs.UntrustedPathError):
        safefs.read_below(base, "config.json", shown=d, max_bytes=1 << 20)


def test_unlink_below_removes_a_link_never_its_target(tmp_path, victim):
    d = _model_dir(tmp_path)
    os.symlink(victim, d / "x")
    with safefs.opened_dir(d) as base:
        assert safefs.unlink_below(base, "x", shown=d) is True
        assert safefs.unlink_below(base, "x", shown=d) is False
    assert not os.path.lexists(d / "x") and victim.read_text() == "root's secret\n"


def test_open_below_creates_folders_and_refuses_dot_dot(tmp_path):
    d = _model_dir(tmp_path)
    with safefs.opened_dir(d) as base:
        os.close(safefs.open_below(base, "a/b/c", shown=d, create=True))
        with pytest.raises(safefs.UntrustedPathError):
            safefs.open_below(base, "a/../../escaped", shown=d, create=True)
        (d / "a" / "b" / "c" / "f").write_text("data")
        assert safefs.read_below(base, "a/b/c/f", shown=d, max_bytes=10) == b"data"
        with pytest.raises(ValueError):
            safefs.read_below(base, "a/b/c/f", shown=d, max_bytes=3)
    assert (d / "a" / "b" / "c").is_dir() and not (tmp_path / "escaped").exists()


def test_open_below_refuses_a_folder_of_another_user_inside(tmp_path, victim):
    d = _model_dir(tmp_path)
    (d / "theirs").mkdir()
    os.chown(d / "theirs", NOBODY, NOBODY)
    with safefs.opened_dir(d) as base, pytest.raises(safefs.UntrustedPathError) as exc:
        safefs.open_below(base, "theirs", shown=d)
    assert "nobody" in exc.value.message


def test_a_read_below_needs_no_trusted_owner_but_follows_no_link(tmp_path, victim):
    # A model folder the user owns, read as root at boot (only root trusted): their files are read,
    # a link of theirs (to root's file) is not.
    d = _model_dir(tmp_path)
    (d / "sub").mkdir()
    (d / "sub" / "config.json").write_text("{}")
    os.symlink(victim, d / "sub" / "link.json")
    for p in (d, d / "sub", d / "sub" / "config.json"):
        os.chown(p, NOBODY, NOBODY)
    os.lchown(d / "sub" / "link.json", NOBODY, NOBODY)
    with safefs.opened_dir(tmp_path) as base:
        assert safefs.read_below(base, "model/sub/config.json", shown=tmp_path, max_bytes=10, owners=False) == b"{}"
        with pytest.raises(safefs.UntrustedPathError):
            safefs.read_below(base, "model/sub/link.json", shown=tmp_path, max_bytes=100, owners=False)
        with pytest.raises(safefs.UntrustedPathError):  # writing there still needs a trusted owner
            safefs.open_below(base, "model/sub", shown=tmp_path, create=True)


# --- what the mode bits do not show: ACLs and groups shared by primary gid -------------------

@pytest.fixture
def reachable(tmp_path_factory):
    """A root-owned 0755 folder every user can reach (pytest's own tmp is root's 0700), so that
    nobody's writes below show what the kernel really lets them do."""
    import shutil
    import tempfile

    d = tempfile.mkdtemp(prefix="hostctl-acl-", dir="/tmp")
    os.chmod(d, 0o755)
    from pathlib import Path
    yield Path(d)
    shutil.rmtree(d)


def _set_acl(path, user_perm: int, mask: int, uid: int = NOBODY) -> None:
    """`setfacl -m u:UID:PERM,m::MASK PATH`, written as the kernel's xattr (no acl tools needed):
    version 2, then (tag, perm, id) entries: owner, the named user, group, mask, other."""
    import struct

    none = 0xFFFFFFFF
    other = stat.S_IMODE(os.stat(path).st_mode) & 0o7
    entries = [(0x01, 7, none), (0x02, user_perm, uid), (0x04, 5, none), (0x10, mask, none), (0x20, other, none)]
    os.setxattr(path, "system.posix_acl_access",
                struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries))


def _append(path, text):
    def fn():
        with open(path, "a") as f:
            f.write(text)
    return fn


def test_a_profile_an_acl_lets_nobody_write_is_refused(reachable):
    prof = reachable / "hostctl.toml"
    prof.write_text('name = "mine"\n')
    os.chmod(prof, 0o644)
    _set_acl(prof, user_perm=6, mask=6)  # setfacl -m u:nobody:rw
    assert run_as(NOBODY, NOBODY, _append(prof, "# nobody was here\n")) == 0  # the ACL is real
    with pytest.raises(safefs.UntrustedPathError) as exc:
        safefs.read_trusted(prof, max_bytes=1 << 20)
    assert exc.value.exit_code == 3 and str(prof) in exc.value.message


def test_a_folder_an_acl_lets_nobody_write_is_refused(reachable):
    proj = reachable / "proj"
    proj.mkdir(mode=0o755)
    prof = proj / "hostctl.toml"
    prof.write_text('name = "mine"\n')
    _set_acl(proj, user_perm=7, mask=7)  # setfacl -m u:nobody:rwx proj
    assert run_as(NOBODY, NOBODY, lambda: os.mkdir(proj / "planted")) == 0
    for check in (lambda: safefs.check_dir(proj, private=True), lambda: safefs.read_trusted(prof, max_bytes=1 << 20),
                  lambda: safefs.write_file(proj / "compose.yaml", "services: {}\n")):
        with pytest.raises(safefs.UntrustedPathError) as exc:
            check()
        assert exc.value.exit_code == 3
    assert not (proj / "compose.yaml").exists()


def test_an_acl_whose_mask_denies_write_is_no_write(reachable):
    prof = reachable / "hostctl.toml"
    prof.write_text('name = "mine"\n')
    os.chmod(prof, 0o644)
    _set_acl(prof, user_perm=6, mask=4)  # u:nobody:rw, but the mask leaves r--
    assert run_as(NOBODY, NOBODY, _append(prof, "x\n")) == 1
    assert safefs.read_trusted(prof, max_bytes=1 << 20) == b'name = "mine"\n'


def _shared_primary_group():
    """(owner, other): two accounts whose primary group is the same gid, with no gr_mem (nogroup
    here: sync, _apt, nobody...)."""
    import grp
    import pwd

    by_gid: dict[int, list] = {}
    for p in pwd.getpwall():
        by_gid.setdefault(p.pw_gid, []).append(p)
    for gid, users in sorted(by_gid.items()):
        try:
            members = grp.getgrgid(gid).gr_mem
        except KeyError:
            continue
        if len(users) >= 2 and not members and gid != 0:
            return users[0], users[1]
    return None


def test_a_group_other_users_have_as_primary_is_not_private(reachable, monkeypatch):
    pair = _shared_primary_group()
    assert pair, "no two accounts share a primary group here"
    owner, other = pair
    monkeypatch.setenv("SUDO_UID", str(owner.pw_uid))  # the invoking user is `owner`
    prof = reachable / "hostctl.toml"
    prof.write_text('name = "mine"\n')
    os.chown(prof, owner.pw_uid, owner.pw_gid)
    os.chmod(prof, 0o664)
    assert run_as(other.pw_uid, other.pw_gid, _append(prof, "# other was here\n")) == 0
    with pytest.raises(safefs.UntrustedPathError) as exc:
        safefs.read_trusted(prof, max_bytes=1 << 20)
    assert exc.value.exit_code == 3
    folder = reachable / "proj"
    folder.mkdir()
    os.chown(folder, owner.pw_uid, owner.pw_gid)
    os.chmod(folder, 0o775)
    with pytest.raises(safefs.UntrustedPathError):
        safefs.check_dir(folder, private=True)


def test_a_file_root_writes_under_a_default_acl_is_not_left_writable_to_others(reachable):
    proj = reachable / "proj"
    proj.mkdir(mode=0o755)
    import struct

    none = 0xFFFFFFFF  # `setfacl -d -m u:nobody:rwx proj`: what files made in it inherit
    entries = [(0x01, 7, none), (0x02, 7, NOBODY), (0x04, 5, none), (0x10, 7, none), (0x20, 5, none)]
    os.setxattr(proj, "system.posix_acl_default",
                struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries))
    out = safefs.write_file(proj / "compose.yaml", "services: {}\n", mode=0o664)
    assert run_as(NOBODY, NOBODY, _append(out, "  evil: {privileged: true}\n")) == 1
    assert out.read_text() == "services: {}\n"
