"""A recipe's `env` is no open door into the runtime (F7 of the adversarial review): names hostctl
owns or that change what runs, where the server listens or who may call it are refused (exit 2
naming `env.<KEY>`, hostctl.serveflags.OWNED_ENV), also as a tuning axis; `plan` lists every
recipe variable it passes, by name. By effect: `render` writes no runtime.env holding them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import moet_runner
from hostctl import serveflags
from hostctl.cli import main
from hostctl.config import parse_recipe
from hostctl.errors import InputError
from hostctl.tune import plan as tplan

ROOT = Path(__file__).resolve().parents[2]
DEMO_RECIPE = ROOT / "runtime" / "recipes" / "demo-cpu-tiny-moe.yaml"
FACTS = ROOT / "runtime" / "hosts" / "demo-cpu.facts.json"
VALUE = "Q7planted-envvalue-3c1d"
REFUSED = ["VLLM_API_KEY", "VLLM_SERVER_DEV_MODE", "VLLM_ALLOW_RUNTIME_LORA_UPDATING", "VLLM_PLUGINS",
           "VLLM_ALLOW_INSECURE_SERIALIZATION", "VLLM_LOGGING_CONFIG_PATH", "VLLM_DEBUG_LOG_API_SERVER_RESPONSE",
           "VLLM_PORT", "VLLM_LOOPBACK_IP", "VLLM_DP_MASTER_IP", "VLLM_DP_MASTER_PORT", "VLLM_NIXL_SIDE_CHANNEL_HOST",
           "VLLM_NIXL_SIDE_CHANNEL_PORT", "VLLM_EC_SIDE_CHANNEL_HOST", "VLLM_EC_SIDE_CHANNEL_PORT",
           "VLLM_P2P_SIDE_CHANNEL_HOST", "VLLM_P2P_SIDE_CHANNEL_PORT", "VLLM_MOONCAKE_BOOTSTRAP_PORT", "PATH",
           "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "LD_PRELOAD", "LD_LIBRARY_PATH", "LD_AUDIT", "PYTHONPATH",
           "PYTHONSTARTUP", "PYTHONHOME"]


def test_the_table_holds_every_refused_name_with_a_reason():
    for name in REFUSED:
        assert serveflags.env_refusal(name, "1"), name


def project(tmp_path: Path, env: dict[str, str]) -> Path:
    """The demo profile with the demo recipe plus `env`; the profile's path."""
    recipe = yaml.safe_load(DEMO_RECIPE.read_text())
    recipe["env"].update(env)
    (tmp_path / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    text = (ROOT / "runtime" / "hosts" / "demo-cpu.toml").read_text()
    lines = [f'recipe = "{tmp_path / "recipe.yaml"}"' if ln.startswith("recipe = ") else ln for ln in text.splitlines()]
    profile = tmp_path / "hostctl.toml"
    profile.write_text("\n".join(lines) + "\n")
    return profile


def run(argv, capsys):
    code = main(argv)
    got = capsys.readouterr()
    return code, got.out, got.err


@pytest.mark.parametrize("name", REFUSED)
def test_render_refuses_an_owned_env_name_and_writes_nothing(tmp_path, capsys, name):
    profile = project(tmp_path, {name: VALUE})
    out = tmp_path / "out"
    code, stdout, err = run(["--config", str(profile), "--facts", str(FACTS), "render", "--out", str(out)], capsys)
    assert code == 2 and f"env.{name}" in err, err
    assert not out.exists()
    assert VALUE not in stdout + err


@pytest.mark.parametrize("value", ["0.0.0.0", "10.0.0.5", "::", "host.example"])
def test_vllm_host_ip_off_loopback_is_refused(value):
    data = yaml.safe_load(DEMO_RECIPE.read_text())
    data["env"]["VLLM_HOST_IP"] = value
    with pytest.raises(InputError) as e:
        parse_recipe(data, "r.yaml")
    assert e.value.exit_code == 2 and "env.VLLM_HOST_IP" in str(e.value.message) + " ".join(e.value.details or [])


def test_every_vllm_moet_and_bundled_recipe_still_loads():
    files = [*moet_runner.bench_copy("recipes").rglob("*.yaml"), *(ROOT / "runtime" / "recipes").glob("*.yaml")]
    assert len(files) > 20
    for f in files:
        parse_recipe(yaml.safe_load(f.read_text()), str(f))  # the demo's VLLM_HOST_IP: 127.0.0.1 among them


def test_plan_lists_every_recipe_env_name_without_its_value(tmp_path, capsys):
    profile = project(tmp_path, {"VLLM_MY_KNOB": VALUE, "WANDB_KEY": VALUE})
    base = ["--config", str(profile), "--facts", str(FACTS), "plan"]
    code, text, _ = run(base, capsys)
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("recipe env:"))
    for name in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_OMP_THREADS_BIND", "VLLM_HOST_IP", "VLLM_MY_KNOB", "WANDB_KEY"):
        assert name in line, line
    assert VALUE not in line
    code, js, _ = run(base + ["--json"], capsys)
    found = [d["value"] for d in json.loads(js)["runtime"]["decisions"] if d["key"] == "recipe env"]
    assert len(found) == 1 and "VLLM_MY_KNOB" in found[0] and "WANDB_KEY" in found[0] and VALUE not in found[0]


@pytest.mark.parametrize("axis, field", [
    ({"kind": "env", "name": "VLLM_SERVER_DEV_MODE", "values": ["0", "1"]}, "tuning.axes[0].name"),
    ({"kind": "env", "name": "LD_PRELOAD", "values": ["/model/a.so"]}, "tuning.axes[0].name"),
    ({"kind": "env", "name": "VLLM_HOST_IP", "values": ["127.0.0.1", "0.0.0.0"]}, "tuning.axes[0].name"),
    ({"kind": "env", "name": "VLLM_MOE_W2_GATE_TAU", "values": ["0.5"], "restart": False, "file_env": "PYTHONSTARTUP"},
     "tuning.axes[0].file_env"),
])
def test_a_tuning_axis_cannot_set_an_owned_env_name(axis, field):
    with pytest.raises(InputError) as e:
        tplan.parse_tuning({"objective": "decode.median_tok_s", "axes": [axis]})
    assert e.value.exit_code == 2 and e.value.message.startswith(field + ":"), e.value.message
