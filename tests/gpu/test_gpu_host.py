"""GPU host settings on a real GPU (the GPU test machine), READ-ONLY: the power range as NVML
reports it against the planned limit (nothing is ever set: the adapter used here refuses to),
the P2P ladder on this machine's GPUs (one GPU: not applicable), PCIe link and driver health,
and the pinned host<->device copy bandwidth against the link's capability."""

from __future__ import annotations

import io
import shutil

import pytest

from hostctl import examples, runner
from hostctl.config import Config
from hostctl.errors import InputError
from hostctl.facts.gpu import NvmlAdapter, probe_gpus
from hostctl.gpu.health import measure_copy_bandwidth
from hostctl.gpu.p2p import run_ladder
from hostctl.plan import build_plan
from hostctl.provision import parts

pytestmark = pytest.mark.gpu


class ReadOnlyNvml(NvmlAdapter):
    """The real adapter with its one write disabled: this machine's settings are never changed."""

    def set_power_limit_mw(self, h, milliwatts):
        raise AssertionError("a test tried to set a power limit on the GPU test machine")


@pytest.fixture(scope="module")
def host():
    if shutil.which("nvidia-smi") is None:
        pytest.skip("no nvidia-smi: no NVIDIA driver on this machine")
    gpus = probe_gpus(ReadOnlyNvml())
    if not gpus.available:
        pytest.skip(f"no GPU readable here: {gpus.reason}")
    config, facts = examples.load("pro6000x1-resident")
    facts = facts.model_copy(update={"gpus": gpus})
    facts.state.p2p = None
    return config, facts


def with_power(config: Config, watts: float) -> Config:
    gpu = config.profile.gpu.model_copy(update={"power_limit_w": watts, "power_limits_w": {}})
    return config.model_copy(update={"profile": config.profile.model_copy(update={"gpu": gpu})})


def test_power_range_matches_nvidia_smi_and_the_plan_shows_it(host, capsys):
    config, facts = host
    res = runner.run(["nvidia-smi", "--query-gpu=index,power.min_limit,power.max_limit,power.limit",
                      "--format=csv,noheader,nounits"], timeout=30)
    assert res.ok, res.why()
    rows = [[float(v) for v in line.split(",")[1:]] for line in res.stdout.strip().splitlines()]
    for gpu, (lo, hi, limit) in zip(facts.gpus.devices, rows):
        assert (gpu.power.min_w, gpu.power.max_w) == (pytest.approx(lo, abs=0.5), pytest.approx(hi, abs=0.5))
        assert gpu.power.limit_w == pytest.approx(limit, abs=0.5)
    plan = build_plan(with_power(config, 300), facts)
    with capsys.disabled():
        for s in plan.power.gpus:
            print(f"\n  GPU {s.index}: planned {s.desired_w:g} W, now {s.current_w:g} W, range {s.min_w:g}-{s.max_w:g} W"
                  f" -> {s.action}")
    assert all(s.action in ("set", "keep") for s in plan.power.gpus)
    if "H200" in facts.gpus.devices[0].name:
        assert (facts.gpus.devices[0].power.min_w, facts.gpus.devices[0].power.max_w) == (200.0, 700.0)


def test_dry_run_validates_against_the_real_range_and_sets_nothing(host, tmp_path, monkeypatch):
    monkeypatch.setenv("HOSTCTL_SYSROOT", str(tmp_path))
    config, facts = host
    hi = facts.gpus.devices[0].power.max_w
    too_high = with_power(config, hi + 100)
    def dry(cfg):
        return parts.provision(cfg, only="gpu", dry_run=True, facts=lambda c: facts, out=io.StringIO(),
                               err=io.StringIO(), gpu_options={"adapter": ReadOnlyNvml(), "hostctl_bin": "/bin/true"})

    with pytest.raises(InputError) as exc:
        dry(too_high).raise_for_error()
    assert f"-{hi:g} W" in exc.value.render() and exc.value.exit_code == 2
    report = dry(with_power(config, 300))
    report.raise_for_error()
    assert not any(tmp_path.iterdir())
    assert all(r.status in ("would-change", "ok", "skipped") for r in report.actions), report.document()


def test_p2p_ladder_with_the_gpus_here(host, tmp_path):
    _, facts = host
    ladder = run_ladder(facts, facts.gpus.devices, state_dir=tmp_path)
    if len(facts.gpus.devices) < 2:
        assert ladder.verdict.verdict == "not_applicable"
        assert ladder.rung("functional").status == "skip" and "not applicable" in ladder.rung("functional").summary
    else:
        assert ladder.verdict is not None and ladder.verdict.verdict in ("ok", "hang", "wrong_data", "failed")


def _doctor(facts, check_id: str, level: str = "quick"):
    from hostctl.doctor.checks import all_checks
    from hostctl.doctor.registry import CheckContext, run_checks

    ctx = CheckContext(facts=facts, level=level, facts_source="live")
    return run_checks(ctx, [c for c in all_checks() if c.id == check_id])[0].result


def test_link_and_driver_health(host):
    _, facts = host
    assert _doctor(facts, "gpu.driver").status == "pass"
    module = _doctor(facts, "gpu.kernel_module")
    assert module.status in ("pass", "warn"), module.summary  # an H200 (Hopper) runs either module
    assert _doctor(facts, "gpu.persistence").status in ("pass", "warn")
    link = _doctor(facts, "gpu.pcie.link")
    assert link.status == "pass", link.summary  # the test machine's links run at full width


def test_pinned_copy_bandwidth_against_the_link(host, capsys):
    _, facts = host
    gpu = facts.gpus.devices[0]
    bw = measure_copy_bandwidth(gpu, mib=256, iters=10)
    assert bw.error is None, bw.error
    assert bw.h2d_gbps > 0 and bw.d2h_gbps > 0
    r = _doctor(facts.model_copy(update={"gpus": facts.gpus.model_copy(update={"devices": [gpu]})}),
                "gpu.pcie.bandwidth", level="full")
    with capsys.disabled():
        print(f"\n  {r.status}: {r.summary}\n  {r.evidence.observed if r.evidence else ''}")
    # the H200 measured 88% of its link (benchmarks/results/gpu_link-h200.txt): a healthy link passes
    assert r.status == "pass", r.summary


def test_the_nccl_child_runs_on_one_gpu(host):
    """The CUDA/NCCL path of the all-reduce child (CI exercises only gloo on the CPU): one rank,
    real NCCL, sums checked. With one GPU there is no peer, so no verdict comes of it."""
    from hostctl.gpu.harness import find_torch_python, run_allreduce

    _, facts = host
    tp = find_torch_python()
    if tp.python is None:
        pytest.skip(tp.why)
    run = run_allreduce(1, label="single", python=tp.python, env={"CUDA_VISIBLE_DEVICES": facts.gpus.devices[0].uuid},
                        timeout_s=120, backend="nccl", device="cuda", size_bytes=16 * 2**20, iters=5)
    assert run.outcome == "ok", run.detail
    assert run.ranks[0]["mismatches"] == 0 and run.ranks[0].get("nccl") and run.leftover == []
