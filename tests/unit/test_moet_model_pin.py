"""The model pin of every recipe of the vLLM-MoET copy: what vLLM-MoET binds a result to and checks a
checkpoint against (`bench/runner/integrity.py: result_bindings`, `bench/runner/common.py:
model_snapshot_error`: models.yaml's hf_repo and revision for the recipe's model and each extra
model) against what hostctl resolves (hostctl/model/resolve.py: load_ref, load_extras) with the
copy's models.yaml as the profile's runtime.models_file. Same files, same pins: no difference is kept.
"""

from __future__ import annotations

import pytest

import moet_runner
from hostctl.config import Config, load_recipe, parse_profile
from hostctl.model.resolve import load_extras, load_ref

MODELS = "/srv/models"


@pytest.fixture(scope="module")
def runner():
    return moet_runner.runner()


def hostctl_pins(rid: str) -> dict[str, dict[str, str | None]]:
    recipe_file = moet_runner.bench_copy("recipes") / f"{rid}.yaml"
    recipe = load_recipe(recipe_file)
    profile = parse_profile({"name": "pin", "recipe": str(recipe_file), "runtime": {
        "model_dir": f"{MODELS}/{recipe.model}", "models_dir": MODELS,
        "models_file": str(moet_runner.bench_copy("models.yaml"))}}, "pin profile")
    config = Config(profile=profile, recipe=recipe, source=str(recipe_file))
    refs = [load_ref(config), *load_extras(config)]
    for ref in refs:
        assert ref.pin_problem is None, (ref.model, ref.pin_problem)
    return {ref.model: {"repo": ref.repo, "revision": ref.revision} for ref in refs}


def test_the_copy_has_its_recipes():
    assert len(moet_runner.recipe_ids()) == 26


@pytest.mark.parametrize("rid", moet_runner.recipe_ids())
def test_hostctl_pins_what_vllm_moet_binds(runner, rid):
    common, integrity = runner["common"], runner["integrity"]
    recipe = common.load_recipe(rid)
    theirs = integrity.result_bindings(recipe, "quick", [], common.load_model_registry())["models"]
    assert hostctl_pins(rid) == theirs
    # the revision model_snapshot_error compares a checkpoint's marker with, character for character
    registry = common.load_model_registry()
    assert all(theirs[name]["revision"] == registry[name]["revision"] for name in theirs)
