"""A thin CLI: choices typer checks before a command runs, and `down`, `status`, `logs` and `smoke`
working from the profile alone (hostctl.service.identity), without reading the host's facts."""

import json

import pytest

from hostctl import examples, paths
from hostctl.cli import main
from hostctl.cli.check import DoctorLevel
from hostctl.cli.prepare import ProvisionPart
from hostctl.doctor import LEVELS
from hostctl.plan import build_plan
from hostctl.provision.parts import ORDER
from hostctl.service import identity, lifecycle, preflight

HOSTS = paths.hosts_dir()
PROJECT = "hc12a-thin"  # no container of this project exists: nothing here starts or stops one


def run(argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_cli_choices_are_their_owners_tuples():
    assert tuple(p.value for p in ProvisionPart) == ORDER
    assert tuple(level.value for level in DoctorLevel) == LEVELS


@pytest.mark.parametrize("argv, option, choices", [(["provision", "--only", "disks"], "--only", ORDER),
                                                   (["doctor", "--level", "deep"], "--level", LEVELS)])
def test_a_wrong_choice_exits_2_naming_the_valid_ones(argv, option, choices, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv(paths.SYSROOT_ENV, str(tmp_path))
    code, out, err = run(argv, capsys)
    assert code == 2 and out == ""
    assert f"Invalid value for '{option}'" in err and all(f"'{c}'" in err for c in choices)
    assert list(tmp_path.iterdir()) == []  # refused before the command ran: not even its lock


@pytest.mark.parametrize("name", examples.names())
def test_the_profile_names_the_runtime_as_the_plan_does(name):
    config, facts = examples.load(name)
    plan = build_plan(config, facts)
    rt = identity.of_config(config)
    assert rt.project == plan.runtime.project
    assert rt.container == lifecycle.container_name(plan)
    assert rt.endpoint == preflight.endpoint(plan)
    assert rt.image == plan.runtime.image and rt.api_key_env == plan.runtime.api_key_env
    assert rt.project_dir == lifecycle.project_dir(config)
    assert rt.hang_timeout_s == plan.runtime.hang_timeout_s
    assert f"--served-model-name {rt.served_name}" in " ".join(plan.runtime.command)


@pytest.fixture
def profile(tmp_path, monkeypatch):
    """The demo profile under a project of its own; every host probe but the engine's fails loudly."""
    monkeypatch.setenv(paths.SYSROOT_ENV, str(tmp_path / "root"))
    text = (HOSTS / "demo-cpu.toml").read_text().replace("[runtime]\n", f'[runtime]\nproject = "{PROJECT}"\n')
    path = tmp_path / "hostctl.toml"
    path.write_text(text)

    def no_probe(*args, **kwargs):
        raise AssertionError("a command that needs only the profile read the host's facts")

    import hostctl.facts
    import hostctl.facts.gpu

    monkeypatch.setattr(hostctl.facts, "collect", no_probe)
    monkeypatch.setattr(hostctl.facts, "collect_storage", no_probe)
    monkeypatch.setattr(hostctl.facts.gpu, "probe_gpus", no_probe)
    return str(path)


def test_status_reads_the_profile_and_the_engine_only(profile, capsys):
    code, out, err = run(["status", "--json", "--config", profile], capsys)
    doc = json.loads(out)
    assert code == 1 and doc["schema"] == "hostctl.status/v1", err
    assert doc["container"] == f"{PROJECT}-runtime" and doc["endpoint"] == "http://127.0.0.1:8000"
    assert doc["state"] == "down" and doc["healthy"] is None
    code, out, _ = run(["status", "--config", profile], capsys)
    assert code == 1 and out.startswith(f"{PROJECT}-runtime: down\n")


def test_status_says_when_the_engine_cannot_be_asked(profile, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such.sock")
    code, out, _ = run(["status", "--json", "--config", profile], capsys)
    doc = json.loads(out)
    assert code == 1 and doc["state"] == "unknown" and "no-such.sock does not exist" in doc["reason"]
    code, out, _ = run(["status", "--config", profile], capsys)
    assert code == 1 and out.startswith(f"{PROJECT}-runtime: unknown (Docker socket ")


def test_down_and_logs_name_the_container_from_the_profile(profile, capsys):
    code, out, err = run(["down", "--config", profile], capsys)
    assert code == 0 and out == f"down: {PROJECT}-runtime was not running\n", err
    code, out, err = run(["logs", "--config", profile], capsys)
    assert code == 1 and out == "" and f"no runtime container {PROJECT}-runtime" in err


def test_down_says_when_the_engine_cannot_be_asked(profile, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such.sock")
    code, out, err = run(["down", "--config", profile], capsys)
    assert code == 1 and out == "", err  # a failure the user can act on, not a bug (exit 70)
    assert f"Docker engine unreachable at {tmp_path}/no-such.sock" in err and "fix: start the engine" in err


def test_smoke_refuses_an_address_off_this_machine_without_reading_the_host(profile, capsys):
    code, out, err = run(["smoke", "--url", "http://192.0.2.1:8000", "--config", profile], capsys)
    assert code == 2 and "192.0.2.1" in err
