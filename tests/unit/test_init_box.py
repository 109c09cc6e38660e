"""`hostctl init --box`: every vLLM-MoET box of the copy in ../shared/vllm-moet-bench becomes a
profile that loads and plans, for each recipe that box can run by vLLM-MoET's own verdict
(bench/runner/common.py: compat); for every recipe x box the plan's box-fit verdict is compat's;
the box env a profile passes is what vLLM-MoET's docker runtime passes, less the pinned
differences (docs/vllm-moet-differences.md, "Boxes"); a bad box exits 2 naming its field.

vLLM-MoET's compat also checks that each model folder exists and carries a snapshot marker that
matches bench/models.yaml. The box files name folders of their own hosts, so the tests lay the
box out again in tmp_path: the same file with each model path pointing at a tiny fake checkpoint
(config.json and one .safetensors) whose marker hostctl's own writer wrote
(hostctl/model/manifest.py: write_marker). compat then judges hostctl's marker: if it rejected
one, that would be a difference to fix, so the test asserts it never does.
"""

from __future__ import annotations

import hashlib
import json
import re
import tomllib
from itertools import combinations
from pathlib import Path

import pytest
import yaml

import moet_runner
import snapshots
from hostctl.images import GPU_RUNTIME_IMAGE
from hostctl.cli import main
from hostctl.config import load_config
from hostctl.facts.records import HostFacts
from hostctl.facts.manifest import Manifest, ManifestFile
from hostctl.model.manifest import write_marker
from hostctl.model.registry import load_models
from hostctl.plan import build_plan, codes
from hostctl.profile_init import init_profile
from hostctl.plan.box import box_fit
from hostctl.profile_init.box import VENV_ONLY_ENV, load_box
from hostctl.profile_init.box_profile import declaration
from hostctl.profile_init.records import InitOptions

BOXES = moet_runner.box_files()
RECIPES = moet_runner.recipe_ids()
BOX_CODES = {codes.BOX_TOO_FEW_GPUS, codes.BOX_VRAM_SHORT, codes.BOX_HOST_RAM_SHORT, codes.BOX_MODEL_MISSING}
# Plan errors a box's profile may have on a snapshot matching the box, each with why it is not the box's fault.
ALLOWED_ERRORS: dict[str, set[str]] = {"venv": set(), "docker": set()}


def common():
    return moet_runner.runner()["common"]


def test_the_copy_has_boxes_and_recipes():
    # The parametrised tests below would pass empty: say so when the copy is not there.
    moet_runner.bench_dir()
    assert len(BOXES) == 6 and len(RECIPES) == 26


# ---------------------------------------------------------------- the box laid out in tmp_path


def fake_checkpoint(folder: Path, name: str, registry) -> None:
    """config.json and one shard, with the marker hostctl writes after a pull of `name`'s pin."""
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"model_type": "fake", "name": name}))
    shard = f"weights of {name}".encode()
    (folder / "model.safetensors").write_bytes(shard)
    entry = registry[name]
    manifest = Manifest(repo=entry.hf_repo, revision=entry.revision, complete=True, files=[
        ManifestFile(name="model.safetensors", size=len(shard), lfs=True, sha256=hashlib.sha256(shard).hexdigest())])
    assert write_marker(folder, manifest) is not None


def laid_out(box_file: Path, tmp_path: Path) -> Path:
    """The box file again, under tmp_path/boxes/, its models and planes caches in tmp_path."""
    data = yaml.safe_load(box_file.read_text())
    registry = load_models(moet_runner.bench_dir() / "models.yaml")
    for name in data.get("models", {}):
        folder = tmp_path / "models" / name
        fake_checkpoint(folder, name, registry)
        data["models"][name] = str(folder)
    for name in data.get("planes_cache", {}) or {}:
        data["planes_cache"][name] = str(tmp_path / "planes" / name)
        (tmp_path / "planes" / name).mkdir(parents=True)
    out = tmp_path / "boxes" / box_file.name
    out.parent.mkdir(exist_ok=True)
    # beside it, as in vLLM-MoET's bench/: the recipes and the models file init --box reads there
    for part in ("recipes", "models.yaml"):
        if not (tmp_path / part).exists():
            (tmp_path / part).symlink_to(moet_runner.bench_dir() / part)
    out.write_text(yaml.safe_dump(data, sort_keys=False))
    return out


def box_facts(box_file: Path) -> HostFacts:
    """The desktop's snapshot made into the box: its GPU count, model and VRAM, its host RAM."""
    box = load_box(box_file)
    _, f = snapshots.desktop()
    f = f.model_copy(deep=True)
    first = f.gpus.devices[0]
    gpus = []
    for i in range(box.gpu_count):
        g = first.model_copy(deep=True)
        g.index, g.uuid, g.pci_bus_id = i, f"GPU-00000000-0000-4000-8000-{i:012x}", f"0000:{0x10 + i:02x}:00.0"
        g.name, g.memory_total_bytes = f"NVIDIA {box.gpu_name}", int(box.vram_gb * 1e9)
        gpus.append(g)
    f.gpus.devices = gpus
    pair = f.gpus.pairs[0]
    f.gpus.pairs = [pair.model_copy(update={"a": a, "b": b}) for a, b in combinations(range(len(gpus)), 2)]
    f.state.p2p = None  # measured on the desktop's two GPUs, not these
    f.memory.mem_total_bytes = int(box.host_ram_gb * 1e9)
    f.memory.mem_available_bytes = int(box.host_ram_gb * 1e9 * 0.9)
    return f


def write_facts(facts: HostFacts, tmp_path: Path) -> Path:
    path = tmp_path / "box.facts.json"
    path.write_text(facts.model_dump_json(indent=2))
    return path


def recipe_file(rid: str) -> Path:
    return moet_runner.bench_dir() / "recipes" / f"{rid}.yaml"


def init_box(box_file: Path, facts_path: Path, tmp_path: Path, rid: str | None):
    out = tmp_path / "hostctl.toml"
    result = init_profile(facts_path=facts_path, options=InitOptions(), recipe_ref=rid, out=out, force=True,
                          box_path=box_file)
    return result, load_config(out)


def moet_verdict(rid: str, box_file: Path) -> str | None:
    c = common()
    return c.compat(c.load_recipe(rid), c.load_box(str(box_file)))


# compat's reasons, in its order (it returns text only), as the plan's codes
COMPAT_REASONS = ((re.compile(r"needs \S+ GPUs, box has \S+"), codes.BOX_TOO_FEW_GPUS),
                  (re.compile(r"needs \S+ GB VRAM/GPU, box has \S+"), codes.BOX_VRAM_SHORT),
                  (re.compile(r"needs \S+ GB host RAM"), codes.BOX_HOST_RAM_SHORT),
                  (re.compile(r"model \S+ not on this box"), codes.BOX_MODEL_MISSING))


def compat_code(reason: str | None) -> str | None:
    if reason is None:
        return None
    for rule, code in COMPAT_REASONS:
        if rule.fullmatch(reason):
            return code
    # "model path missing", "no valid pinned snapshot marker", "marker does not match models.yaml":
    # the laid-out box has every folder with hostctl's marker, so compat refusing one is a bug.
    raise AssertionError(f"vLLM-MoET's compat refuses the laid-out box for a reason hostctl's marker should "
                         f"satisfy: {reason}")


# ---------------------------------------------------------------- every recipe x box: the verdict


@pytest.mark.parametrize("box_file", BOXES, ids=[b.stem for b in BOXES])
def test_the_plans_box_verdict_is_vllm_moets_compat_for_every_recipe(box_file, tmp_path):
    box = laid_out(box_file, tmp_path)
    facts = write_facts(box_facts(box), tmp_path)
    runnable = 0
    for rid in RECIPES:
        reason = moet_verdict(rid, box)
        _, config = init_box(box, facts, tmp_path, str(recipe_file(rid)))
        plan = build_plan(config, box_facts(box))
        found = [p.code for p in plan.box.problems if p.code in BOX_CODES]
        assert all(p.severity == "error" for p in plan.box.problems if p.code in BOX_CODES)
        # compat stops at its first reason; the plan reports each, in compat's order.
        assert (found[0] if found else None) == compat_code(reason), (rid, reason, found)
        runnable += reason is None
    assert runnable, f"box {box_file.stem} can run none of the copy's recipes"


# ---------------------------------------------------------------- every box: a profile that plans


@pytest.mark.parametrize("box_file", BOXES, ids=[b.stem for b in BOXES])
def test_every_box_becomes_a_profile_that_plans_for_each_recipe_it_can_run(box_file, tmp_path):
    """The box file itself (its own paths), for each recipe compat lets it run (judged on the laid-out copy)."""
    layout = laid_out(box_file, tmp_path / "layout")
    box = load_box(box_file)
    facts = box_facts(box_file)
    facts_path = write_facts(facts, tmp_path)
    runnable = [rid for rid in RECIPES if moet_verdict(rid, layout) is None]
    assert runnable
    for rid in runnable:
        out = tmp_path / f"{rid.replace('/', '_')}.toml"
        assert main(["init", "--box", str(box_file), "--recipe", rid, "--facts", str(facts_path),
                     "--out", str(out)]) == 0
        config = load_config(out)
        plan = build_plan(config, facts)
        assert {p.code for p in plan.errors} <= ALLOWED_ERRORS[box.runtime], (rid, [p.message for p in plan.errors])
        assert not plan.box.problems, (rid, [p.message for p in plan.box.problems])
        assert config.recipe.id == rid and config.profile.box.id == box.id
        assert (config.profile.box.gpus, config.profile.box.vram_gb, config.profile.box.host_ram_gb) == \
            (box.gpu_count, box.vram_gb, box.host_ram_gb)
        # hostctl's own runtime image for every box: the box's is vLLM-MoET's recipe launcher.
        assert config.profile.runtime.image == GPU_RUNTIME_IMAGE
        # What the recipe's placeholders need has a place, even where the box's own cannot be used
        # (under /root): {planes_cache} a planes cache, {model:NAME} a models folder.
        texts = [str(v) for v in config.recipe.env.values()] + config.recipe.serve_args
        if any("{planes_cache}" in t for t in texts):
            assert config.profile.storage.planes_cache is not None, rid
        if config.recipe.requires.extra_models:
            assert config.profile.runtime.models_dir is not None, rid


@pytest.mark.parametrize("box_file", BOXES, ids=[b.stem for b in BOXES])
def test_box_values_land_in_the_profile_each_with_its_source(box_file, tmp_path):
    layout = laid_out(box_file, tmp_path)
    box = load_box(layout)
    facts = write_facts(box_facts(layout), tmp_path)
    result, config = init_box(layout, facts, tmp_path, None)
    recipe = config.recipe
    assert not box_fit(declaration(box), recipe), "init chose a recipe the box cannot run"
    if recipe.id in RECIPES:
        assert moet_verdict(recipe.id, layout) is None
    rt = config.profile.runtime
    assert rt.model_dir == box.models[recipe.model]
    assert config.profile.storage.planes_cache == box.planes_cache.get(recipe.model, config.profile.storage.planes_cache)
    if recipe.requires.extra_models:
        assert rt.models_dir == str(Path(box.models[recipe.requires.extra_models[0]]).parent)
    assert rt.models_file == str(moet_runner.bench_dir().parent / "vllm-moet-bench" / "models.yaml") or \
        Path(rt.models_file).name == "models.yaml"
    doc = result.document()
    sources = {c["key"]: c["source"] for c in doc["choices"]}
    assert all(sources.values()), [k for k, v in sources.items() if not v]
    assert sources["runtime.model_dir"] == f"box {layout.name}: models.{recipe.model}"
    assert sources["runtime.image"] == "hostctl's bundled GPU runtime"
    text = (tmp_path / "hostctl.toml").read_text()
    assert f"# model_dir (box {layout.name}: models.{recipe.model})" in text
    # Nothing of the box is dropped silently: each top-level value is used, or listed with why.
    used = {"id", "gpus", "host_ram_gb", "models", "planes_cache", "env"}
    unused = {u["field"].split(".")[0] for u in doc["box"]["unused"]}
    raw = yaml.safe_load(layout.read_text())
    assert set(raw) - used <= unused, set(raw) - used - unused
    for key in raw.get("env", {}):
        assert key in (rt.env or {}) or f"env.{key}" in {u["field"] for u in doc["box"]["unused"]}, key


# ---------------------------------------------------------------- env: what reaches the container


def test_venv_only_knobs_are_vllm_moets():
    assert set(VENV_ONLY_ENV) == set(common()._VENV_ONLY_ENV)


@pytest.mark.parametrize("box_file", BOXES, ids=[b.stem for b in BOXES])
def test_box_env_reaches_the_runtime_as_vllm_moet_passes_it(box_file, tmp_path):
    """Docker boxes: hostctl passes exactly the box env that vLLM-MoET's docker run passes with -e,
    less NCCL_* (pinned: the NCCL plan decides). Venv boxes: vLLM-MoET's process env carries every
    box knob but PATH_PREPEND/LD_LIBRARY_PATH_PREPEND; hostctl, running an image, passes those
    vLLM-MoET's docker runtime would, less NCCL_* and host paths (pinned)."""
    layout = laid_out(box_file, tmp_path)
    facts = write_facts(box_facts(layout), tmp_path)
    rid = next(r for r in RECIPES if moet_verdict(r, layout) is None)
    _, config = init_box(layout, facts, tmp_path, rid)
    c = common()
    recipe, box = c.load_recipe(config.recipe.id), c.load_box(str(layout))
    plan = build_plan(config, box_facts(layout))
    ours = {k: v for k, v in plan.runtime.env.items() if plan.runtime.env_sources.get(k) == "profile"}
    ours.update({k: config.profile.runtime.env[k] for k in config.profile.runtime.env if k in recipe["env"]})
    if box.get("runtime") == "docker":
        cmd = c._docker_serve_cmd(recipe, box, 8000, [0], None, ())
        theirs = dict(cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "-e")
        theirs = {k: v for k, v in theirs.items() if k in box["env"]}
    else:
        theirs = {k: v for k, v in box["env"].items() if k not in c._VENV_ONLY_ENV and not str(v).startswith("/")}
    pinned = {k for k in theirs if k.startswith("NCCL_")}
    assert {k: v for k, v in theirs.items() if k not in pinned} == ours


# ---------------------------------------------------------------- bad boxes


# A box the bundled tp2 recipe fits (2x 96 GB, its model)
GOOD = {"id": "b1", "gpus": {"name": "RTX PRO 6000", "count": 2, "vram_gb": 96}, "host_ram_gb": 512,
        "runtime": "docker", "docker_image": "vllm-moet-recipes:v024",
        "models": {"DeepSeek-V4-Flash-0731": "/srv/models/ds4-0731"}}


def _bad(**change):
    data = json.loads(json.dumps(GOOD))
    for key, value in change.items():
        target, *rest = key.split("__")
        if rest:
            data[target][rest[0]] = value
        elif value is None:
            data.pop(target)
        else:
            data[target] = value
    return data


BAD = {
    "count not a number": (_bad(gpus__count="four"), "gpus.count"),
    "count a boolean": (_bad(gpus__count=True), "gpus.count"),
    "vram negative": (_bad(gpus__vram_gb=-1), "gpus.vram_gb"),
    "no gpus": (_bad(gpus=None), "gpus"),
    "ram missing": (_bad(host_ram_gb=None), "host_ram_gb"),
    "model name with a slash": (_bad(models={"../etc": "/srv/x"}), "models.../etc"),
    "model path relative": (_bad(models={"DeepSeek-V4-Flash": "models/ds4"}), "models.DeepSeek-V4-Flash"),
    "model path with ..": (_bad(models={"DeepSeek-V4-Flash": "/srv/../etc"}), "models.DeepSeek-V4-Flash"),
    "planes cache with ..": (_bad(planes_cache={"DeepSeek-V4-Flash": "/srv/a/../../x"}),
                             "planes_cache.DeepSeek-V4-Flash"),
    "owned env": (_bad(env={"VLLM_API_KEY": "k"}), "env.VLLM_API_KEY"),
    "loader env": (_bad(env={"LD_PRELOAD": "/x.so"}), "env.LD_PRELOAD"),
    "env not text": (_bad(env={"A": ["x"]}), "env.A"),
    "runtime unknown": (_bad(runtime="conda"), "runtime"),
    "image with a space": (_bad(docker_image="img v1"), "docker_image"),
    "docker without image": (_bad(docker_image=None), "docker_image"),
    "id with a newline": (_bad(id="a\nb"), "id"),
    "quality sha not hex": (_bad(quality_tool_sha256="xyz"), "quality_tool_sha256"),
    "log dir relative": (_bad(log_dir="logs"), "log_dir"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_a_bad_box_exits_2_naming_the_field(name, tmp_path, capsys):
    data, field = BAD[name]
    box = tmp_path / "box.yaml"
    box.write_text(yaml.safe_dump(data))
    facts = write_facts(snapshots.desktop()[1], tmp_path)
    out = tmp_path / "p.toml"
    assert main(["init", "--box", str(box), "--facts", str(facts), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert str(box) in err and f"{field}:" in err, err
    assert not out.exists()


def test_an_unquoted_env_value_is_refused_with_the_text_written(tmp_path, capsys):
    box = tmp_path / "box.yaml"
    box.write_text(yaml.safe_dump(GOOD) + "env:\n  NCCL_P2P_DISABLE: 1\n")
    assert main(["init", "--box", str(box), "--facts", str(write_facts(snapshots.desktop()[1], tmp_path)),
                 "--out", str(tmp_path / "p.toml")]) == 2
    assert "env.NCCL_P2P_DISABLE" in capsys.readouterr().err


def test_a_box_that_is_toml_or_text_is_refused_as_a_box(tmp_path, capsys):
    box = tmp_path / "box.yaml"
    box.write_text("just text\n")
    assert main(["init", "--box", str(box), "--facts", str(write_facts(snapshots.desktop()[1], tmp_path)),
                 "--out", str(tmp_path / "p.toml")]) == 2
    assert "expected a mapping" in capsys.readouterr().err


def test_unknown_keys_are_kept_and_reported(tmp_path):
    data = dict(GOOD, owner="lab-3", rack={"row": 2}, gpus=dict(GOOD["gpus"], nvlink=True))
    box = tmp_path / "box.yaml"
    box.write_text(yaml.safe_dump(data))
    facts = write_facts(snapshots.desktop()[1], tmp_path)
    result = init_profile(facts_path=facts, options=InitOptions(), recipe_ref=None, out=tmp_path / "p.toml",
                          force=False, box_path=box)
    assert result.proposal.box.unknown_keys == ["gpus.nvlink", "owner", "rack"]
    text = (tmp_path / "p.toml").read_text()
    for key in ("gpus.nvlink", "owner", "rack"):
        assert f"#   {key}: not a box key" in text


# ---------------------------------------------------------------- plan: the declaration against the host


def test_plan_says_where_this_host_is_not_the_declared_box(tmp_path):
    layout = laid_out(BOXES[[b.stem for b in BOXES].index("rtx-pro6000x4")], tmp_path)
    facts_path = write_facts(box_facts(layout), tmp_path)
    _, config = init_box(layout, facts_path, tmp_path, None)
    assert not [p for p in build_plan(config, box_facts(layout)).box.problems]
    _, desktop = snapshots.desktop()
    found = build_plan(config, desktop).box.problems
    assert [p.code for p in found] == [codes.BOX_FACTS_DIFFER] and found[0].severity == "warn"
    assert "it has 2 GPU(s), the box declares 4" in found[0].message


def test_a_profile_without_a_box_plans_no_box_section():
    config, facts = snapshots.desktop()
    plan = build_plan(config, facts)
    assert plan.box.box is None and plan.box not in plan.sections()


def test_the_box_declaration_is_kept_in_the_profile_and_checked(tmp_path):
    """Editing the profile's [box] to fewer GPUs than the recipe needs makes the plan refuse it."""
    layout = laid_out(BOXES[[b.stem for b in BOXES].index("rtx-pro6000x4")], tmp_path)
    facts_path = write_facts(box_facts(layout), tmp_path)
    _, config = init_box(layout, facts_path, tmp_path, "glm-5.2-nvfp4/pro6000x4-tp4-mtp")
    path = tmp_path / "hostctl.toml"
    text = path.read_text().replace("gpus = 4\n", "gpus = 2\n")
    path.write_text(text)
    assert tomllib.loads(text)["box"]["gpus"] == 2
    plan = build_plan(load_config(path), box_facts(layout))
    assert [p.code for p in plan.errors] == [codes.BOX_TOO_FEW_GPUS]


def test_extra_models_are_served_from_one_folder_at_slash_models(tmp_path):
    """The eagle3 recipe's draft model (requires.extra_models) is {model:NAME} in its serve_args:
    vLLM-MoET mounts each at /models/NAME; the profile mounts their one folder at /models."""
    layout = laid_out(BOXES[[b.stem for b in BOXES].index("runpod-4xpro6000-docker")], tmp_path)
    facts_path = write_facts(box_facts(layout), tmp_path)
    rid = "kimi-k2.7-code-nvfp4/pro6000x4-tp4-eagle3"
    assert moet_verdict(rid, layout) is None
    _, config = init_box(layout, facts_path, tmp_path, rid)
    assert config.profile.runtime.models_dir == str(tmp_path / "models")
    plan = build_plan(config, box_facts(layout))
    assert not plan.errors, [p.message for p in plan.errors]
    assert any('"model":"/models/Kimi-K2.7-Code-eagle3"' in a for a in plan.runtime.command)
    c = common()
    cmd = c._docker_serve_cmd(c.load_recipe(rid), c.load_box(str(layout)), 8000, [0], None, ())
    assert f"{tmp_path / 'models' / 'Kimi-K2.7-Code-eagle3'}:/models/Kimi-K2.7-Code-eagle3:ro" in cmd


# ---------------------------------------------------------------- a broken recipe beside the box


def _bench_with_a_broken_recipe(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A bench folder: one of vLLM-MoET's recipes, a copy of it with an unknown placeholder, a box."""
    bench = tmp_path / "bench"
    (bench / "recipes" / "deepseek-v4-flash-0731").mkdir(parents=True)
    (bench / "boxes").mkdir()
    good = bench / "recipes" / "deepseek-v4-flash-0731" / "pro6000x2-tp2.yaml"
    good.write_text(recipe_file("deepseek-v4-flash-0731/pro6000x2-tp2").read_text())
    broken = bench / "recipes" / "deepseek-v4-flash-0731" / "broken.yaml"
    broken.write_text(good.read_text().replace("id: deepseek-v4-flash-0731/pro6000x2-tp2",
                                               "id: deepseek-v4-flash-0731/broken")
                      .replace("serve_args:\n", "serve_args:\n  - --store {foo_bar}/x\n", 1))
    box = bench / "boxes" / "b1.yaml"
    box.write_text(yaml.safe_dump(GOOD))
    return box, good, broken


@pytest.mark.parametrize("recipe", [None, "path", "id"])
def test_a_broken_recipe_beside_the_box_is_left_out_with_a_warning_not_refusing_the_rest(recipe, tmp_path,
                                                                                         capsys):
    # vLLM-MoET's runner reads only the recipe it is given; `init --box` refused every box of a
    # bench with one recipe that does not load, even with --recipe naming another.
    box, good, broken = _bench_with_a_broken_recipe(tmp_path)
    facts = write_facts(snapshots.desktop()[1], tmp_path)
    out = tmp_path / "p.toml"
    ref = {None: [], "path": ["--recipe", str(good)], "id": ["--recipe", "deepseek-v4-flash-0731/pro6000x2-tp2"]}
    assert main(["init", "--box", str(box), "--facts", str(facts), "--out", str(out)] + ref[recipe]) == 0
    err = capsys.readouterr().err
    assert f"warning: recipe {broken} was left out: it does not load" in err and "{foo_bar}" in err, err
    assert out.exists()


@pytest.mark.parametrize("how", ["path", "id"])
def test_recipe_naming_the_broken_recipe_is_refused_with_its_own_error(how, tmp_path, capsys):
    box, _, broken = _bench_with_a_broken_recipe(tmp_path)
    facts = write_facts(snapshots.desktop()[1], tmp_path)
    out = tmp_path / "p.toml"
    ref = str(broken) if how == "path" else "deepseek-v4-flash-0731/broken"
    assert main(["init", "--box", str(box), "--facts", str(facts), "--out", str(out), "--recipe", ref]) == 2
    err = capsys.readouterr().err
    assert f"{broken} is not valid" in err and "unknown placeholder {foo_bar}" in err, err
    assert not out.exists()


def test_a_venv_boxs_cuda_visible_devices_is_not_passed_into_the_container(tmp_path):
    # vLLM-MoET's venv runtime sets CUDA_VISIBLE_DEVICES itself over the box's (common.build_env),
    # so the box's value means nothing there; passed into hostctl's container, where only the
    # planned GPUs exist (numbered from 0), "2,3" named no GPU and the boot failed at `up`.
    data = dict(GOOD, runtime="venv", venv="/opt/venv", env={"CUDA_VISIBLE_DEVICES": "2,3", "A_KNOB": "1"})
    data.pop("docker_image")
    box = tmp_path / "box.yaml"
    box.write_text(yaml.safe_dump(data))
    c = common()
    env = c.build_env({"env": {}, "model": "m", "requires": {}}, c.load_box(str(box)), [0, 1])
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"  # vLLM-MoET's own choice, not the box's "2,3"
    facts = write_facts(snapshots.desktop()[1], tmp_path)
    result, config = init_box(box, facts, tmp_path, None)
    assert "CUDA_VISIBLE_DEVICES" not in config.profile.runtime.env and config.profile.runtime.env["A_KNOB"] == "1"
    unused = {u.field: u.why for u in result.proposal.box.unused}
    assert "common.build_env" in unused["env.CUDA_VISIBLE_DEVICES"]
    assert "#   env.CUDA_VISIBLE_DEVICES = 2,3: vLLM-MoET's venv runtime replaces it" in \
        (tmp_path / "hostctl.toml").read_text()


@pytest.mark.parametrize("text", ["id: [\n", "id: a\nid: b\n"])
def test_a_box_that_is_not_yaml_names_the_file_where_it_breaks_and_what_to_do(text, tmp_path, capsys):
    # The error said `in "<unicode string>", line 2` and no fix line.
    box = tmp_path / "box.yaml"
    box.write_text(text)
    assert main(["init", "--box", str(box), "--facts", str(write_facts(snapshots.desktop()[1], tmp_path)),
                 "--out", str(tmp_path / "p.toml")]) == 2
    err = capsys.readouterr().err
    assert f"{box} is not valid YAML" in err and f'in {box}, line' in err and "<unicode string>" not in err, err
    assert "fix: correct the YAML at the line and column named above" in err, err


def test_a_box_named_with_dotdot_is_read_from_where_it_is(tmp_path, monkeypatch, capsys):
    # `--box ../bench/boxes/b1.yaml` exited 70: [box].file kept the `..`, which the profile refuses.
    box, good, _ = _bench_with_a_broken_recipe(tmp_path)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    facts = write_facts(snapshots.desktop()[1], tmp_path)
    out = tmp_path / "p.toml"
    assert main(["init", "--box", "../bench/boxes/b1.yaml", "--facts", str(facts), "--out", str(out),
                 "--recipe", str(good)]) == 0, capsys.readouterr().err
    assert load_config(out).profile.box.file == str(box)


def test_model_dir_named_with_dotdot_is_the_folder_it_names(tmp_path, monkeypatch, capsys):
    # `--model-dir ../models/x` exited 2 with "the profile hostctl init proposes is not valid:
    # runtime.model_dir: '/cwd/../models/x' contains '..'": init kept the `..` it was given.
    box, good, _ = _bench_with_a_broken_recipe(tmp_path)
    box.write_text(yaml.safe_dump(dict(GOOD, models={})))
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")
    out = tmp_path / "p.toml"
    assert main(["init", "--box", str(box), "--facts", str(write_facts(snapshots.desktop()[1], tmp_path)),
                 "--out", str(out), "--recipe", str(good), "--model-dir", "../models/x"]) == 0, capsys.readouterr().err
    assert load_config(out).profile.runtime.model_dir == str(tmp_path / "models" / "x")


def test_a_box_id_longer_than_a_profile_name_is_cut_to_one(tmp_path, capsys):
    # A box id may have 128 characters, a profile name 64: init --box exited 2 saying the profile
    # it proposes is not valid (`name`), a field the user never wrote.
    box, good, _ = _bench_with_a_broken_recipe(tmp_path)
    box.write_text(yaml.safe_dump(dict(GOOD, id="a" * 128)))
    out = tmp_path / "p.toml"
    assert main(["init", "--box", str(box), "--facts", str(write_facts(snapshots.desktop()[1], tmp_path)),
                 "--out", str(out), "--recipe", str(good)]) == 0, capsys.readouterr().err
    config = load_config(out)
    assert config.profile.name == "a" * 64 and config.profile.box.id == "a" * 128
    assert "its first 64 characters" in out.read_text()


@pytest.mark.parametrize("planes", ["/srv/models/ds4-0731", "/srv/models/ds4-0731/.planes", "/srv/models"])
def test_a_planes_cache_overlapping_the_checkpoint_is_not_used(planes, tmp_path):
    # The checkpoint is bound read-only and pinned, the planes cache read-write: a box whose planes
    # cache was the checkpoint's folder (or inside it, or above it) planned with no word, the
    # runtime free to write planes among the checkpoint's files.
    box, good, _ = _bench_with_a_broken_recipe(tmp_path)
    pc = box.parent.parent / "recipes" / "deepseek-v4-flash-0731" / "pc.yaml"
    pc.write_text(recipe_file("deepseek-v4-flash-0731/pro6000x1").read_text())
    (pc.parent / "broken.yaml").unlink()
    box.write_text(yaml.safe_dump(dict(GOOD, planes_cache={"DeepSeek-V4-Flash-0731": planes})))
    result, config = init_box(box, write_facts(snapshots.desktop()[1], tmp_path), tmp_path, str(pc))
    assert config.profile.storage.planes_cache != planes
    unused = {u.field: u.why for u in result.proposal.box.unused}
    assert "overlaps" not in unused["planes_cache.DeepSeek-V4-Flash-0731"]
    assert "inside the checkpoint's folder" in unused["planes_cache.DeepSeek-V4-Flash-0731"]
    assert any("overlaps the checkpoint" in w for w in result.proposal.warnings)


def test_a_secret_in_a_boxs_env_is_never_written_into_the_profile(tmp_path):
    """A profile is 0644 and installed in /etc/hostctl: a box's HF_TOKEN (by name) or a token-shaped
    value is listed as not used, masked, and appears nowhere in the profile or its --json."""
    token, shaped = "hf_" + "Q" * 34, "sk-" + "Zx9" * 12
    data = dict(GOOD, env={"HF_TOKEN": token, "WANDB_KEY": shaped, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"})
    box = tmp_path / "box.yaml"
    box.write_text(yaml.safe_dump(data))
    facts = write_facts(snapshots.desktop()[1], tmp_path)
    result = init_profile(facts_path=facts, options=InitOptions(), recipe_ref=None, out=tmp_path / "p.toml",
                          force=False, box_path=box)
    text = (tmp_path / "p.toml").read_text()
    doc = json.dumps(result.document())
    for secret in (token, shaped):
        assert secret not in text and secret not in doc
    config = load_config(tmp_path / "p.toml")
    assert config.profile.runtime.env == {"PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    unused = {u["field"]: u for u in result.document()["box"]["unused"]}
    assert {"env.HF_TOKEN", "env.WANDB_KEY"} <= set(unused) and "never written into a profile" in unused["env.HF_TOKEN"]["why"]
