"""`hostctl metrics` and `status --watch` on recorded readings (hostctl/metrics/): which series a
reading gives and which it leaves out, the exposition promtool accepts, the textfile written
atomically and never through a link, --listen's address, the GPU readings on the fake NVML, the
runtime's /metrics and its rates, and the watch's frame. The live runtime is
tests/system/test_observe_live.py's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from fake_nvml import FakeNvml, pro6000x2_phb
from hostctl.errors import InputError
from hostctl.facts.gpu_telemetry import GpuReading, GpuTelemetry, GpuWatch, read_telemetry, reason_names
from hostctl.facts.records import P2PVerdict, PathFacts, ProvisionedPart, StateFacts, SupervisedEnding
from hostctl.metrics import exposition, watch
from hostctl.metrics.reading import HostReading, RolePath
from hostctl.service import runtime_metrics
from hostctl.service.runtime_metrics import RuntimeSample
from need import need, needs

ROOT = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 12, 6, 12, 0, tzinfo=timezone.utc)
GPU = GpuReading(index=0, uuid="GPU-a", name="NVIDIA H100", power_draw_w=312.5, power_limit_w=450.0,
                 power_enforced_w=450.0,
                 temperature_c=61, utilization_percent=87, memory_used_bytes=71 * 1024**3,
                 memory_total_bytes=80 * 1024**3, clocks_event_reasons=["SW power cap"])


def iso(delta_s: float) -> str:
    return (NOW - timedelta(seconds=delta_s)).isoformat(timespec="milliseconds")


def ending(ago_s: float, ready: bool = True) -> SupervisedEnding:
    """A hang ended `ago_s` seconds ago, restarted a second later, ready again 20 s later (ready)."""
    return SupervisedEnding(ended_at=iso(ago_s), kind="hung", cause="engine-frozen", restart_at=iso(ago_s - 1),
                            ready_again_at=iso(ago_s - 20) if ready else None)


def reading(**changes) -> HostReading:
    base = dict(
        read_at=NOW.timestamp(),
        gpus=GpuTelemetry(gpus=[GPU, GPU.model_copy(update={"index": 1, "uuid": "GPU-b", "temperature_c": None})]),
        planned_limits_w={0: 450.0},
        state=StateFacts(p2p=P2PVerdict(verdict="ok", measured_at=iso(90000)),
                         provisioned={"storage": ProvisionedPart(converged_at=iso(5000), profile="p"),
                                      "gpu": ProvisionedPart(converged_at=iso(5000), profile="p")},
                         supervised=[ending(7200), ending(1200), ending(600)]),
        roles=[RolePath(role="expert_store", room=PathFacts(path="/mnt/nvme0/moet-store", exists=True,
                                                            free_bytes=10 * 1024**3, total_bytes=1000 * 1024**3)),
               # an unmounted drive's folder: the probe reads the room of the nearest folder that
               # exists, the root disk's
               RolePath(role="planes_cache", room=PathFacts(path="/mnt/gone/moet-planes", exists=False,
                                                            free_bytes=5 * 1024**3, total_bytes=50 * 1024**3))],
        runtime={"state": "running", "healthy": True,
                 "qualify": {"passed": False, "this_service": True},
                 "last_smoke": {"at": iso(300), "ok": True}},
        sample=RuntimeSample(kv_cache_usage=0.42, running=3, waiting=1, prompt_tokens=1000),
    )
    base.update(changes)
    return HostReading(**base)


def series(r: HostReading) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {(name, tuple(sorted(labels.items()))): value for name, labels, value in exposition.samples(r)}


def one(r: HostReading, name: str, **labels: str) -> float | None:
    return series(r).get((name, tuple(sorted(labels.items()))))


def names(r: HostReading) -> set[str]:
    return {name for name, _ in series(r)}


# ---------------------------------------------------------------- what a reading exports


def test_a_serving_host_exports_its_gpus_verdicts_state_and_runtime():
    r = reading()
    assert one(r, "hostctl_gpu_power_limit_watts", gpu="0", uuid="GPU-a") == 450.0
    assert one(r, "hostctl_gpu_power_limit_planned_watts", gpu="0", uuid="GPU-a") == 450.0
    assert one(r, "hostctl_gpu_power_limit_enforced_watts", gpu="0", uuid="GPU-a") == 450.0
    assert one(r, "hostctl_gpu_power_draw_watts", gpu="0", uuid="GPU-a") == 312.5
    assert one(r, "hostctl_gpu_utilization_ratio", gpu="0", uuid="GPU-a") == 0.87
    assert one(r, "hostctl_p2p_ok") == 1.0 and one(r, "hostctl_qualify_passed") == 0.0
    assert one(r, "hostctl_qualify_current") == 1.0
    assert one(r, "hostctl_provisioned", part="gpu") == 1.0 and one(r, "hostctl_provisioned", part="storage") == 1.0
    assert one(r, "hostctl_runtime_up") == 1.0 and one(r, "hostctl_runtime_healthy") == 1.0
    assert one(r, "hostctl_runtime_kv_cache_usage_ratio") == 0.42 and one(r, "hostctl_runtime_requests_waiting") == 1
    # two restarts in the last hour (20 and 10 minutes ago); the one two hours ago is not counted
    assert one(r, "hostctl_runtime_restarts_last_hour") == 2.0
    assert one(r, "hostctl_runtime_last_restart_timestamp_seconds") == (NOW - timedelta(seconds=600)).timestamp()
    assert one(r, "hostctl_cache_free_bytes", role="expert_store", path="/mnt/nvme0/moet-store") == 10 * 1024**3
    assert one(r, "hostctl_last_smoke_passed") == 1.0
    assert one(r, "hostctl_metrics_generated_timestamp_seconds") == NOW.timestamp()


def test_a_start_still_loading_is_said_so_and_a_long_silence_is_not():
    loading = reading(runtime={"state": "running", "health": False, "healthy": False, "uptime_s": 300},
                      load_timeout_s=2400)
    assert one(loading, "hostctl_runtime_loading") == 1.0 and one(loading, "hostctl_runtime_healthy") == 0.0
    stuck = reading(runtime={"state": "running", "health": False, "healthy": False, "uptime_s": 2401},
                    load_timeout_s=2400)
    assert one(stuck, "hostctl_runtime_loading") == 0.0  # past the bound: the hang alert may fire
    frozen = reading(runtime={"state": "running", "health": True, "healthy": False, "uptime_s": 60},
                     load_timeout_s=2400)
    assert one(frozen, "hostctl_runtime_loading") == 0.0  # /health answers: loaded, and its engine does not work


@pytest.mark.parametrize("state,expected", [("ready", 1.0), ("failed", 1.0), ("interrupted", 0.0), ("down", 0.0),
                                            (None, 0.0)])
def test_the_runtime_is_expected_until_down_even_after_it_failed(state, expected):
    from hostctl.facts.records import ServiceRecord

    st = StateFacts(service=None if state is None else ServiceRecord(state=state))
    # failed: the supervisor's ending, or a restart's gate; systemd may have stopped restarting it
    assert one(reading(state=st), "hostctl_runtime_expected") == expected


def test_what_is_not_known_is_left_out_never_zero():
    r = reading()
    # GPU 1: no planned limit, no temperature NVML could read
    assert one(r, "hostctl_gpu_power_limit_planned_watts", gpu="1", uuid="GPU-b") is None
    assert one(r, "hostctl_gpu_temperature_celsius", gpu="1", uuid="GPU-b") is None
    assert one(r, "hostctl_gpu_temperature_celsius", gpu="0", uuid="GPU-a") == 61
    # a role whose folder's filesystem could not be read
    assert not any(n.startswith("hostctl_cache") and dict(lb).get("role") == "planes_cache" for n, lb in series(r))
    down = reading(runtime={"state": "down", "healthy": None}, sample=None, state=StateFacts(),
                   gpus=GpuTelemetry(available=False, reason="no driver"))
    assert one(down, "hostctl_runtime_up") == 0.0
    for absent in ("hostctl_runtime_healthy", "hostctl_runtime_kv_cache_usage_ratio", "hostctl_p2p_ok",
                   "hostctl_qualify_passed", "hostctl_gpu_power_limit_watts", "hostctl_last_smoke_passed",
                   "hostctl_runtime_last_restart_timestamp_seconds"):
        assert absent not in names(down), absent
    assert one(down, "hostctl_runtime_restarts_last_hour") == 0.0
    unknown = reading(runtime={"state": "unknown", "healthy": None}, sample=None)
    assert "hostctl_runtime_up" not in names(unknown)  # the engine could not be asked: not "down"
    no_profile = reading(runtime=None, sample=None, roles=[], planned_limits_w={})
    assert not {n for n in names(no_profile) if n.startswith(("hostctl_runtime_up", "hostctl_cache", "hostctl_qualify"))}


def test_every_series_is_declared_with_help_and_follows_the_naming_conventions():
    declared = set(exposition.METRICS)
    assert names(reading()) <= declared
    units = ("_watts", "_bytes", "_celsius", "_seconds", "_ratio")
    for name, (help_text, labels) in exposition.METRICS.items():
        assert name.startswith("hostctl_") and help_text.endswith(".") and len(help_text) > 20, name
        assert not name.endswith("_total"), f"{name}: hostctl exports gauges only"
        assert "key" not in name and "token" not in " ".join(labels), name  # never a secret
    for name in ("hostctl_gpu_power_draw_watts", "hostctl_cache_free_bytes", "hostctl_gpu_temperature_celsius",
                 "hostctl_runtime_kv_cache_usage_ratio", "hostctl_last_smoke_timestamp_seconds"):
        assert name.endswith(units)


def promtool() -> str:
    path = shutil.which("promtool")
    need(path, "promtool is not installed (Debian's prometheus package; test.sh installs it)")
    return path


def test_promtool_accepts_the_exposition():
    data = exposition.exposition(reading)
    done = subprocess.run([promtool(), "check", "metrics"], input=data, capture_output=True)
    assert done.returncode == 0, (done.stdout + done.stderr).decode()
    text = data.decode()
    assert "# HELP hostctl_gpu_power_limit_watts " in text and "# TYPE hostctl_gpu_power_limit_watts gauge" in text
    assert 'hostctl_cache_free_bytes{path="/mnt/nvme0/moet-store",role="expert_store"}' in text


def test_a_second_scrape_waits_for_the_reading_in_progress():
    import threading

    inside, most = [0], [0]
    lock = threading.Lock()

    def slow() -> HostReading:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        threading.Event().wait(0.05)
        with lock:
            inside[0] -= 1
        return reading()

    collector = exposition.ReadingCollector(slow)
    threads = [threading.Thread(target=lambda: list(collector.collect())) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1  # one canary at a time, whatever scrapes at once


# ---------------------------------------------------------------- the textfile


def test_the_textfile_is_replaced_whole_and_readable_by_node_exporter(tmp_path):
    exposition.write_textfile(tmp_path, b"hostctl_a 1\n")
    path = exposition.write_textfile(tmp_path, b"hostctl_a 2\n")
    assert path == tmp_path / "hostctl.prom" and path.read_bytes() == b"hostctl_a 2\n"
    assert path.stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["hostctl.prom"]  # no temporary left behind


def test_a_link_in_place_of_the_textfile_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    folder = tmp_path / "textfile"
    folder.mkdir()
    (folder / "hostctl.prom").symlink_to(victim)
    exposition.write_textfile(folder, b"hostctl_a 1\n")
    assert victim.read_text() == "keep\n"
    assert not (folder / "hostctl.prom").is_symlink() and (folder / "hostctl.prom").read_bytes() == b"hostctl_a 1\n"


@needs(os.geteuid() == 0, "the rule is root's: as a user, a folder one can write is one's own")
def test_as_root_a_folder_another_user_can_write_is_refused(tmp_path):
    from hostctl.errors import HostctlError

    folder = tmp_path / "theirs"
    folder.mkdir()
    os.chown(folder, 65534, 65534)
    with pytest.raises(HostctlError) as err:
        exposition.write_textfile(folder, b"hostctl_a 1\n")
    assert "theirs" in str(err.value) and not (folder / "hostctl.prom").exists()


@needs(os.geteuid() == 0, "needs root to give folders to another user")
def test_debians_layout_is_written_and_a_swapped_in_folder_or_link_is_refused(tmp_path):
    """prometheus-node-exporter's postinst gives /var/lib/prometheus to the prometheus user; its
    node-exporter folder stays root's."""
    from hostctl.errors import UntrustedPathError

    theirs = tmp_path / "var-lib-prometheus"
    textfile = theirs / "node-exporter"
    textfile.mkdir(parents=True)
    os.chown(theirs, 65534, 65534)
    exposition.write_textfile(textfile, b"hostctl_a 1\n")
    assert (textfile / "hostctl.prom").read_bytes() == b"hostctl_a 1\n"
    # the owner of the parent swaps in a folder of their own, then a link to root's /etc-like folder
    (theirs / "node-exporter").rename(theirs / "old")
    (theirs / "node-exporter").mkdir()
    os.chown(theirs / "node-exporter", 65534, 65534)
    with pytest.raises(UntrustedPathError):
        exposition.write_textfile(textfile, b"hostctl_a 2\n")
    (theirs / "node-exporter").rmdir()
    victim = tmp_path / "etc"
    victim.mkdir()
    (theirs / "node-exporter").symlink_to(victim)
    with pytest.raises(UntrustedPathError) as err:
        exposition.write_textfile(textfile, b"hostctl_a 3\n")
    assert "symlink" in err.value.message and list(victim.iterdir()) == []


def test_a_missing_folder_is_named_not_made(tmp_path):
    with pytest.raises(InputError) as err:
        exposition.write_textfile(tmp_path / "nope", b"")
    assert "--textfile-dir" in err.value.message and "nope" in err.value.message
    assert not (tmp_path / "nope").exists()


@pytest.mark.parametrize("text,expected", [("127.0.0.1:9835", ("127.0.0.1", 9835)), ("[::1]:9835", ("::1", 9835)),
                                           ("0.0.0.0:80", ("0.0.0.0", 80))])
def test_listen_takes_an_address_literal_and_a_port(text, expected):
    assert exposition.parse_listen(text) == expected


@pytest.mark.parametrize("text", ["localhost:9835", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:65536", ":9835",
                                  "127.0.0.1:98a", "evil.example:1"])
def test_listen_refuses_names_and_bad_ports(text):
    with pytest.raises(InputError) as err:
        exposition.parse_listen(text)
    assert "--listen" in err.value.message


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hostctl", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, timeout=60)


def test_the_command_prints_writes_or_refuses_two_destinations(tmp_path):
    # the demo profile with its compile cache in a folder that exists: a role's size is read only
    # from its own folder, and a fresh machine has no /var/lib/hostctl/compile-cache yet
    (tmp_path / "compile-cache").mkdir()
    profile = tmp_path / "demo.toml"
    profile.write_text((ROOT / "runtime/hosts/demo-cpu.toml").read_text().replace(
        'compile_cache = "/var/lib/hostctl/compile-cache"', f'compile_cache = "{tmp_path / "compile-cache"}"'))
    done = run_cli("metrics", "--print", "--config", str(profile))
    assert done.returncode == 0, done.stderr
    assert "hostctl_runtime_expected" in done.stdout, done.stdout
    assert f'hostctl_cache_size_bytes{{path="{tmp_path / "compile-cache"}",role="compile_cache"}}' in done.stdout, \
        done.stdout
    done = run_cli("metrics", "--textfile-dir", str(tmp_path))
    assert done.returncode == 0 and (tmp_path / "hostctl.prom").read_text().startswith("# HELP"), done.stderr
    done = run_cli("metrics", "--print", "--listen", "127.0.0.1:9835")
    assert done.returncode == 2 and "--print and --listen cannot be combined" in done.stderr
    done = run_cli("metrics", "--alert-rules")
    assert done.returncode == 0 and "HostctlRuntimeHang" in done.stdout


def test_listen_serves_a_fresh_reading_at_each_scrape_until_sigterm(tmp_path):
    import signal
    import socket
    import time

    import httpx

    with socket.socket() as s:  # a free loopback port
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = subprocess.Popen([sys.executable, "-m", "hostctl", "metrics", "--listen", f"127.0.0.1:{port}"], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        stamps = []
        deadline = time.monotonic() + 30
        while len(stamps) < 2 and time.monotonic() < deadline:
            try:
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=5).text
            except httpx.TransportError:
                time.sleep(0.2)
                continue
            stamps += [line.split()[1] for line in text.splitlines()
                       if line.startswith("hostctl_metrics_generated_timestamp_seconds ")]
            time.sleep(0.1)
        assert len(stamps) == 2 and stamps[0] != stamps[1], stamps
    finally:
        p.send_signal(signal.SIGTERM)  # systemd's stop
        _, err = p.communicate(timeout=30)
    assert p.returncode == 0 and f"serving metrics on http://127.0.0.1:{port}/metrics" in err, err


def test_listen_on_a_taken_port_says_so():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        done = run_cli("metrics", "--listen", f"127.0.0.1:{s.getsockname()[1]}")
    assert done.returncode == 1 and "cannot listen there" in done.stderr and "internal error" not in done.stderr


# ---------------------------------------------------------------- GPU readings (fake NVML)


def test_gpu_readings_on_the_fake_nvml():
    host = pro6000x2_phb()
    host.gpus[1].temperature_c = None  # NotSupported, as in some VMs
    host.gpus[1].clocks_event_reasons = 0x4 | 0x40
    host.gpus[1].enforced_cap_mw = 250_000  # a board or thermal limiter below the set limit
    t = read_telemetry(FakeNvml(host))
    assert t.available and [g.index for g in t.gpus] == [0, 1]
    a, b = t.gpus
    assert (a.power_draw_w, a.power_limit_w, a.power_enforced_w, a.temperature_c) == (90.0, 300.0, 300.0, 41)
    assert (b.power_limit_w, b.power_enforced_w) == (300.0, 250.0)
    assert a.clocks_event_reasons == ["idle"]
    assert b.temperature_c is None and b.clocks_event_reasons == ["SW power cap", "HW thermal slowdown"]


def test_one_nvml_session_serves_many_readings_and_no_driver_is_a_reason():
    nv = FakeNvml(pro6000x2_phb())
    with GpuWatch(nv) as w:
        w.read()
        w.read()
    assert nv.init_calls == 1
    host = pro6000x2_phb()
    host.driver_loaded = False
    t = read_telemetry(FakeNvml(host))
    assert not t.available and "driver not loaded" in t.reason


def test_clocks_event_reason_names():
    assert reason_names(0) == [] and reason_names(0x1) == ["idle"]
    assert reason_names(0x8 | 0x400) == ["HW slowdown", "0x400"]


# ---------------------------------------------------------------- the runtime's /metrics

VLLM = """\
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="demo"} 0.25
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="demo"} 2.0
# TYPE vllm:prompt_tokens_total counter
vllm:prompt_tokens_total{engine="0",model_name="demo"} 1000.0
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="demo"} 200.0
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="demo"} 800.0
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="demo"} 200.0
"""


def test_the_runtime_sample_and_its_rates():
    a = runtime_metrics.parse(VLLM)
    assert a is not None and (a.kv_cache_usage, a.running, a.waiting) == (0.25, 2.0, None)
    assert a.spec_draft_tokens is None  # no speculative decoding: absent, not 0
    b = runtime_metrics.parse(VLLM.replace("} 1000.0", "} 1500.0").replace("} 200.0\n# TYPE vllm:prefix", "} 250.0\n"
                                  "# TYPE vllm:prefix").replace("} 800.0", "} 1200.0").replace("hits_total{engine=\"0\","
                                  "model_name=\"demo\"} 200.0", "hits_total{engine=\"0\",model_name=\"demo\"} 500.0"))
    r = runtime_metrics.rates(a, b, 2.0)
    assert (r.prompt_tokens_per_s, r.generation_tokens_per_s) == (250.0, 25.0)
    assert r.prefix_cache_hit_rate == 0.75 and r.spec_acceptance_rate is None
    # a restarted server's counters start again: no rate across the restart
    assert runtime_metrics.rates(b, a, 2.0).prompt_tokens_per_s is None
    assert runtime_metrics.parse("# TYPE up gauge\nup 1\n") is None
    two = runtime_metrics.parse(VLLM + 'vllm:kv_cache_usage_perc{engine="1",model_name="demo"} 0.75\n')
    assert two.kv_cache_usage == 0.75 and two.running == 2.0  # the fullest engine's share, not a sum past 1


# ---------------------------------------------------------------- the watch's frame


def a_frame(**changes) -> watch.WatchFrame:
    base = dict(at="12:00:00", container="hostctl-runtime", endpoint="http://127.0.0.1:8000", interval_s=1.0,
                state="running", state_detail="up 5 min 3 s", health=True, engine="working (counters moved 0 s ago)",
                sample=RuntimeSample(kv_cache_usage=0.421, running=3, waiting=1, spec_draft_tokens=10),
                rates=runtime_metrics.RuntimeRates(prompt_tokens_per_s=1204.0, generation_tokens_per_s=88.5,
                                                   prefix_cache_hit_rate=0.63, spec_acceptance_rate=0.712),
                gpus=GpuTelemetry(gpus=[GPU]), restarts="restarted 1 time in the last hour: engine-frozen at x",
                last_smoke="passed at 2026-12-06T11:55:00")
    base.update(changes)
    return watch.WatchFrame(**base)


def test_the_frame_shows_the_gpus_the_runtime_and_the_history():
    text = watch.frame_text(a_frame())
    for part in ("hostctl-runtime", "runtime: running (up 5 min 3 s)  health: ok  engine: working",
                 "requests: 3 running, 1 waiting   KV cache: 42.1 %", "prompt 1,204.0, generation 88.5",
                 "prefix-cache hits: 63.0 %", "spec-decode acceptance: 71.2 %", "312 / 450 W", "61 C", "87 %",
                 "71.0 / 80.0 GiB", "SW power cap", "restarted 1 time", "last smoke: passed",
                 "one view (not a terminal)"):
        assert part in text, f"{part!r} not in\n{text}"


def test_the_frame_of_a_runtime_that_is_down_on_a_host_without_gpus():
    text = watch.frame_text(a_frame(state="down", state_detail="", health=None, engine="", sample=None, rates=None,
                                    gpus=GpuTelemetry(available=False, reason="NVIDIA driver not loaded")))
    assert "runtime: down" in text and "health" not in text and "requests:" not in text
    assert "GPUs: none readable (NVIDIA driver not loaded)" in text
    no_spec = watch.frame_text(a_frame(sample=RuntimeSample(running=0, waiting=0)))
    assert "spec-decode" not in no_spec  # a recipe without speculative decoding


def test_the_watch_judges_a_busy_engine_on_its_counters_only():
    from hostctl.service.identity import RuntimeIdentity
    from hostctl.service.liveness import EngineCounters

    rt = RuntimeIdentity(project="p", container="p-runtime", endpoint="http://127.0.0.1:1", api_key_env=None,
                         served_name="m", hang_timeout_s=16, image="i", project_dir=Path("/x"))
    w = watch.FrameReader(rt, GpuWatch(FakeNvml(pro6000x2_phb())), 1.0)
    t0 = w.progress.last_progress
    assert w._judge(t0, None) == "not judged (no counters in /metrics)"
    assert w._judge(t0 + 1, EngineCounters(running=0, waiting=0, work=5)) == "idle"
    assert w._judge(t0 + 2, EngineCounters(running=2, waiting=0, work=9)).startswith("working")
    assert w._judge(t0 + 10, EngineCounters(running=2, waiting=0, work=9)).startswith("working")
    assert w._judge(t0 + 19, EngineCounters(running=2, waiting=0, work=9)) == \
        "NOT WORKING: requests in flight and the counters still for 17 s"
    assert w._judge(t0 + 60, EngineCounters(running=0, waiting=0, work=9)) == "idle"  # idle: a canary's job, not the watch's
    # work arriving after a long idle spell is not a stall of that spell's length
    assert w._judge(t0 + 300, EngineCounters(running=0, waiting=0, work=9)) == "idle"
    assert w._judge(t0 + 301, EngineCounters(running=0, waiting=1, work=9)).startswith("working")
    assert w._judge(t0 + 318, EngineCounters(running=1, waiting=0, work=9)).startswith("NOT WORKING")
    # frames whose /metrics was not read judge nothing, however long they span; the next reading does
    assert w._judge(t0 + 320, EngineCounters(running=1, waiting=0, work=20)).startswith("working")
    assert w._judge(t0 + 350, None) == "not judged (no counters in /metrics)"
    assert w._judge(t0 + 351, EngineCounters(running=1, waiting=0, work=30)).startswith("working")
