"""The CLI contract: global options on either side of the command, exit codes, stdout vs
stderr, --json documents, and commands that are not available yet failing honestly."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hostctl import paths
from hostctl.cli import main

HOSTS = paths.hosts_dir()
DESKTOP = ["--config", str(HOSTS / "pro6000x2-desktop.toml"), "--facts", str(HOSTS / "pro6000x2-desktop.facts.json")]


def run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_help_lists_every_command(capsys):
    code, out, _ = run(["--help"], capsys)
    assert code == 0
    for command in ("facts", "plan", "render", "provision", "store", "up", "down", "status", "logs", "smoke",
                    "verify", "doctor"):
        assert command in out


@pytest.mark.parametrize("order", ["before", "after"])
def test_global_options_before_or_after_the_command(order, capsys):
    argv = DESKTOP + ["plan", "--json"] if order == "before" else ["plan", "--json"] + DESKTOP
    code, out, err = run(argv, capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "hostctl.plan/v1" and doc["profile"] == "pro6000x2-desktop"
    assert doc["memory"]["limit_bytes"] == 34 * 1024**3


def test_plan_text_explains_each_decision(capsys):
    code, out, _ = run(["plan"] + DESKTOP, capsys)
    assert code == 0
    assert "NCCL P2P level: PHB" in out and "because" in out and "problems: none" in out


def test_plan_with_errors_exits_1(tmp_path, capsys):
    profile = tmp_path / "p.toml"
    profile.write_text((HOSTS / "pro6000x2-desktop.toml").read_text().replace("power_limit_w = 300", "power_limit_w = 900"))
    code, out, _ = run(["plan", "--config", str(profile), "--facts", str(HOSTS / "pro6000x2-desktop.facts.json")], capsys)
    assert code == 1 and "outside its range 150-600 W" in out


def test_facts_snapshot_round_trips_through_the_cli(capsys):
    code, out, _ = run(["facts", "--json", "--facts", str(HOSTS / "pro6000x2-desktop.facts.json")], capsys)
    assert code == 0
    assert json.loads(out) == json.loads((HOSTS / "pro6000x2-desktop.facts.json").read_text())


def test_live_facts_on_this_machine(capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no ./hostctl.toml: facts needs no profile
    monkeypatch.setattr(paths, "PROFILE_SEARCH", (Path("hostctl.toml"),))
    code, out, err = run(["facts", "--json"], capsys)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["schema"] == "hostctl.facts/v1"
    if not doc["gpus"]["available"]:
        assert doc["gpus"]["reason"]
    if not doc["engine"]["available"]:
        assert doc["engine"]["reason"]


def test_bad_config_exits_2_names_the_field_and_writes_nothing(tmp_path, capsys):
    profile = tmp_path / "p.toml"
    profile.write_text((HOSTS / "pro6000x2-desktop.toml").read_text().replace("[memory]", "[memory]\nhost_reserv = 1"))
    out_dir = tmp_path / "out"
    code, out, err = run(["render", "--config", str(profile), "--facts", str(HOSTS / "pro6000x2-desktop.facts.json"),
                          "--out", str(out_dir)], capsys)
    assert code == 2 and out == ""
    assert "memory.host_reserv: unknown key" in err
    assert not out_dir.exists()


def test_bad_snapshot_exits_2(tmp_path, capsys):
    snap = tmp_path / "s.json"
    snap.write_text('{"schema": "hostctl.facts/v1"}')
    code, _, err = run(["plan", "--config", str(HOSTS / "demo-cpu.toml"), "--facts", str(snap)], capsys)
    assert code == 2 and "hostname" in err


def test_render_with_plan_errors_writes_nothing(tmp_path, capsys):
    out_dir = tmp_path / "out"
    code, _, err = run(["render", "--config", str(HOSTS / "pro6000x2-desktop.toml"),
                        "--facts", str(HOSTS / "demo-cpu.facts.json"), "--out", str(out_dir)], capsys)
    assert code == 1 and "nothing was rendered" in err and not out_dir.exists()


def test_render_writes_the_project(tmp_path, capsys):
    code, out, _ = run(["render", "--out", str(tmp_path)] + DESKTOP, capsys)
    assert code == 0
    assert sorted(Path(p).name for p in out.split()) == sorted(
        ["compose.yaml", "runtime.env", "hostctl-runtime.service", "hostctl-power.service", "hostctl-metrics.service",
         "hostctl-metrics.timer"])
    assert (tmp_path / "compose.yaml").read_text() == (paths.golden_dir() / "pro6000x2-desktop" / "compose.yaml").read_text()


def _project_state(d: Path) -> dict:
    """What a rewrite changes even with the same text: each file's inode and mtime, and the folder's
    (write_project swaps a fresh folder in)."""
    return {p.name: (p.stat().st_ino, p.stat().st_mtime_ns) for p in [d, *sorted(d.iterdir())]}


def test_render_dry_run_shows_the_diff_and_writes_nothing(tmp_path, capsys):
    out_dir = tmp_path / "p"
    code, out, err = run(["render", "--out", str(out_dir), "--dry-run"] + DESKTOP, capsys)
    assert code == 0, err
    assert out == "" and not out_dir.exists()
    assert f"would render {out_dir}: write compose.yaml, runtime.env" in err
    assert f"+++ {out_dir / 'compose.yaml'} (rendered)" in err and '+    container_name: "hostctl-runtime"' in err
    assert "runtime.env: new (it holds the recipe's secrets: not shown)" in err
    assert "checked with docker compose config" not in err  # nothing was written, so nothing checked


def test_a_second_render_reports_unchanged_and_writes_nothing(tmp_path, capsys):
    code, first, err = run(["render", "--out", str(tmp_path / "p")] + DESKTOP, capsys)
    assert code == 0 and "[1/1] project/write" in err and "(unchanged)" not in err, err
    before = _project_state(tmp_path / "p")
    code, again, err = run(["render", "--out", str(tmp_path / "p")] + DESKTOP, capsys)
    assert code == 0 and again == first  # stdout: the project's files, as on the first run
    assert f"rendered {tmp_path / 'p'} (unchanged)" in err and "project/write" not in err, err
    assert _project_state(tmp_path / "p") == before


def test_render_dry_run_on_an_edited_project_shows_the_edit_and_keeps_it(tmp_path, capsys):
    out_dir = tmp_path / "p"
    assert run(["render", "--out", str(out_dir)] + DESKTOP, capsys)[0] == 0
    compose = out_dir / "compose.yaml"
    compose.write_text(compose.read_text().replace('name: "hostctl"', 'name: "edited"'))
    code, out, err = run(["render", "--out", str(out_dir), "--dry-run"] + DESKTOP, capsys)
    assert code == 0 and out == "", err
    assert f"would render {out_dir}: write compose.yaml into {out_dir}" in err
    assert '-name: "edited"\n+name: "hostctl"' in err
    assert 'name: "edited"' in compose.read_text()


@pytest.mark.parametrize("command", [["provision"], ["up"], ["down"], ["status"], ["logs"], ["verify"], ["store", "split"]])
def test_commands_that_act_refuse_a_snapshot(command, capsys):
    code, _, err = run(command + ["--facts", str(HOSTS / "demo-cpu.facts.json")], capsys)
    assert code == 2 and "acts on this host" in err


@pytest.mark.parametrize("argv, says", [(["verify", "--only", "disks"], "--only: expected a comma list"),
                                         (["verify", "--host", "http://x"], "--host: expected ssh://"),
                                         # urlparse drops the line break: ssh would reach another host
                                         (["verify", "--host", "ssh://u@h\nx"], "control character"),
                                         (["verify", "--host", "ssh://-oProxyCommand=id"], "as an option"),
                                         (["verify", "--facts", str(HOSTS / "demo-cpu.facts.json")], "acts on this host")])
def test_verify_bad_input_exits_2(argv, says, capsys):
    code, out, err = run(argv + ["--config", str(HOSTS / "demo-cpu.toml")], capsys)
    assert code == 2 and out == "" and says in err


def test_provision_system_refuses_a_plan_with_errors_and_touches_nothing(capsys, tmp_path, monkeypatch):
    # the desktop profile on this machine (no GPUs, too little RAM): the plan has errors
    monkeypatch.setenv(paths.SYSROOT_ENV, str(tmp_path))
    code, out, err = run(["provision", "--only", "system", "--config", str(HOSTS / "pro6000x2-desktop.toml")], capsys)
    assert code == 1 and out == "" and "the plan has errors; no unit was installed" in err
    # nothing but provision's own lock (one lock for all of provision, taken before reading the host)
    assert [str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()] == ["var/lib/hostctl/provision.lock"]


@pytest.mark.parametrize("command", [["provision", "--only", "storage"], ["store", "split"]])
def test_provision_and_split_need_a_profile(command, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(paths, "PROFILE_SEARCH", (Path("hostctl.toml"),))
    code, out, err = run(command, capsys)
    assert code == 2 and "no host profile found" in err


def test_usage_errors_exit_2(capsys):
    assert run(["plan", "--no-such-flag"], capsys)[0] == 2
    assert run(["provision", "--only", "disks"], capsys)[0] == 2
    assert run(["doctor", "--level", "deep"], capsys)[0] == 2


def test_console_script_exit_codes():
    ok = subprocess.run([sys.executable, "-m", "hostctl", "plan", "--json"] + DESKTOP, capture_output=True, text=True)
    assert ok.returncode == 0 and json.loads(ok.stdout)["recipe"] == "dsv4-flash-0731-tp2-400k"
    # a host that cannot be reached fails (exit 1), with nothing on stdout
    bad = subprocess.run([sys.executable, "-m", "hostctl", "verify", "--host", "ssh://nobody@127.0.0.1:1",
                          "--config", str(HOSTS / "demo-cpu.toml")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 1 and bad.stdout == "" and "cannot reach ssh://nobody@127.0.0.1:1" in bad.stderr
