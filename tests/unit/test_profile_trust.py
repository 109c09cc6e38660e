"""Profiles and recipes root acts on are root's or the invoking user's and writable by no one
else (issue 26, class 6; sshd's StrictModes): another user's `./hostctl.toml` in /tmp, a 0666
profile of root's, a recipe of theirs that a trusted profile names, a cluster profile or a facts
snapshot of theirs, an API key file of theirs: each refused with exit 3, naming the path and its
owner, and nothing planned or rendered. The attacker is `nobody` (uid 65534)."""

from __future__ import annotations

import os
import shutil

import pytest

from hostctl import cli, paths
from tests.need import needs

NOBODY = 65534
HOSTS = paths.hosts_dir()
DESKTOP, DESKTOP_FACTS = HOSTS / "pro6000x2-desktop.toml", HOSTS / "pro6000x2-desktop.facts.json"
pytestmark = needs(os.geteuid() == 0, "needs root: the planted profiles are chowned to nobody")


@pytest.fixture(autouse=True)
def _no_sudo(monkeypatch, tmp_path):
    monkeypatch.delenv("SUDO_UID", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


@pytest.fixture
def shared(tmp_path):
    d = tmp_path / "tmp"
    d.mkdir()
    os.chmod(d, 0o1777)
    return d


def planted(at, source=DESKTOP, *, uid=NOBODY, mode=0o644):
    shutil.copyfile(source, at)
    os.chown(at, uid, uid)
    os.chmod(at, mode)
    return at


def run(argv, capsys):
    code = cli.main(argv)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


def refused(code, err, path, owner="nobody"):
    return code == 3 and str(path) in err and owner in err


@pytest.mark.parametrize("command", [["plan"], ["render", "--out", "OUT"]])
@pytest.mark.parametrize("who", ["nobody's", "root's 0666"])
def test_a_profile_another_user_can_write_is_refused(tmp_path, shared, capsys, command, who):
    profile = planted(shared / "hostctl.toml", **({} if who == "nobody's" else {"uid": 0, "mode": 0o666}))
    out = tmp_path / "out"
    argv = [str(out) if a == "OUT" else a for a in command] + ["--config", str(profile), "--facts", str(DESKTOP_FACTS)]
    code, stdout, err = run(argv, capsys)
    assert refused(code, err, profile, "nobody" if who == "nobody's" else "rw-rw-rw-"), (code, err)
    assert not out.exists() and "compose" not in stdout


def test_hostctl_toml_in_the_current_directory_of_another_user_is_refused(tmp_path, shared, capsys, monkeypatch):
    profile = planted(shared / "hostctl.toml")
    monkeypatch.chdir(shared)
    code, stdout, err = run(["plan", "--facts", str(DESKTOP_FACTS)], capsys)
    assert code == 3 and "hostctl.toml" in err and "nobody" in err and stdout == ""
    assert profile.exists()


def test_up_refuses_another_users_profile_before_anything_runs(tmp_path, shared, capsys):
    project = tmp_path / "project"
    profile = planted(shared / "hostctl.toml", HOSTS / "demo-cpu.toml")
    with open(profile, "a") as fh:
        # the [runtime] table is the file's last; an image no one has: up could never start it
        fh.write(f'project_dir = "{project}"\nimage = "hostctl-test-absent:0"\n')
    code, _, err = run(["up", "--config", str(profile)], capsys)
    assert refused(code, err, profile), (code, err)
    assert not project.exists()


def test_a_profile_read_before_is_refused_once_another_user_owns_it(tmp_path, capsys):
    """What was read before does not answer for a file load_config would now refuse."""
    mine = tmp_path / "mine"
    mine.mkdir()
    profile = planted(mine / "hostctl.toml", uid=0)
    argv = ["plan", "--config", str(profile), "--facts", str(DESKTOP_FACTS)]
    assert run(argv, capsys)[0] in (0, 1)
    assert run(argv, capsys)[0] in (0, 1)
    os.chown(profile, NOBODY, NOBODY)
    code, _, err = run(argv, capsys)
    assert refused(code, err, profile), (code, err)


def test_a_recipe_of_another_user_named_by_a_trusted_profile_is_refused(tmp_path, shared, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    recipe = planted(shared / "recipe.yaml", paths.recipes_dir() / "dsv4-flash-0731-tp2-400k.yaml")
    profile = mine / "hostctl.toml"
    profile.write_text(DESKTOP.read_text().replace('recipe = "dsv4-flash-0731-tp2-400k"', f'recipe = "{recipe}"'))
    out = tmp_path / "out"
    code, _, err = run(["render", "--out", str(out), "--config", str(profile), "--facts", str(DESKTOP_FACTS)], capsys)
    assert refused(code, err, recipe), (code, err)
    assert not out.exists()


def test_a_profile_reached_through_another_users_link_is_refused(tmp_path, shared, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    real = planted(mine / "real.toml", uid=0)
    link = shared / "hostctl.toml"
    os.symlink(real, link)
    os.lchown(link, NOBODY, NOBODY)
    code, _, err = run(["plan", "--config", str(link), "--facts", str(DESKTOP_FACTS)], capsys)
    assert refused(code, err, link), (code, err)


def test_own_profile_through_own_link_is_used(tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    real = planted(mine / "real.toml", uid=0)
    os.symlink(real, mine / "hostctl.toml")
    code, out, err = run(["plan", "--config", str(mine / "hostctl.toml"), "--facts", str(DESKTOP_FACTS)], capsys)
    assert code in (0, 1) and "nobody" not in err, err


def test_a_facts_snapshot_of_another_user_is_refused(tmp_path, shared, capsys):
    snap = planted(shared / "facts.json", DESKTOP_FACTS)
    code, _, err = run(["plan", "--config", str(DESKTOP), "--facts", str(snap)], capsys)
    assert refused(code, err, snap), (code, err)


def test_a_cluster_key_file_of_another_user_is_refused(tmp_path, shared):
    """Whoever writes the key file chooses the key root's router accepts."""
    from hostctl import safefs
    from hostctl.cluster.profile import parse_cluster, read_key
    from test_cluster import replicas

    key = shared / "cluster.key"
    key.write_text("their-key-123\n")
    os.chmod(key, 0o600)
    os.chown(key, NOBODY, NOBODY)
    doc = replicas(api_key_file=str(key))
    del doc["api_key_env"]
    with pytest.raises(safefs.UntrustedPathError) as exc:
        read_key(parse_cluster(doc))
    assert exc.value.exit_code == 3 and str(key) in exc.value.message and "nobody" in exc.value.message


def test_a_cluster_profile_of_another_user_is_refused(tmp_path, shared, capsys):
    from test_cluster import replicas, write_cluster

    path = write_cluster(shared, replicas())
    os.chown(path, NOBODY, NOBODY)
    code, out, err = run(["plan", "--cluster", str(path), "--json"], capsys)
    assert refused(code, err, path), (code, err)
    assert out == ""
