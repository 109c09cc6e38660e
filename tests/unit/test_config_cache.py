"""hostctl.config_cache: a remembered Config is the one validating the same files gives; any
change to the profile or the recipe validates afresh (a bad field still exits 2); an entry
anyone else could have written is never read."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostctl import config, config_cache
from hostctl.errors import InputError
from need import need

ROOT = Path(__file__).resolve().parents[2]
DEMO_RECIPE = ROOT / "runtime" / "recipes" / "demo-cpu-tiny-moe.yaml"


@pytest.fixture()
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path


@pytest.fixture()
def validations(monkeypatch):
    """How many times the profile was really validated."""
    calls = []
    real = config.parse_profile

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(config, "parse_profile", counted)
    return calls


def profile(home: Path, name: str = "cc", reserve: str = "4GiB", runtime: str = "") -> Path:
    recipe = home / "recipe.yaml"
    if not recipe.exists():
        recipe.write_text(DEMO_RECIPE.read_text())
    path = home / "host.toml"
    path.write_text(f'name = "{name}"\nrecipe = "recipe.yaml"\n[memory]\nhost_reserve = "{reserve}"\n{runtime}')
    return path


def entries(home: Path) -> list[Path]:
    return sorted((home / "cache" / "hostctl" / "config").glob("*.json"))


def test_a_second_load_is_remembered_and_equal(home, validations):
    path = profile(home)
    first = config.load_config(path)
    second = config.load_config(path)
    assert len(validations) == 1 and second == first
    assert second.profile.name == "cc" and second.source == str(path)
    (entry,) = entries(home)
    assert entry.stat().st_mode & 0o777 == 0o600 and entry.parent.stat().st_mode & 0o777 == 0o700


def test_an_edited_profile_or_recipe_validates_afresh(home, validations):
    path = profile(home)
    config.load_config(path)
    profile(home, name="renamed")
    assert config.load_config(path).profile.name == "renamed"
    recipe = home / "recipe.yaml"
    recipe.write_text(recipe.read_text().replace("context: 2048", "context: 1024", 1))
    edited = config.load_config(path)
    assert len(validations) == 3 and edited.profile.name == "renamed" and edited.recipe.context == 1024


def test_a_bad_field_after_a_good_load_is_still_refused(home):
    path = profile(home)
    config.load_config(path)
    profile(home, reserve="lots")
    with pytest.raises(InputError) as exc:
        config.load_config(path)
    assert any("memory.host_reserve" in d for d in exc.value.details)


def test_the_real_path_is_what_is_remembered(home, monkeypatch):
    # The profile is named by its real path however it was typed (one resolution: a later read
    # by that path reaches the file validated), so both spellings share one entry.
    path = profile(home)
    monkeypatch.chdir(home)
    assert config.load_config(path).source == str(path)
    assert config.load_config(Path("host.toml")).source == str(path)
    assert len(entries(home)) == 1


@pytest.mark.parametrize("spoil", ["entry writable by others", "folder writable by others", "garbage",
                                   "a link to another file"])
def test_an_entry_that_cannot_be_trusted_is_not_read(home, validations, spoil):
    path = profile(home)
    config.load_config(path)
    (entry,) = entries(home)
    if spoil == "entry writable by others":
        entry.chmod(0o666)
    elif spoil == "folder writable by others":
        entry.parent.chmod(0o777)
    elif spoil == "garbage":
        entry.write_text(entry.read_text().replace('"config": "', '"config": "gA', 1))  # a pickle cut short
    else:
        other = entry.with_name("other")
        entry.rename(other)
        entry.symlink_to(other)
    assert config.load_config(path).profile.name == "cc"
    assert len(validations) == 2


def test_an_entry_from_another_user_is_not_read(home, validations):
    need(os.geteuid() == 0, "giving the entry to another user needs root (CI runs as root)")
    path = profile(home)
    config.load_config(path)
    (entry,) = entries(home)
    os.chown(entry, 65534, 65534)
    config.load_config(path)
    assert len(validations) == 2


def test_an_unwritable_cache_is_ignored(home, validations, monkeypatch):
    blocked = home / "blocked"
    blocked.write_text("a file where the cache folder would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocked))
    path = profile(home)
    assert config.load_config(path) == config.load_config(path)
    assert len(validations) == 2


def test_old_entries_are_pruned(home, monkeypatch):
    monkeypatch.setattr(config_cache, "KEEP", 3)
    for i in range(5):
        config.load_config(profile(home, name=f"p{i}"))
    assert len(entries(home)) == 3


def test_what_a_killed_writer_left_is_removed_once_it_is_old(home):
    config.load_config(profile(home, name="p0"))
    folder = entries(home)[0].parent
    old, fresh = folder / ".abc.json.hostctl-000000000001", folder / ".def.json.hostctl-000000000002"
    for tmp in (old, fresh):
        tmp.write_bytes(b"half an entry")
    hour_ago = os.stat(fresh).st_mtime - config_cache.STALE_TMP_S - 60
    os.utime(old, (hour_ago, hour_ago))
    config.load_config(profile(home, name="p1"))  # a miss: written, then pruned
    assert not old.exists() and fresh.exists()  # a write in progress elsewhere is left alone
    assert len(entries(home)) == 2


def test_a_write_that_fails_leaves_no_file(home, monkeypatch):
    class Full:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def write(self, data):
            raise OSError(28, "No space left on device")

    real = os.fdopen
    monkeypatch.setattr(config_cache.os, "fdopen", lambda fd, mode="r", **k: Full() if "w" in mode else real(fd, mode, **k))
    config.load_config(profile(home))  # the load itself still answers
    folder = home / "cache" / "hostctl" / "config"
    assert folder.is_dir() and list(folder.iterdir()) == []


def test_the_runtime_names_are_read_without_yaml(home):
    path = profile(home, runtime='[runtime]\nproject = "cc-names"\napi_port = 8123\n')
    from hostctl.service import identity

    expected = identity.of_config(config.load_config(path))
    code = ("import sys; from pathlib import Path; from hostctl.service import identity; "
            f"rt = identity.of_profile(Path({str(path)!r}), None, print); "
            "print(rt.container, rt.endpoint, rt.image, rt.project_dir); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'yaml' or m == 'hostctl.config'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, XDG_CACHE_HOME=str(home / "cache")))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"{expected.container} {expected.endpoint} {expected.image} "
                                        f"{expected.project_dir}", "[]"]
    assert expected.container == "cc-names-runtime" and expected.endpoint.endswith(":8123")


def test_a_profile_with_a_secret_of_its_own_is_not_remembered(home, validations):
    recipe = home / "recipe.yaml"
    recipe.write_text(DEMO_RECIPE.read_text().replace("env:\n", "env:\n  HF_TOKEN: hf_abcdefghijklmnopqrstuvwx\n", 1))
    path = profile(home)
    config.load_config(path)
    config.load_config(path)
    assert len(validations) == 2 and entries(home) == []


def test_names_of_another_layout_load_the_config(home):
    import json

    path = profile(home)
    config.load_config(path)
    (entry,) = entries(home)
    doc = json.loads(entry.read_text())
    assert config_cache.remembered_names(path) == (doc["names"], [])
    assert set(doc["names"]) == set(config_cache.NAME_TYPES)  # the layout identity.names() writes
    del doc["names"]["api_port"]
    entry.write_text(json.dumps(doc))
    assert config_cache.remembered_names(path) is None
