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
from tests.attacker import NOBODY, make_victim
from tests.need import need_module, needs

pytestmark = needs(os.geteuid() == 0, "needs root: the attacks chown planted files to nobody")


@pytest.fixture(autouse=True)
def _no_sudo(monkeypatch):
    monkeypatch.delenv("SUDO_UID", raising=False)


@pytest.fixture
def victim(tmp_path):
    return make_victim(tmp_path)


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


# -- render --out ------------------------------------------------------------------------

def _render(out_dir, capsys):
    from hostctl import cli, paths

    hosts = paths.hosts_dir()
    code = cli.main(["render", "--out", str(out_dir), "--config", str(hosts / "pro6000x2-desktop.toml"),
                     "--facts", str(hosts / "pro6000x2-desktop.facts.json")])
    return code, capsys.readouterr()


def _shared(tmp_path, mode=0o1777):
    d = tmp_path / f"shared{mode:o}"
    d.mkdir()
    os.chmod(d, mode)
    return d


def test_render_out_through_a_link_planted_in_tmp_is_refused(tmp_path, victim, capsys):
    (victim.parent / "compose.yaml").write_bytes(victim.read_bytes())
    os.chmod(victim.parent / "compose.yaml", 0o600)
    victim = victim.parent / "compose.yaml"  # the name render writes
    shared = _shared(tmp_path)
    plant_link(shared / "project", victim.parent)
    code, cap = _render(shared / "project", capsys)
    assert code == 3 and str(shared / "project") in cap.err and "nobody" in cap.err
    assert unchanged(victim) and sorted(os.listdir(victim.parent)) == ["compose.yaml", "shadow"]


def test_render_out_into_another_users_folder_is_refused(tmp_path, capsys):
    theirs = nobodys(_shared(tmp_path) / "project")
    code, cap = _render(theirs, capsys)
    assert code == 3 and "nobody" in cap.err and os.listdir(theirs) == []


@pytest.mark.parametrize("mode", [0o777, 0o1777])
def test_render_out_into_a_folder_others_can_write_is_refused(tmp_path, mode, capsys):
    """Compose as root would read a `.env` anyone put there."""
    open_ = _shared(tmp_path, mode)
    code, cap = _render(open_, capsys)
    assert code == 3 and str(open_) in cap.err and os.listdir(open_) == []


def test_render_out_below_a_world_writable_folder_is_refused(tmp_path, capsys):
    code, cap = _render(_shared(tmp_path, 0o777) / "project", capsys)
    assert code == 3 and not (tmp_path / "shared777" / "project").exists()


def test_render_out_into_a_new_folder_in_tmp_still_works(tmp_path, capsys):
    code, cap = _render(_shared(tmp_path) / "project", capsys)
    assert code == 0, cap.err
    assert stat.S_IMODE(os.stat(tmp_path / "shared1777" / "project").st_mode) == 0o700


# -- up: the project folder Compose reads -------------------------------------------------

@pytest.mark.parametrize("how", ["nobody's", "0777", "link"])
def test_compose_up_refuses_a_project_folder_another_user_can_change(tmp_path, how):
    """`up` hands the project folder to Compose as root: another user's folder (or a link of theirs,
    or one anyone can write a `.env` into) is refused before Compose is run."""
    from hostctl.service.compose import compose_up

    shared = _shared(tmp_path)
    project = shared / "project"
    if how == "link":
        real = nobodys(tmp_path / "real")
        plant_link(project, real)
    else:
        project.mkdir()
        os.chown(project, *((NOBODY, NOBODY) if how == "nobody's" else (0, 0)))
        os.chmod(project, 0o755 if how == "nobody's" else 0o777)
    (project / "compose.yaml").write_text("services: {}\n")
    with pytest.raises(safefs.UntrustedPathError) as exc:
        compose_up(project, "hostctl-test-untrusted", timeout=20)
    assert exc.value.exit_code == 3 and str(project) in exc.value.message


# -- cache prune ---------------------------------------------------------------------------

def _victim_generation(victim):
    gen = victim.parent / "gen-old"
    gen.mkdir()
    (gen / "planes.bin").write_text("root's data\n")
    return gen


def test_cache_prune_does_not_delete_through_another_users_link_as_the_cache_folder(tmp_path, victim):
    """The profile names a compile cache in /tmp; nobody planted the name as a link to root's
    folder, which holds a generation of the same name."""
    from hostctl.cache.prune import _remove
    from hostctl.facts.caches import Root

    gen = _victim_generation(victim)
    shared = _shared(tmp_path)
    plant_link(shared / "compile-cache", victim.parent)
    root = Root(kind="compile", path=str(shared / "compile-cache"), exists=True)
    with pytest.raises(safefs.UntrustedPathError):
        _remove([str(shared / "compile-cache" / "gen-old"), str(shared / "compile-cache" / "shadow")], [root])
    assert unchanged(victim) and (gen / "planes.bin").read_text() == "root's data\n"
    assert sorted(os.listdir(victim.parent)) == ["gen-old", "shadow"]


def test_cache_prune_does_not_delete_through_a_link_inside_the_users_cache_folder(tmp_path, monkeypatch, victim):
    """The cache folder is the invoking user's: a folder of it replaced by a link after the scan
    (the consent prompt waits for a person) must not lead root's rename and delete elsewhere."""
    from hostctl.cache.prune import _remove
    from hostctl.facts.caches import Root

    monkeypatch.setenv("SUDO_UID", str(NOBODY))
    gen = _victim_generation(victim)
    cache = nobodys(tmp_path / "home" / "cache")
    plant_link(cache / "gen-old", gen)  # as the scan saw a folder there, now a link
    with pytest.raises(safefs.UntrustedPathError):
        _remove([str(cache / "gen-old" / "planes.bin")], [Root(kind="compile", path=str(cache), exists=True)])
    assert (gen / "planes.bin").read_text() == "root's data\n" and os.listdir(gen) == ["planes.bin"]


# -- provision: the cache folders made and chowned for the invoking user ----------------------

def test_provision_chowns_the_cache_folder_on_the_open_fd_not_through_a_link(tmp_path, monkeypatch, victim):
    from hostctl.provision.storage import _mkdir

    monkeypatch.setenv("SUDO_UID", str(NOBODY))
    home = nobodys(tmp_path / "home" / "u")
    plant_link(home / "planes", victim.parent)  # where the profile's planes_cache is
    action = _mkdir("storage/dirs/planes_cache", str(home / "planes"), (NOBODY, NOBODY), create=False)
    with pytest.raises(safefs.UntrustedPathError) as exc:
        action.run()
    assert exc.value.exit_code == 3 and "symlink" in exc.value.message
    st = os.stat(victim.parent)
    assert (st.st_uid, st.st_gid) == (0, 0) and unchanged(victim)


def test_provision_makes_the_cache_folder_the_users_and_the_folders_above_roots(tmp_path):
    from hostctl.provision.storage import _mkdir

    _mkdir("storage/dirs/planes_cache", str(tmp_path / "srv" / "planes"), (NOBODY, NOBODY), create=True).run()
    assert os.stat(tmp_path / "srv" / "planes").st_uid == NOBODY and os.stat(tmp_path / "srv").st_uid == 0


# -- doctor --bundle -------------------------------------------------------------------------

def test_doctor_bundle_through_a_link_planted_in_tmp_is_refused(tmp_path, victim, capsys):
    from hostctl import cli, paths

    shared = _shared(tmp_path)
    plant_link(shared / "support", victim.parent)
    hosts = paths.hosts_dir()
    code = cli.main(["doctor", "--config", str(hosts / "pro6000x2-desktop.toml"),
                     "--facts", str(hosts / "pro6000x2-desktop.facts.json"), "--bundle", str(shared / "support" / "shadow")])
    err = capsys.readouterr().err
    assert code == 3 and str(shared / "support") in err and "nobody" in err
    assert unchanged(victim) and os.listdir(victim.parent) == ["shadow"]


def test_doctor_bundle_in_tmp_is_written_privately(tmp_path, capsys):
    from hostctl import cli, paths

    hosts = paths.hosts_dir()
    bundle = _shared(tmp_path) / "support.tar.gz"
    cli.main(["doctor", "--config", str(hosts / "pro6000x2-desktop.toml"),
              "--facts", str(hosts / "pro6000x2-desktop.facts.json"), "--bundle", str(bundle)])
    assert stat.S_IMODE(os.stat(bundle).st_mode) == 0o600 and os.listdir(bundle.parent) == ["support.tar.gz"]


# -- tune --out: the chart is written like every other result file -----------------------------

def test_tune_chart_is_not_written_through_a_link_planted_where_out_points(tmp_path, victim):
    need_module("matplotlib", "the charts extra is not installed (CI installs it)")
    from hostctl.act.files import FilesPart, Want
    from hostctl.act.inline import run_inline
    from hostctl.tune import chart

    doc = {"recipe": {"id": "r"}, "objective": "decode.median_tok_s", "winner": {"trial": "trial-1"},
           "trials": [{"id": "trial-1", "knobs": {"--max-num-seqs": 2}, "objective": 10.0, "valid": True}]}
    png, _ = chart.draw(doc)
    shared = _shared(tmp_path)
    plant_link(shared / "tune-out", victim.parent)
    # as tune/runner.py writes it: a bytes Want of the tune-results part
    with pytest.raises(safefs.UntrustedPathError):
        run_inline([FilesPart("tune-results", [Want(path=str(shared / "tune-out" / "shadow"), text=png)])],
                   command="hostctl tune", schema="hostctl.tune/v1", say=lambda line: None)
    assert unchanged(victim) and os.listdir(victim.parent) == ["shadow"]


def test_render_out_through_own_link_into_a_system_directory_is_refused(tmp_path, capsys):
    """The path passed the system-directory rule as written; the link leads into /run."""
    import shutil

    system = type(tmp_path)(f"/run/hostctl-test-{os.getpid()}-{tmp_path.name}")
    system.mkdir(mode=0o700)
    try:
        os.symlink(system, tmp_path / "project")
        code, cap = _render(tmp_path / "project", capsys)
        assert code == 3 and "/run" in cap.err and os.listdir(system) == []
    finally:
        shutil.rmtree(system)
