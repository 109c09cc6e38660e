"""`provision --only system`: profile and units installed under a sysroot, enabled with the real
systemctl working offline (`--root`), idempotent, previewable, and refusing before any change
when the units could not work (plan errors, no hostctl binary where they call it)."""

from __future__ import annotations

import io
import os
import shutil
from pathlib import Path

import pytest

from hostctl import examples, paths
from hostctl.cli import main
from hostctl.config import load_config
from hostctl.errors import FailedError, InputError, RefusedError
from hostctl.plan import build_plan
from hostctl.facts.sysfiles import LocalReader
from hostctl.provision import parts
from hostctl.provision.system import UNITS, decide, read_system
from hostctl.service.render import render_files
from need import needs

pytestmark = needs(shutil.which("systemctl") is not None, "systemctl not installed (apt-get install systemd)")

HOSTS = paths.hosts_dir()


@pytest.fixture
def sysroot(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "usr/local/bin").mkdir(parents=True)
    (root / "usr/local/bin/hostctl").write_text("#!/bin/sh\n")
    monkeypatch.setenv(paths.SYSROOT_ENV, str(root))
    return root


def _demo(profile: Path | None = None):
    config, facts = examples.load("demo-cpu")
    if profile is not None:
        config = load_config(profile)
    return config, build_plan(config, facts)


def system_actions(config, plan):
    """What the system part decides on this host now (the sysroot)."""
    return decide(config, plan, read_system(config, plan, LocalReader())).actions


def provision_system(config, plan, *, dry_run: bool):
    """The system part alone through the one executor, on the facts the plan was made from."""
    _, facts = examples.load("demo-cpu") if plan.profile == "demo-cpu" else examples.load("pro6000x2-desktop")
    report = parts.provision(config, only="system", dry_run=dry_run, facts=lambda c: facts, out=io.StringIO(),
                             err=io.StringIO())
    report.raise_for_error()
    return report


def statuses(report) -> list[tuple[str, str]]:
    return [(r.id, r.status) for r in report.actions]


def _tree(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = f"-> {os.readlink(p)}" if p.is_symlink() else (p.read_text() if p.is_file() else "<dir>")
    return out


def test_installs_profile_and_units_and_enables_them(sysroot):
    config, plan = _demo()
    report = provision_system(config, plan, dry_run=False)
    assert {s for _, s in statuses(report)} == {"changed"} and report.part("system").status == "converged"
    etc = sysroot / "etc"
    assert (etc / "hostctl/hostctl.toml").read_bytes() == Path(config.source).read_bytes()
    rendered = render_files(plan, config_path="/etc/hostctl/hostctl.toml")
    for unit in UNITS:
        assert (etc / "systemd/system" / unit).read_text() == rendered[unit]
        link = etc / "systemd/system/multi-user.target.wants" / unit
        assert link.is_symlink() and os.readlink(link) == f"/etc/systemd/system/{unit}"
    # the units read the installed profile, not the one provision was started with
    assert "--config /etc/hostctl/hostctl.toml" in (etc / "systemd/system/hostctl-runtime.service").read_text()


def test_second_run_changes_nothing(sysroot):
    config, plan = _demo()
    provision_system(config, plan, dry_run=False)
    before = _tree(sysroot)
    assert system_actions(config, plan) == []
    again = provision_system(config, plan, dry_run=False)
    assert {s for _, s in statuses(again)} == {"ok"} and again.part("system").changed == 0
    assert _tree(sysroot) == before


def test_dry_run_describes_exactly_and_changes_nothing(sysroot):
    config, plan = _demo()
    before = _tree(sysroot)
    result = provision_system(config, plan, dry_run=True)
    assert {s for _, s in statuses(result)} == {"would-change"} and _tree(sysroot) == before
    described = [r.describe for r in result.actions]
    assert described[0].startswith("create /etc/hostctl/hostctl.toml (")
    assert f"systemctl --root={sysroot} enable hostctl-runtime.service" in described
    # the power unit is the gpu part's (provision --only gpu)
    assert not any("hostctl-power" in d for d in described)
    # never a daemon-reload of the real systemd while working on a sysroot
    assert not any("daemon-reload" in d for d in described)


def test_changed_profile_replaces_only_the_profile(sysroot, tmp_path):
    config, plan = _demo()
    provision_system(config, plan, dry_run=False)
    edited = tmp_path / "hostctl.toml"
    edited.write_text(Path(config.source).read_text() + "\n# edited\n")
    config2, plan2 = _demo(edited)
    actions = system_actions(config2, plan2)
    assert [a.describe.split(" (")[0] for a in actions] == ["replace /etc/hostctl/hostctl.toml"]
    provision_system(config2, plan2, dry_run=False)
    assert (sysroot / "etc/hostctl/hostctl.toml").read_text().endswith("# edited\n")


def test_relative_recipe_is_installed_beside_the_profile(sysroot, tmp_path):
    (tmp_path / "recipes").mkdir()
    shutil.copy(paths.recipes_dir() / "demo-cpu-tiny-moe.yaml", tmp_path / "recipes/mine.yaml")
    profile = tmp_path / "hostctl.toml"
    profile.write_text((HOSTS / "demo-cpu.toml").read_text().replace('recipe = "demo-cpu-tiny-moe"',
                                                                      'recipe = "recipes/mine.yaml"'))
    config, plan = _demo(profile)
    provision_system(config, plan, dry_run=False)
    installed = sysroot / "etc/hostctl/recipes/mine.yaml"
    assert installed.read_bytes() == (tmp_path / "recipes/mine.yaml").read_bytes()
    # the installed profile loads, with the installed recipe
    assert load_config(sysroot / "etc/hostctl/hostctl.toml").recipe.id == "demo-cpu-tiny-moe"


def test_recipe_outside_the_profile_folder_is_refused(sysroot, tmp_path):
    shutil.copy(paths.recipes_dir() / "demo-cpu-tiny-moe.yaml", tmp_path / "mine.yaml")
    (tmp_path / "p").mkdir()
    profile = tmp_path / "p/hostctl.toml"
    profile.write_text((HOSTS / "demo-cpu.toml").read_text().replace('recipe = "demo-cpu-tiny-moe"',
                                                                      'recipe = "../mine.yaml"'))
    config, plan = _demo(profile)
    with pytest.raises(InputError, match="leaves the profile's folder"):
        provision_system(config, plan, dry_run=False)
    assert not (sysroot / "etc").exists()


def test_refuses_when_the_units_would_call_a_missing_hostctl(sysroot):
    (sysroot / "usr/local/bin/hostctl").unlink()
    config, plan = _demo()
    with pytest.raises(FailedError, match="/usr/local/bin/hostctl, which does not exist"):
        provision_system(config, plan, dry_run=False)
    assert not (sysroot / "etc").exists()


def test_refuses_a_plan_with_errors(sysroot, tmp_path):
    profile = tmp_path / "p.toml"
    profile.write_text((HOSTS / "pro6000x2-desktop.toml").read_text().replace("power_limit_w = 300", "power_limit_w = 900"))
    config = load_config(profile)
    _, facts = examples.load("pro6000x2-desktop")
    with pytest.raises(FailedError, match="plan has errors"):
        provision_system(config, build_plan(config, facts), dry_run=False)
    assert not (sysroot / "etc").exists()


def test_cli_only_system_prints_each_change(sysroot, capsys, monkeypatch):
    # the CLI probes the host: hand it the demo snapshot's facts through the same loader
    monkeypatch.setattr(parts, "live_facts", lambda config: examples.load("demo-cpu")[1])
    argv = ["provision", "--only", "system", "--config", str(HOSTS / "demo-cpu.toml")]
    assert main(argv + ["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "would: create /etc/systemd/system/hostctl-runtime.service" in out
    assert not (sysroot / "etc").exists()
    assert main(argv) == 0 and "done: " in capsys.readouterr().out
    assert main(argv) == 0 and capsys.readouterr().out.strip() == "system: nothing to change"


def test_a_masked_unit_and_a_linked_profile_are_refused_untouched(sysroot, tmp_path):
    # The admin masked the unit (`systemctl mask`: a link to /dev/null) and keeps the profile in a
    # folder of their own: writing hostctl's files would rename regular files over both links.
    units = sysroot / "etc/systemd/system"
    units.mkdir(parents=True)
    (units / "hostctl-runtime.service").symlink_to("/dev/null")
    mine = tmp_path / "mine.toml"
    mine.write_text("# the admin's\n")
    (sysroot / "etc/hostctl").mkdir()
    (sysroot / "etc/hostctl/hostctl.toml").symlink_to(mine)
    before = _tree(sysroot / "etc")
    config, plan = _demo()
    for dry_run in (True, False):
        with pytest.raises(RefusedError) as refused:
            provision_system(config, plan, dry_run=dry_run)
        assert refused.value.details == [f"/etc/hostctl/hostctl.toml -> {mine}",
                                         "/etc/systemd/system/hostctl-runtime.service -> /dev/null (the unit is masked)"]
        assert "systemctl unmask hostctl-runtime.service" in refused.value.fix
        assert _tree(sysroot / "etc") == before and mine.read_text() == "# the admin's\n"
    # unmasked, the part installs as on a clean host
    (units / "hostctl-runtime.service").unlink()
    (sysroot / "etc/hostctl/hostctl.toml").unlink()
    provision_system(config, plan, dry_run=False)
    assert not (units / "hostctl-runtime.service").is_symlink() and mine.read_text() == "# the admin's\n"
