"""Render checks its own output before anything is written, and writes a project in one step:
a unit with a key its template does not write is refused (even when a value slipped past the
config validators), env values with quotes read back unchanged, a failed check leaves the old
project, runtime.env is 0600 in a 0700 directory, and a directory with other files keeps them."""

import json
import os
import subprocess

import pytest

import snapshots
from conftest import needs_compose
from hostctl.errors import FailedError, InputError
from hostctl.plan import build_plan
from hostctl.service import rendercheck
from hostctl.service.render import FILES, _env_quote, render_files, write_project


def desktop_plan(**runtime_changes):
    config, facts = snapshots.desktop()
    plan = build_plan(config, facts)
    if runtime_changes:
        plan = plan.model_copy(update={"runtime": plan.runtime.model_copy(update=runtime_changes)})
    return plan


def test_every_unit_template_knows_its_keys():
    allowed, required = rendercheck.template_keys("hostctl-runtime.service.j2")
    assert ("Service", "ExecStart") in required and ("Unit", "RequiresMountsFor") in allowed - required
    assert ("Service", "ExecStartPre") not in allowed


def test_a_newline_that_slipped_past_validation_cannot_add_a_unit_key():
    # Built around the validators (model_copy does not validate): the render check is the second line.
    plan = desktop_plan(required_mounts=["/mnt/hostctl/ssd1\nExecStartPre=/bin/sh -c 'id > /tmp/pwned'"])
    with pytest.raises(InputError) as info:
        render_files(plan)
    assert any("ExecStartPre= is not a key its template writes" in d for d in info.value.details)


def test_a_recipe_id_with_a_newline_cannot_reach_the_units():
    plan = desktop_plan().model_copy(update={"recipe": "x\nExecStartPre=/bin/sh"})
    with pytest.raises(InputError):
        render_files(plan)


def test_an_env_value_that_becomes_two_lines_is_refused():
    plan = desktop_plan()
    env = dict(plan.runtime.env, VLLM_X="a\nVLLM_EVIL=1")
    with pytest.raises(InputError):
        render_files(desktop_plan(env=env))


def test_compose_structure_is_compared_with_the_plan():
    plan = desktop_plan()
    files = render_files(plan)
    assert rendercheck.compose_problems(files["compose.yaml"], plan, plan.runtime.env) == []
    tampered = files["compose.yaml"].replace("    restart: \"no\"", "    restart: \"no\"\n    privileged: true")
    assert any("privileged" in p for p in rendercheck.compose_problems(tampered, plan, plan.runtime.env))
    extra_volume = files["compose.yaml"].replace("    volumes:\n", "    volumes:\n      - {type: bind, source: /, target: /host}\n")
    assert rendercheck.compose_problems(extra_volume, plan, plan.runtime.env)
    twice = files["compose.yaml"].replace("    ipc: ", "    ipc: \"private\"\n    ipc: ")
    assert "does not parse" in rendercheck.compose_problems(twice, plan, plan.runtime.env)[0]


@pytest.mark.parametrize("value", ["it's", 'say "hi"', "x'y\"z$w\\v", "a #b", "$HOME", " pad ", "100%", "", "{\"a\": 1}"])
def test_env_values_read_back_unchanged(value):
    assert rendercheck.decode_env_value(_env_quote(value)) == value


@needs_compose
def test_docker_compose_reads_quoted_env_values_as_written(tmp_path):
    values = {"A": "it's", "B": 'say "hi" $HOME \\n', "C": "a #b c", "D": "x'y\"z$w"}
    (tmp_path / "runtime.env").write_text("".join(f"{k}={_env_quote(v)}\n" for k, v in values.items()))
    (tmp_path / "compose.yaml").write_text("services:\n  x:\n    image: busybox\n    env_file: [runtime.env]\n")
    res = subprocess.run(["docker", "compose", "--project-directory", str(tmp_path), "config", "--format", "json"],
                         capture_output=True, text=True, env=dict(os.environ, HOME="/nowhere"))
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)["services"]["x"]["environment"]
    # `config` prints a literal $ as $$ (its own escaping); undo that to compare
    assert {k: v.replace("$$", "$") for k, v in got.items()} == values


def test_write_project_modes_and_atomic_replacement(tmp_path):
    out = tmp_path / "project"
    files = render_files(desktop_plan())
    write_project(files, out)
    assert sorted(p.name for p in out.iterdir()) == sorted(FILES)
    assert out.stat().st_mode & 0o777 == 0o700
    assert (out / "runtime.env").stat().st_mode & 0o777 == 0o600
    assert (out / "compose.yaml").stat().st_mode & 0o777 == 0o644
    inode = out.stat().st_ino
    write_project({**files, "compose.yaml": files["compose.yaml"] + "# v2\n"}, out)
    assert (out / "compose.yaml").read_text().endswith("# v2\n")
    assert out.stat().st_ino != inode  # swapped in one step (renameat2 exchange), not rewritten file by file
    assert [p.name for p in tmp_path.iterdir()] == ["project"]  # no temporary directory left


def test_a_failed_check_leaves_the_old_project(tmp_path):
    out = tmp_path / "project"
    files = render_files(desktop_plan())
    write_project(files, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def reject(candidate):
        assert (candidate / "compose.yaml").read_text().startswith("BROKEN")  # checked in the temporary copy
        raise FailedError("docker compose config rejected the rendered project")

    with pytest.raises(FailedError):
        write_project({**files, "compose.yaml": "BROKEN\n"}, out, check=reject)
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    assert [p.name for p in tmp_path.iterdir()] == ["project"]


def test_a_directory_with_other_files_keeps_them(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    mode = tmp_path.stat().st_mode & 0o777
    write_project(render_files(desktop_plan()), tmp_path)
    assert (tmp_path / "notes.txt").read_text() == "mine" and (tmp_path / "compose.yaml").is_file()
    assert tmp_path.stat().st_mode & 0o777 == mode  # a directory hostctl does not own keeps its mode
    assert (tmp_path / "runtime.env").stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("target", ["/proc/x", "/dev/null/x", "/etc/hostctl/project", "/", "/usr/local/x"])
def test_targets_that_cannot_hold_a_project_are_bad_input(target):
    with pytest.raises(InputError):
        write_project({"compose.yaml": "x"}, __import__("pathlib").Path(target))


def test_a_file_on_the_way_is_bad_input(tmp_path):
    (tmp_path / "f").write_text("x")
    for target in (tmp_path / "f", tmp_path / "f" / "sub"):
        with pytest.raises(InputError, match="is a file"):
            write_project({"compose.yaml": "x"}, target)
