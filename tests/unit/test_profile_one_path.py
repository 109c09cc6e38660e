"""The profile root validates is the profile root later uses: `..` after a link is walked as the
kernel walks it (not collapsed on the text), the real path is what hostctl keeps, and what
provision installs, verify compares and the bundle carries is the text validated, not the path
read again.

The attacker is `nobody` (uid 65534): its folder and profile are chowned to it. Needs root.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from hostctl import examples
from hostctl.config import load_config
from hostctl.errors import UntrustedPathError
from hostctl.plan import build_plan
from hostctl.provision import system
from hostctl.service.render import INSTALLED_PROFILE
from need import needs

NOBODY = 65534
pytestmark = needs(os.geteuid() == 0, "needs root: the planted folder is chowned to nobody")


@pytest.fixture(autouse=True)
def _own_cache(tmp_path, monkeypatch):
    monkeypatch.delenv("SUDO_UID", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def _demo_text() -> str:
    return (Path(examples.__file__).resolve().parents[1] / "runtime/hosts/demo-cpu.toml").read_text()


def _layout(tmp_path, team_owner: int) -> Path:
    """home/p.toml (root's demo-cpu), home/l -> team/alice, team/p.toml (team_owner's)."""
    home, team = tmp_path / "home", tmp_path / "team"
    (team / "alice").mkdir(parents=True)
    home.mkdir()
    (home / "p.toml").write_text(_demo_text())
    (home / "l").symlink_to(team / "alice")
    (team / "p.toml").write_text(_demo_text().replace('name = "demo-cpu"', 'name = "team-profile"'))
    for p in (team, team / "alice", team / "p.toml"):
        os.chown(p, team_owner, team_owner)
    return home / "l" / ".." / "p.toml"


def test_dot_dot_after_a_link_is_the_kernels_file_and_nobodys_is_refused(tmp_path):
    typed = _layout(tmp_path, NOBODY)
    assert 'name = "team-profile"' in typed.read_text()  # what the kernel reaches
    with pytest.raises(UntrustedPathError) as exc:
        load_config(typed)
    assert exc.value.exit_code == 3


def test_the_real_path_is_kept_and_the_validated_text_is_installed(tmp_path):
    typed = _layout(tmp_path, 0)
    cfg = load_config(typed)
    assert cfg.profile.name == "team-profile" and cfg.source == str(tmp_path / "team" / "p.toml")
    validated = (tmp_path / "team" / "p.toml").read_bytes()
    # Whatever is at the path afterwards, provision installs the text it checked.
    (tmp_path / "team" / "p.toml").write_text(_demo_text().replace('name = "demo-cpu"', 'name = "changed-after"'))
    _, facts = examples.load("demo-cpu")
    files = system.desired_files(cfg, build_plan(cfg, facts))
    assert files[next(k for k in files if str(k) == INSTALLED_PROFILE)] == validated
