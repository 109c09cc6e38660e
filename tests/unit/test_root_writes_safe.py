"""Root neither writes, chowns nor deletes through what another local user planted (issue 26,
class 1): store split, render --out, the cache, tune, bench, doctor bundles, init --out.

The attacker is `nobody` (uid 65534). Where the folder is the invoking user's (store split, the
cache), nobody *is* the invoking user (SUDO_UID=65534) and plants links in its own folder; where
the folder is shared (render --out in /tmp), nobody plants a link or a folder there. The victim is
a root-owned file that must come out unchanged: content, owner and mode.
"""

from __future__ import annotations

import io
import os
import stat

import pytest

from hostctl import safefs
from tests.need import needs

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


def unchanged(victim) -> bool:
    st = os.lstat(victim)
    return (victim.read_text() == "root's secret\n" and (st.st_uid, st.st_gid) == (0, 0)
            and stat.S_IMODE(st.st_mode) == 0o600 and stat.S_ISREG(st.st_mode))


def nobodys(path, mode=0o755):
    path.mkdir(mode=mode, parents=True)
    os.chown(path, NOBODY, NOBODY)
    return path


def plant_link(at, to):
    os.symlink(to, at)
    os.lchown(at, NOBODY, NOBODY)


# -- store split ---------------------------------------------------------------------------

def _store(tmp_path, monkeypatch):
    """The invoking user's shared store and rank folder (nobody ran sudo)."""
    monkeypatch.setenv("SUDO_UID", str(NOBODY))
    store, rank = nobodys(tmp_path / "store"), nobodys(tmp_path / "rank0")
    src = store / "s.rank0of2.pack"
    src.write_bytes(os.urandom(1 << 16))
    os.chown(src, NOBODY, NOBODY)
    return src, rank


def test_store_split_never_writes_through_a_link_at_any_name_in_the_rank_folder(tmp_path, monkeypatch, victim):
    from hostctl.provision.rankstores import _Progress, copy_verified

    src, rank = _store(tmp_path, monkeypatch)
    for name in (".hostctl-partial.s.rank0of2.pack", ".s.rank0of2.pack.hostctl-partial", "s.rank0of2.pack"):
        plant_link(rank / name, victim)
    copy_verified(src, rank / src.name, _Progress(io.StringIO()), "rank 0")
    assert unchanged(victim)
    got = os.lstat(rank / src.name)
    assert stat.S_ISREG(got.st_mode) and got.st_uid == NOBODY and (rank / src.name).read_bytes() == src.read_bytes()


def test_store_split_does_not_copy_a_link_to_a_root_only_file(tmp_path, monkeypatch, victim):
    from hostctl.provision.rankstores import _Progress, copy_verified

    src, rank = _store(tmp_path, monkeypatch)
    src.unlink()
    plant_link(src, victim)
    with pytest.raises(safefs.UntrustedPathError) as exc:
        copy_verified(src, rank / src.name, _Progress(io.StringIO()), "rank 0")
    assert exc.value.exit_code == 3 and str(src) in exc.value.message and "symlink" in exc.value.message
    assert os.listdir(rank) == [] and unchanged(victim)
