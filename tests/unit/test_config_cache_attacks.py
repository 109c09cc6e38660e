"""hostctl.config_cache under attack: a recipe edited while it is validated, a profile that is
not a regular file, a cache folder below a directory someone else owns or can write, and entries
too big or too deep to read. Each must end in the Config validating the files gives (or its exit
2), never in a stale Config, a hang or an internal error."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostctl import config, config_cache
from hostctl.errors import InputError
from need import need
from test_config_cache import DEMO_RECIPE, entries, home, profile, validations  # noqa: F401  (fixtures)


def _edit_recipe_while_validating(monkeypatch, recipe: Path, new_text: str) -> None:
    """The next load_recipe reads the recipe, then the recipe is rewritten before the load ends
    (an editor saving, a tuning script writing the next variant)."""
    real = config.load_recipe

    def racing(path):
        parsed = real(path)
        recipe.write_text(new_text)
        monkeypatch.setattr(config, "load_recipe", real)
        return parsed

    monkeypatch.setattr(config, "load_recipe", racing)


def test_a_recipe_edited_during_validation_is_not_remembered_as_the_new_one(home, monkeypatch):
    path = profile(home)
    recipe = home / "recipe.yaml"
    edited = recipe.read_text().replace("context: 2048", "context: 1024", 1)
    assert edited != recipe.read_text()
    _edit_recipe_while_validating(monkeypatch, recipe, edited)
    assert config.load_config(path).recipe.context == 2048  # what was read
    assert config.load_config(path).recipe.context == 1024  # what the recipe says now


def test_a_recipe_broken_during_validation_is_still_refused(home, monkeypatch):
    path = profile(home)
    recipe = home / "recipe.yaml"
    _edit_recipe_while_validating(monkeypatch, recipe, recipe.read_text().replace("context: 2048", "context: 0", 1))
    config.load_config(path)
    with pytest.raises(InputError) as exc:
        config.load_config(path)
    assert any("context" in d for d in exc.value.details)


def test_status_with_a_fifo_as_profile_exits_2_without_waiting(home):
    fifo = home / "host.toml"
    os.mkfifo(fifo)
    try:
        done = subprocess.run([sys.executable, "-m", "hostctl", "status", "--config", str(fifo)],
                              capture_output=True, text=True, timeout=30,
                              env=dict(os.environ, XDG_CACHE_HOME=str(home / "cache")))
    except subprocess.TimeoutExpired:
        pytest.fail("status waited for a writer on a FIFO given as the profile")
    assert done.returncode == 2, done.stderr
    assert config_cache.remembered_names(fifo) is None


def test_root_keeps_no_cache_in_a_folder_another_user_owns(home, validations, monkeypatch):
    """sudo -E (or a HOME kept by sudo) as root: XDG_CACHE_HOME/HOME is the invoking user's."""
    need(os.geteuid() == 0, "a cache base owned by another user needs root to make (CI runs as root)")
    base = home / "alice-cache"
    base.mkdir(mode=0o755)
    os.chown(base, 1000, 1000)
    monkeypatch.setenv("XDG_CACHE_HOME", str(base))
    path = profile(home)
    assert config.load_config(path) == config.load_config(path)
    assert len(validations) == 2
    assert list(base.iterdir()) == []  # nothing root-owned left in the user's folder


@pytest.mark.parametrize("how", ["writable by others", "owned by another user"])
def test_a_cache_below_a_folder_others_control_is_not_used(home, validations, how):
    """Whoever can rename entries in the folder above `config` can swap it for a link between the
    check and the write (and _prune would then delete *.json files wherever it points)."""
    path = profile(home)
    config.load_config(path)
    (entry,) = entries(home)
    above = entry.parent.parent  # $XDG_CACHE_HOME/hostctl
    if how == "writable by others":
        above.chmod(0o777)
    else:
        need(os.geteuid() == 0, "giving the folder to another user needs root (CI runs as root)")
        os.chown(above, 1000, 1000)
    config.load_config(path)
    assert len(validations) == 2
    assert entries(home) == [entry]  # nothing written either


def test_a_link_as_the_hostctl_folder_is_followed_only_into_a_safe_folder(home, validations, tmp_path):
    """The user's own link (~/.cache/hostctl on another disk) is fine; one into a folder others
    can write is not (they could swap `config` under it)."""
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # not sticky: anyone can rename what is in it
    (shared / "hostctl").mkdir(mode=0o700)
    (home / "cache").mkdir()
    (home / "cache" / "hostctl").symlink_to(shared / "hostctl")
    path = profile(home)
    config.load_config(path)
    config.load_config(path)
    assert len(validations) == 2 and list((shared / "hostctl").iterdir()) == []
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (home / "cache" / "hostctl").unlink()
    (home / "cache" / "hostctl").symlink_to(private)
    config.load_config(path)
    config.load_config(path)
    assert len(validations) == 3 and len(list((private / "config").glob("*.json"))) == 1


def test_an_entry_nested_too_deep_is_ignored(home, validations):
    path = profile(home)
    config.load_config(path)
    (entry,) = entries(home)
    entry.write_text("[" * 200_000 + "]" * 200_000)
    assert config.load_config(path).profile.name == "cc"
    assert len(validations) == 2  # validated again, no internal error


def test_an_entry_too_big_to_read_is_not_written(home, validations):
    recipe = home / "recipe.yaml"
    big = "x" * 99_000
    smoke = "".join(f"  - name: big{i}\n    kind: chat\n    prompt: {big}\n    expect: x\n" for i in range(9))
    recipe.write_text(DEMO_RECIPE.read_text().replace("smoke:\n", "smoke:\n" + smoke, 1))
    path = profile(home)
    config.load_config(path)
    config.load_config(path)
    assert len(validations) == 2
    assert entries(home) == []  # each load wrote ~1.2 MiB it could never read back


def test_the_yaml_parser_is_part_of_the_code_stamp():
    import yaml

    assert str(Path(yaml.__file__)) in config_cache._code_files()


def test_a_profile_changed_and_changed_back_during_validation_is_not_remembered(home, monkeypatch):
    path = profile(home)
    original = path.read_text()
    real = config.load_profile_text

    def aba(p):
        p.write_text(original.replace('name = "cc"', 'name = "bb"'))
        parsed = real(p)
        p.write_text(original)
        monkeypatch.setattr(config, "load_profile_text", real)
        return parsed

    monkeypatch.setattr(config, "load_profile_text", aba)
    assert config.load_config(path).profile.name == "bb"  # what was read
    assert config.load_config(path).profile.name == "cc"  # what the profile says now


def test_a_link_another_user_put_in_a_sticky_folder_is_not_followed(home, validations, monkeypatch):
    """HOME or XDG_CACHE_HOME in /tmp: another user's link there (which the kernel's
    protected_symlinks would not follow for us) must not redirect the cache into a folder of ours."""
    need(os.geteuid() == 0, "a link owned by another user needs root to make (CI runs as root)")
    sticky = home / "sticky"
    sticky.mkdir()
    sticky.chmod(0o1777)
    target = home / "roots-own"
    target.mkdir(mode=0o700)
    (sticky / "hostctl").symlink_to(target)
    os.lchown(sticky / "hostctl", 1000, 1000)
    monkeypatch.setenv("XDG_CACHE_HOME", str(sticky))
    path = profile(home)
    config.load_config(path)
    config.load_config(path)
    assert len(validations) == 2 and list(target.iterdir()) == []


@pytest.mark.parametrize("where", ["env value under a plain name", "warmup header", "tuning map", "model URL",
                                   "profile description"])
def test_a_token_shaped_value_anywhere_is_not_remembered(home, validations, where):
    """secrets.from_config knows env names and serve flags; a token elsewhere in the files (the
    shapes hostctl.doctor.redact hides) must not get a second copy in the cache either."""
    token = "hf_" + "Q" * 30
    recipe = home / "recipe.yaml"
    text = DEMO_RECIPE.read_text()
    runtime = ""
    if where == "env value under a plain name":
        text = text.replace("env:\n", f"env:\n  HUB_AUTH: \"{token}\"\n", 1)
    elif where == "warmup header":
        text += f"warmup:\n  headers:\n    Authorization: \"Bearer {token}\"\n"
    elif where == "tuning map":
        text = text.replace("\ntuning:\n", f"\ntuning:\n  hub_token: \"{token}\"\n", 1)
    elif where == "model URL":
        text = text.replace("\nmodel: ", f"\nmodel: https://me:{token}@hub.example/", 1)
    recipe.write_text(text)
    path = profile(home)
    if where == "profile description":
        path.write_text(f'description = "pulls with {token}"\n' + path.read_text())
    config.load_config(path)
    config.load_config(path)
    assert len(validations) == 2
    assert not any(token.encode() in _decoded(e) for e in entries(home))


def _decoded(entry: Path) -> bytes:
    import base64
    import json

    doc = json.loads(entry.read_text())
    return entry.read_bytes() + base64.b64decode(doc["config"])


def test_a_recipe_changed_and_changed_back_during_validation_is_not_remembered(home, monkeypatch):
    """A, B, A: the recipe read as B while it is validated, then A again before the load ends. The
    Config made from B is remembered under B's bytes, never under A's."""
    path = profile(home)
    recipe = home / "recipe.yaml"
    original = recipe.read_text()
    real = config.load_recipe

    def aba(p):
        recipe.write_text(original.replace("context: 2048", "context: 1024", 1))
        parsed = real(p)
        recipe.write_text(original)
        monkeypatch.setattr(config, "load_recipe", real)
        return parsed

    monkeypatch.setattr(config, "load_recipe", aba)
    assert config.load_config(path).recipe.context == 1024  # what was read
    assert config.load_config(path).recipe.context == 2048  # what the recipe says now
