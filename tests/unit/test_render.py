"""Rendered files: golden copies kept current, the desktop launcher reproduced, and every file
accepted by the real tools (`docker compose config`, `systemd-analyze verify`)."""

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

import snapshots
from conftest import needs_compose, needs_systemd_analyze
from hostctl import examples, paths
from hostctl.plan import build_plan
from hostctl.service.render import FILES, render_files, write_files

NAMES = examples.names()


@pytest.mark.parametrize("name", NAMES)
def test_golden_files_are_current(name):
    golden = paths.golden_dir() / name
    rendered = examples.rendered(name)
    assert sorted(p.name for p in golden.iterdir()) == sorted(FILES)
    for file, text in rendered.items():
        assert (golden / file).read_text() == text, (
            f"compose/{name}/{file} is stale: run `python3 -m hostctl.examples` and review the diff")


def desktop_compose():
    text = examples.rendered("pro6000x2-desktop")
    return yaml.safe_load(text["compose.yaml"])["services"]["runtime"], text["runtime.env"]


def env_of(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def test_desktop_reproduces_the_field_launcher():
    svc, env_text = desktop_compose()
    env = env_of(env_text)
    assert (svc["mem_limit"], svc["mem_reservation"], svc["memswap_limit"]) == ("34g", "30g", "200g")
    assert svc["network_mode"] == "host" and svc["ipc"] == "host"
    assert "shm_size" not in svc  # ignored by Docker under host IPC; doctor checks /dev/shm instead
    assert svc["ulimits"] == {"memlock": -1}
    assert svc["gpus"][0]["device_ids"] == [
        "GPU-5c1d9a62-7e0b-4f3a-9c2d-1b8e4a6f0c11", "GPU-8e2f4b73-1a9c-4d5e-8f60-2c7d9b1e3a22"]
    assert env["NCCL_P2P_DISABLE"] == "0" and env["NCCL_P2P_LEVEL"] == "PHB"
    assert env["VLLM_ENABLE_PCIE_ALLREDUCE"] == "0"
    assert env["VLLM_MOE_W2_DELTA_GB"] == "24"  # FP4 recovery pool per GPU
    assert env["VLLM_MOE_W2_PLANES_CACHE"] == "/planes" and env["VLLM_MOE_W2_STORE_DIR"] == "/packs"
    cmd = svc["command"]
    expected = {
        "--tensor-parallel-size": "2", "--max-model-len": "400000", "--max-num-seqs": "2",
        "--max-num-batched-tokens": "4096", "--kv-cache-dtype": "fp8_ds_mla", "--block-size": "256",
        "--gpu-memory-utilization": "0.92", "--served-model-name": "deepseek-v4-flash",
        "--host": "127.0.0.1",  # the one deliberate difference: the launcher listened on every interface
    }
    assert {k: flag(cmd, k) for k in expected} == expected
    assert "--disable-custom-all-reduce" in cmd
    assert '"num_speculative_tokens":7' in flag(cmd, "--speculative-config")
    assert '"method":"dspark"' in flag(cmd, "--speculative-config")
    # Rank 0's pack, sidecar and lock are read from ssd1 (the planes-cache drive), bound over the shared store on ssd2.
    binds = {v["target"]: v["source"] for v in svc["volumes"]}
    assert binds["/packs"] == "/mnt/hostctl/ssd2/moet-store"
    assert binds["/planes"] == "/mnt/hostctl/ssd1/moet-planes"
    rank0 = {t: s for t, s in binds.items() if ".rank0of2." in t}
    assert sorted(Path(t).suffix for t in rank0) == [".json", ".lock", ".pack"]
    assert all(s.startswith("/mnt/hostctl/ssd1/moet-store-rank0/") and t.startswith("/packs/") for t, s in rank0.items())
    assert not any(".rank1of2." in t for t in binds)
    assert all(v["bind"] == {"create_host_path": False} for v in svc["volumes"])
    assert svc["healthcheck"]["start_period"] == "2400s"


def test_units_wait_for_cache_mounts_and_order_after_docker():
    text = examples.rendered("pro6000x2-desktop")
    unit = text["hostctl-runtime.service"]
    assert "RequiresMountsFor=/mnt/hostctl/ssd1 /mnt/hostctl/ssd2" in unit
    assert "After=docker.service hostctl-power.service" in unit and "StartLimitBurst=3" in unit
    power = text["hostctl-power.service"]
    assert "ExecCondition=/bin/sh -c 'test -e /proc/driver/nvidia/version || modinfo nvidia" in power
    assert "provision --only gpu --boot" in power and "TimeoutStartSec=150" in power
    assert "Before=docker.service" in power and "After=nvidia-persistenced.service" in power


def test_cpu_demo_has_no_gpu_fields_and_private_ipc():
    svc = yaml.safe_load(examples.rendered("demo-cpu")["compose.yaml"])["services"]["runtime"]
    assert "gpus" not in svc and "ulimits" not in svc
    assert svc["ipc"] == "private" and svc["shm_size"] == "1g"


def test_mapped_host_renders_cpuset_guards_and_sys_nice():
    text = examples.rendered("pro6000x1-mapped")
    svc = yaml.safe_load(text["compose.yaml"])["services"]["runtime"]
    env = env_of(text["runtime.env"])
    assert svc["cpuset"] == "0-23,48-71" and svc["cap_add"] == ["SYS_NICE"]
    assert env["VLLM_MOE_W2_MAPPED_PCI"] == "0000:31:00.0" and env["VLLM_MOE_W2_MAPPED_NUMA_NODE"] == "0"
    assert env["HOSTCTL_NUMA_NODE"] == "0"


def test_exposed_api_passes_the_key_through_and_never_writes_it(tmp_path, monkeypatch):
    config, facts = snapshots.desktop()
    runtime = config.profile.runtime.model_copy(update={"api_host": "0.0.0.0", "api_key_env": "HOSTCTL_API_KEY"})
    config = config.model_copy(update={"profile": config.profile.model_copy(update={"runtime": runtime})})
    monkeypatch.setenv("HOSTCTL_API_KEY", "sk-very-secret-value")
    files = render_files(build_plan(config, facts))
    assert not any("sk-very-secret-value" in t for t in files.values())
    svc = yaml.safe_load(files["compose.yaml"])["services"]["runtime"]
    assert svc["environment"]["VLLM_API_KEY"].startswith("${HOSTCTL_API_KEY:?")
    assert "http://127.0.0.1:8000/health" in svc["healthcheck"]["test"][-1]


def test_dollar_signs_are_escaped_for_compose():
    config, facts = snapshots.desktop()
    runtime = config.profile.runtime.model_copy(update={"model_dir": "/srv/models/$weird"})
    config = config.model_copy(update={"profile": config.profile.model_copy(update={"runtime": runtime})})
    svc = yaml.safe_load(render_files(build_plan(config, facts))["compose.yaml"])["services"]["runtime"]
    assert svc["volumes"][0]["source"] == "/srv/models/$$weird"


def test_write_files_replaces_atomically(tmp_path):
    (tmp_path / "compose.yaml").write_text("old")
    written = write_files({"compose.yaml": "new\n"}, tmp_path)
    assert written == [tmp_path / "compose.yaml"] and (tmp_path / "compose.yaml").read_text() == "new\n"
    assert [p.name for p in tmp_path.iterdir()] == ["compose.yaml"]


@needs_compose
@pytest.mark.parametrize("name", NAMES)
def test_docker_compose_accepts_every_rendered_project(name, tmp_path):
    write_files(examples.rendered(name), tmp_path)
    res = subprocess.run(["docker", "compose", "--project-directory", str(tmp_path), "-f", str(tmp_path / "compose.yaml"),
                          "config", "--format", "json"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    import json

    svc = json.loads(res.stdout)["services"]["runtime"]
    assert svc["network_mode"] == "host"
    env = env_of(examples.rendered(name)["runtime.env"])
    assert svc["environment"] == env  # compose reads the env file exactly as written


@needs_systemd_analyze
@pytest.mark.parametrize("name", NAMES)
def test_systemd_accepts_every_rendered_unit(name, tmp_path):
    hostctl = shutil.which("hostctl") or shutil.which("python3")
    config, facts = examples.load(name)
    write_files(render_files(build_plan(config, facts), hostctl_bin=hostctl), tmp_path)
    units = sorted(str(p) for p in tmp_path.glob("*.service")) + sorted(str(p) for p in tmp_path.glob("*.timer"))
    res = subprocess.run(["systemd-analyze", "verify", "--man=no", *units], capture_output=True, text=True)
    assert res.returncode == 0 and res.stderr.strip() == "", res.stderr
