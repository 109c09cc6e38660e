"""The Compose plugin's version is asked once per installed binary (hostctl.facts.compose_cache):
a real executable in a DOCKER_CONFIG's cli-plugins folder that counts how often it runs."""

from __future__ import annotations

import os
import shutil

import pytest

from hostctl.facts import compose_cache
from hostctl.facts.engine import compose_plugin, probe_compose
from need import needs

PLUGIN = """#!/bin/sh
echo run >> "{count}"
echo v{version}
"""


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """(write(version), runs()): a Compose plugin the probe finds first, and how often it ran."""
    config, count = tmp_path / "docker-config", tmp_path / "runs"
    (config / "cli-plugins").mkdir(parents=True)
    monkeypatch.setenv("DOCKER_CONFIG", str(config))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    binary = config / "cli-plugins" / "docker-compose"

    def write(version: str) -> None:
        fresh = binary.with_name(".new")
        fresh.write_text(PLUGIN.format(count=count, version=version))
        fresh.chmod(0o755)
        os.replace(fresh, binary)  # as an installer does: a new inode

    def runs() -> int:
        return len(count.read_text().splitlines()) if count.exists() else 0

    write("2.40.3")
    assert compose_plugin() == str(binary)
    return write, runs


needs_docker_cli = needs(shutil.which("docker") is not None, "no docker CLI: the plugin is not asked directly")


@needs_docker_cli
def test_the_plugin_runs_once_per_binary(plugin, tmp_path):
    write, runs = plugin
    assert probe_compose() == ("2.40.3", None) and runs() == 1
    assert probe_compose() == ("2.40.3", None) and runs() == 1  # answered from the cache
    assert (tmp_path / "cache" / "hostctl" / compose_cache.CACHE_NAME).is_file()
    write("2.41.0")  # an upgrade: another binary
    assert probe_compose() == ("2.41.0", None) and runs() == 2
    assert probe_compose() == ("2.41.0", None) and runs() == 2


@needs_docker_cli
def test_an_unreadable_cache_is_ignored(plugin, tmp_path):
    write, runs = plugin
    cache = tmp_path / "cache" / "hostctl" / compose_cache.CACHE_NAME
    cache.parent.mkdir(parents=True)
    for broken in ("{not json", "[]", '{"schema": "hostctl.compose-version-cache/v1", "version": 7}'):
        cache.write_text(broken)
        before = runs()
        assert probe_compose() == ("2.40.3", None) and runs() == before + 1
    assert probe_compose() == ("2.40.3", None) and runs() == 3  # rewritten by the last miss


@needs_docker_cli
def test_a_cache_that_cannot_be_written_only_costs_the_run(plugin, tmp_path, monkeypatch):
    write, runs = plugin
    (tmp_path / "blocked").write_text("a file where the cache folder would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "blocked"))
    assert probe_compose() == ("2.40.3", None) and probe_compose() == ("2.40.3", None)
    assert runs() == 2


@needs_docker_cli
def test_a_failing_plugin_is_not_remembered(plugin, tmp_path):
    write, runs = plugin
    binary = compose_plugin()
    with open(binary, "a") as fh:
        fh.write("exit 3\n")
    first = probe_compose()  # falls back to `docker compose`, which runs the plugin too, as before the cache
    assert compose_cache.remembered(binary) is None
    seen = runs()
    assert probe_compose() == first and runs() > seen  # asked again: nothing was remembered
