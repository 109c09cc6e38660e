"""vLLM-MoET's placeholders through `hostctl plan`, on every recipe of the copy (tests/moet_runner.py).

A recipe that writes {planes_cache} (17 of the copy's 26, none with a `storage:` list) needs the
profile's planes cache: `plan` mounts and checks it, and shows each resolved value with the container
path and the host directory bound there. Without one, `plan` exits 1 naming the field; vLLM-MoET
drops the knob (bench/runner/common.py: build_env), a difference docs/vllm-moet-differences.md keeps.
{model:NAME} resolves under runtime.models_dir and must name one of requires.extra_models.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import moet_runner
from hostctl.cli import main

ROOT = Path(__file__).resolve().parents[2]
FACTS = ROOT / "runtime" / "hosts" / "pro6000x2-desktop.facts.json"
MOUNT = "/mnt/hostctl/ssd1"
PLANES_HOST = f"{MOUNT}/moet-planes"  # hostctl/plan/storage.py ROLE_DIRS
MODELS_DIR = "/srv/models"
RECIPES = moet_runner.recipe_ids()
PLANES_RECIPES = 17  # the issue's count: a copy that changes it changes this test's premise


def recipe_file(rid: str) -> Path:
    return moet_runner.bench_copy("recipes") / f"{rid}.yaml"


def recipe_data(rid: str) -> dict:
    return yaml.safe_load(recipe_file(rid).read_text())


def placeholders(rid: str) -> list[tuple[str, str]]:
    """(field, text) of each env value and serve_arg that holds a placeholder, read from the file itself."""
    data = recipe_data(rid)
    texts = [(f"env.{k}", str(v)) for k, v in (data.get("env") or {}).items()]
    texts += [(f"serve_args[{i}]", a) for i, a in enumerate(data.get("serve_args") or [])]
    return [(where, text) for where, text in texts if "{planes_cache}" in text or "{model:" in text]


def profile(tmp_path: Path, rid: str, planes: bool = True, models: bool = True) -> Path:
    lines = ['name = "t"', f'recipe = "{recipe_file(rid)}"', 'phase = "serving"', "[memory]", 'host_reserve = "4GiB"',
             "[storage]"]
    if planes:
        lines.append('planes_cache = "ssd1"')
    lines += ["[runtime]", 'image = "vllm-moet-recipes:v024"', f'model_dir = "{MODELS_DIR}/{recipe_data(rid)["model"]}"']
    if models:
        lines.append(f'models_dir = "{MODELS_DIR}"')
    lines += ["[[drives]]", 'name = "ssd1"', 'identity = "serial:25120G800101"', 'filesystem = "ext4"',
              f'mountpoint = "{MOUNT}"']
    path = tmp_path / "hostctl.toml"
    path.write_text("\n".join(lines) + "\n")
    return path


def plan(path: Path, capsys, *extra: str) -> tuple[int, str, str]:
    code = main(["--config", str(path), "--facts", str(FACTS), "plan", *extra])
    got = capsys.readouterr()
    return code, got.out, got.err


def test_the_copy_has_the_recipes_the_issue_counts():
    assert len(RECIPES) == 26
    assert sum(any("{planes_cache}" in t for _, t in placeholders(r)) for r in RECIPES) == PLANES_RECIPES


@pytest.mark.parametrize("rid", RECIPES)
def test_plan_shows_each_resolved_placeholder_and_mounts_its_role(tmp_path, capsys, rid):
    path = profile(tmp_path, rid)
    code, text, _ = plan(path, capsys)
    _, js, _ = plan(path, capsys, "--json")
    doc = json.loads(js)
    rt = doc["runtime"]
    assert not [p for s in doc.values() if isinstance(s, dict) for p in s.get("problems", [])
                if p["code"] in ("storage.planes_cache.unnamed", "runtime.models_dir_unset")]
    bound = {(b["field"], b["placeholder"]): b for b in rt["placeholders"]}
    wanted = placeholders(rid)
    assert len(bound) == sum(t.count("{planes_cache}") > 0 for _, t in wanted) + sum(
        "{model:" in t for _, t in wanted)
    for where, raw in wanted:
        if "{planes_cache}" in raw:
            b = bound[(where, "{planes_cache}")]
            assert (b["container_path"], b["host_path"]) == ("/planes", PLANES_HOST)
            value = raw.replace("{planes_cache}", "/planes")
        else:
            name = raw.split("{model:", 1)[1].split("}", 1)[0]
            b = bound[(where, f"{{model:{name}}}")]
            assert (b["container_path"], b["host_path"]) == (f"/models/{name}", f"{MODELS_DIR}/{name}")
            value = raw.replace(f"{{model:{name}}}", f"/models/{name}")
        # the value is what the runtime gets, and the text plan says where it comes from
        if where.startswith("env."):
            assert rt["env"][where[4:]] == value
        else:
            assert value.split(" ", 1)[1] in rt["command"]
        line = f"  {where}: {value}"
        assert line in text.splitlines(), text
        assert b["host_path"] in text.split(line, 1)[1].splitlines()[1]
        # the directory bound there is a volume of the runtime
        assert any(v["target"] == b["container_path"].rsplit("/", 1)[0] or v["target"] == b["container_path"]
                   for v in rt["volumes"])
    planes = [r for r in doc["storage"]["roles"] if r["role"] == "planes_cache"]
    if any("{planes_cache}" in t for _, t in wanted):
        # needed like a role in `storage:`: planned on its drive, and the unit waits for the mount
        assert planes and planes[0]["host_path"] == PLANES_HOST and MOUNT in doc["storage"]["required_mounts"]
    else:
        assert not planes


PLANES = [r for r in RECIPES if any("{planes_cache}" in t for _, t in placeholders(r))]


@pytest.mark.parametrize("rid", PLANES)
def test_plan_without_a_planes_cache_exits_1_naming_each_field(tmp_path, capsys, rid):
    path = profile(tmp_path, rid, planes=False)
    code, text, _ = plan(path, capsys)
    assert code == 1
    _, js, _ = plan(path, capsys, "--json")
    found = [p for p in json.loads(js)["storage"]["problems"] if p["code"] == "storage.planes_cache.unnamed"]
    fields = [where for where, t in placeholders(rid) if "{planes_cache}" in t]
    assert sorted(p["message"].split(":", 1)[0] for p in found) == sorted(fields)
    for where in fields:
        message = f"{where}: {{planes_cache}} has no value: the profile names no storage.planes_cache"
        assert f"ERROR [storage] {message}" in text
    assert all(p["severity"] == "error" and "storage.planes_cache" in p["fix"] for p in found)


MODEL_RECIPES = [r for r in RECIPES if any("{model:" in t for _, t in placeholders(r))]


def test_the_copy_has_a_model_placeholder():
    assert MODEL_RECIPES == ["kimi-k2.7-code-nvfp4/pro6000x4-tp4-eagle3"]


@pytest.mark.parametrize("rid", MODEL_RECIPES)
def test_plan_without_a_models_dir_exits_1_naming_the_serve_arg(tmp_path, capsys, rid):
    code, text, _ = plan(profile(tmp_path, rid, models=False), capsys)
    assert code == 1
    for where, raw in placeholders(rid):
        if "{model:" in raw:
            name = raw.split("{model:", 1)[1].split("}", 1)[0]
            assert f"ERROR [runtime] {where}: {{model:{name}}} has no value: the profile sets no runtime.models_dir" \
                in text, text


def test_a_model_placeholder_outside_extra_models_is_refused_at_load(tmp_path, capsys):
    data = recipe_data(MODEL_RECIPES[0])
    data["requires"]["extra_models"] = []
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(data))
    path = profile(tmp_path, MODEL_RECIPES[0])
    path.write_text(path.read_text().replace(str(recipe_file(MODEL_RECIPES[0])), str(tmp_path / "r.yaml")))
    code, _, err = plan(path, capsys)
    i = next(i for i, a in enumerate(data["serve_args"]) if "{model:" in a)
    assert code == 2 and f"serve_args[{i}]: {{model:Kimi-K2.7-Code-eagle3}} names a model" in err, err


def test_a_bare_model_placeholder_is_the_recipes_checkpoint_as_in_vllm_moet(tmp_path, capsys):
    """vLLM-MoET's _resolve_str reads `{model}` as the recipe's own model (bench/runner/common.py); hostctl
    refused it at load. Now it is the checkpoint: /model, bound from runtime.model_dir."""
    common = moet_runner.runner()["common"]
    rid = "deepseek-v4-flash/pro6000x2-tp2"
    data = recipe_data(rid)
    data["serve_args"].append("--tokenizer {model}")
    (tmp_path / "r.yaml").write_text(yaml.safe_dump(data))
    path = profile(tmp_path, rid)
    path.write_text(path.read_text().replace(str(recipe_file(rid)), str(tmp_path / "r.yaml")))
    code, text, err = plan(path, capsys, "--json")
    assert code in (0, 1), err  # loads (exit 2 before); 1 only for this host's other sections
    rt = json.loads(text)["runtime"]
    box = {"models": {data["model"]: f"{MODELS_DIR}/{data['model']}"}, "planes_cache": {}}
    theirs = common._resolve_str("{model}", data, box)
    i = len(data["serve_args"]) - 1
    b = next(b for b in rt["placeholders"] if b["field"] == f"serve_args[{i}]")
    assert (b["placeholder"], b["container_path"], b["host_path"]) == ("{model}", "/model", theirs)
    assert rt["command"][rt["command"].index("--tokenizer") + 1] == "/model"
