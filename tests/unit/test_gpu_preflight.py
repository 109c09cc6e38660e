"""`up`'s GPU preflight decision on recorded outputs: the device query's real output on the H200
(run outside a container), and the container toolkit's failure texts (tests/unit/data/device-query/
README.md says where each comes from). The containerised path itself is unexercised here."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from hostctl.provision.system import reload_deferred
from hostctl.service import gpu_preflight, preflight
from hostctl.service.gpu_preflight import decide

DATA = Path(__file__).resolve().parent / "data" / "device-query"
H200 = "GPU-b25478a7-7240-ab25-8b40-9f13564a94a3"  # the GPU the recorded query saw


def recorded(name: str) -> str:
    return (DATA / name).read_text()


def test_the_h200s_own_gpu_passes():
    v = decide([H200], 0, recorded("h200-device-query.json"), "")
    assert v.ok and v.code == "ok" and v.seen == [H200]


def test_a_gpu_the_plan_did_not_ask_for_is_wrong_devices():
    v = decide(["GPU-00000000-aaaa-bbbb-cccc-000000000000"], 0, recorded("h200-device-query.json"), "")
    assert not v.ok and v.code == "wrong-devices" and "missing GPU-00000000" in v.message and H200 in v.message


def test_two_planned_one_seen():
    v = decide([H200, "GPU-11111111-2222-3333-4444-555555555555"], 0, recorded("h200-device-query.json"), "")
    assert v.code == "wrong-devices" and "sees 1 GPU(s), not the 2 planned" in v.message


@pytest.mark.parametrize("name", ["h200-device-query-cuda-hidden.json", "h200-device-query-wrong-uuid.json"])
def test_cuda_seeing_nothing_while_nvml_sees_the_gpu(name):
    # Real: CUDA_VISIBLE_DEVICES hides the device from CUDA (CUDA_ERROR_NO_DEVICE, 100), NVML still sees it.
    v = decide([H200], 0, recorded(name), "")
    assert not v.ok and v.code == "cuda-failed" and "CUDA_VISIBLE_DEVICES" in v.message + v.fix


def test_lost_device_cgroup_is_named_with_the_fix():
    v = decide([H200], 0, recorded("nvml-unknown-error.json"), "")
    assert v.code == "devices-not-accessible" and "create-dev-char-symlinks" in v.fix and "#48" in v.fix


@pytest.mark.parametrize("name, code, fix", [
    ("engine-no-device-driver.txt", "no-gpu-device-driver", "nvidia-ctk runtime configure"),
    ("engine-unknown-device.txt", "unknown-device", "nvidia-smi -L"),
    ("engine-no-host-driver.txt", "host-driver-missing", "install the NVIDIA driver"),
    ("engine-cdi-unresolvable.txt", "cdi-unresolvable", "nvidia-ctk cdi generate"),
])
def test_toolkit_failures_before_the_container_runs(name, code, fix):
    v = decide([H200], 125, "", recorded(name))
    assert not v.ok and v.code == code and fix in v.fix and v.evidence


def test_near_misses_do_not_take_a_known_code():
    # a generic engine failure is not mistaken for a toolkit one
    v = decide([H200], 125, "", "docker: Error response from daemon: No such image: hostctl/vllm-moet-sm120:x.")
    assert v.code == "query-failed" and "No such image" in " ".join(v.evidence)
    # the word "gpu" in an unrelated error
    v = decide([H200], 1, "", "error: the gpu drivers documentation could not be printed")
    assert v.code == "query-failed"
    # a JSON line that is not the query's document
    v = decide([H200], 0, '{"nvml": {"ok": true}}\n', "")
    assert v.code == "query-failed"
    assert decide([H200], None, "", "", timed_out=True).code == "query-timeout"


def test_the_query_script_runs_here_and_reports_no_driver():
    # This machine has no NVIDIA driver: the script still prints its document, with the reason.
    res = subprocess.run([sys.executable, str(gpu_preflight.QUERY_SCRIPT)], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0
    doc = json.loads(res.stdout)
    assert doc["schema"] == "hostctl.device-query/v1" and doc["nvml"]["ok"] is False
    v = decide([H200], 0, res.stdout, res.stderr)
    assert v.code == "no-driver-in-container"


def test_the_argv_asks_for_the_planned_devices_in_the_recipe_image():
    argv = gpu_preflight.query_argv("hostctl/vllm-moet-sm120:0a927ea", [H200, "GPU-x"], script="print(1)")
    assert argv[:3] == ["docker", "run", "--rm"] and f'"device={H200},GPU-x"' in argv
    assert argv[argv.index("--entrypoint") + 1] == "python3" and argv[-2:] == ["-c", "print(1)"]
    assert "--network" in argv and argv[argv.index("--network") + 1] == "none"


def test_preflight_runs_the_query_only_with_gpus_and_fails_with_the_fix():
    from hostctl import examples
    from hostctl.plan import build_plan

    config, facts = examples.load("pro6000x2-desktop")
    plan = build_plan(config, facts)
    calls = []

    def fake(image, uuids):
        calls.append((image, uuids))
        return decide(uuids, 125, "", recorded("engine-no-device-driver.txt"))

    (f,) = preflight.check_gpus_in_image(plan, run_query=fake)
    assert calls == [(plan.runtime.image, plan.runtime.gpu_uuids)] and len(plan.runtime.gpu_uuids) == 2
    assert f.id == "gpu-no-gpu-device-driver" and "nvidia-ctk" in f.fix
    cpu_config, cpu_facts = examples.load("demo-cpu")
    assert preflight.check_gpus_in_image(build_plan(cpu_config, cpu_facts), run_query=fake) == []
    assert len(calls) == 1


def test_no_daemon_reload_while_the_gpu_runtime_runs():
    from hostctl import examples
    from hostctl.facts.records import ContainerFacts
    from hostctl.plan import build_plan

    config, facts = examples.load("pro6000x2-desktop")
    plan = build_plan(config, facts)
    assert reload_deferred(plan, facts) is None  # nothing running
    running = ContainerFacts(id="abc", name="hostctl-runtime", state="running",
                             labels={"io.hostctl.profile": "pro6000x2-desktop"})
    up = facts.model_copy(update={"engine": facts.engine.model_copy(update={"containers": [running]})})
    why = reload_deferred(plan, up)
    assert why and "hostctl-runtime is up" in why and "#48" in why and "systemd" in why
    stopped = running.model_copy(update={"state": "exited"})
    assert reload_deferred(plan, facts.model_copy(update={"engine": facts.engine.model_copy(
        update={"containers": [stopped]})})) is None
    cpu_config, cpu_facts = examples.load("demo-cpu")
    assert reload_deferred(build_plan(cpu_config, cpu_facts), up) is None  # a CPU runtime has no GPUs to lose
