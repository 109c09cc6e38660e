"""tune counts its sweep before building it (F6 of the adversarial review): the axes' cross
product of a few KB of YAML was built whole (8 axes of 40 values: MemoryError). Past the limits
the recipe is refused, exit 2 naming the field, quickly and without building anything; every
vLLM-MoET and bundled recipe still plans."""

from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

import moet_runner
from hostctl.config import parse_recipe
from hostctl.errors import InputError
from hostctl.tune import plan as tplan
from hostctl.tune import runner as trunner

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "runtime" / "recipes" / "demo-cpu-tiny-moe.yaml"
RECIPE_DIRS = [moet_runner.bench_copy("recipes"), ROOT / "tests" / "unit" / "data" / "vllm-moet" / "recipes",
               ROOT / "runtime" / "recipes"]


def env_axes(n: int, values: int, restart: bool = True) -> list[dict]:
    tag = "R" if restart else "K"
    return [{"kind": "env", "name": f"VLLM_{tag}{i}", "values": [str(v) for v in range(values)],
             **({} if restart else {"restart": False, "file_env": f"VLLM_{tag}{i}_FILE"})} for i in range(n)]


def _memory_limit() -> None:
    """Before the fix this run grows until the OOM killer: keep it to 2 GiB (a MemoryError, exit 70)."""
    resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30))


def test_a_cross_product_bomb_is_refused_at_once_naming_tuning_axes(tmp_path):
    data = yaml.safe_load(DEMO.read_text())
    data["tuning"]["axes"] = env_axes(8, 30)  # 30**8 = 6.6e11 boots, from ~3 KB of YAML
    recipe = tmp_path / "tune-bomb.yaml"
    recipe.write_text(yaml.safe_dump(data))
    assert recipe.stat().st_size < 8192
    started = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "hostctl", "--config", str(ROOT / "runtime" / "hosts" / "demo-cpu.toml"),
                        "tune", "--recipe", str(recipe), "--dry-run"], capture_output=True, text=True, timeout=60,
                       preexec_fn=_memory_limit)
    assert p.returncode == 2, p.stderr[-2000:]
    assert "tuning.axes" in p.stderr and time.monotonic() - started < 30


@pytest.mark.parametrize("axes, field", [
    (env_axes(7, 2), "tuning.axes"),  # 128 boots
    (env_axes(1, 8) + env_axes(4, 8, restart=False), "tuning.axes"),  # 8 boots, 32,768 trials
    (env_axes(1, 33, restart=False), "tuning.axes[0].values"),  # more than 32 values
])
def test_a_sweep_past_the_limits_names_the_field(axes, field):
    with pytest.raises(InputError) as e:
        tplan.parse_tuning({"objective": "decode.median_tok_s", "axes": axes})
    assert e.value.exit_code == 2 and e.value.message.startswith(field + ":"), e.value.message


def test_a_sweep_at_the_limits_plans():
    tuning = tplan.parse_tuning({"objective": "decode.median_tok_s",
                                 "axes": env_axes(6, 2) + env_axes(1, 16, restart=False)})
    tp = tplan.plan_trials(yaml.safe_load(DEMO.read_text()), tuning)
    assert (len(tp.boots), len(tp.trials)) == (64, 1024)


def test_every_vllm_moet_and_bundled_recipe_still_plans():
    seen = 0
    for d in RECIPE_DIRS:
        for f in sorted(d.rglob("*.yaml")):
            data = yaml.safe_load(f.read_text())
            recipe = parse_recipe(data, str(f))
            if recipe.tuning:
                tp = trunner.plan_for(data, recipe)
                assert tp.trials, f
                seen += 1
    assert seen >= 10
