"""`provision --only gpu` on the reference hosts through the FAKE NVML adapter (setting power
cannot happen on a machine without those GPUs): validate against each GPU's own range, set,
read back the enforced limit; the boot unit; boot mode waiting for the driver."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import needs_systemd_analyze
from hostctl import examples
from hostctl.cli import main
from hostctl.config import Config
from hostctl.errors import FailedError, InputError
from hostctl.facts.gpu import probe_gpus
from hostctl.facts.gpu_fake import FakeHost, FakeNvml, pro6000x2_phb, two_socket, write_sysfs
from hostctl.facts.model import GpuFacts, HostFacts
from hostctl.gpu.harness import TorchPython
from hostctl.plan import build_plan
from hostctl.provision.gpu import UNIT_NAME, provision_gpu, wait_for_driver

LSPCI = (Path(__file__).parent / "data" / "lspci-pro6000x2-acs-redirect.txt").read_text()
NO_TORCH = TorchPython(None, "no torch in the unit tier")


@pytest.fixture(autouse=True)
def sysroot(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "sysroot"
    root.mkdir()
    monkeypatch.setenv("HOSTCTL_SYSROOT", str(root))
    return root


def with_power(config: Config, watts: float | None, per_gpu: dict[str, float] | None = None) -> Config:
    gpu = config.profile.gpu.model_copy(update={"power_limit_w": watts, "power_limits_w": per_gpu or {}})
    return config.model_copy(update={"profile": config.profile.model_copy(update={"gpu": gpu})})


def fake_facts(tmp_path: Path, host: FakeHost, base: str = "pro6000x2-desktop") -> tuple[Config, HostFacts]:
    config, facts = examples.load(base)
    gpus = probe_gpus(FakeNvml(host), pci_root=write_sysfs(host, tmp_path / "pci"), version_file=tmp_path / "absent")
    return config, facts.model_copy(update={"gpus": gpus})


def provision(config, facts, fake, **kw):
    kw.setdefault("dry_run", False)
    opts = {"torch_python": NO_TORCH, "lspci": (LSPCI, ""), "pci_root": Path("/nonexistent")}
    return provision_gpu(config, facts, build_plan(config, facts), yes=False, adapter=fake, hostctl_bin="/usr/bin/true",
                         p2p_options=opts, **kw)


def statuses(result, prefix):
    return [(s.step, s.status) for s in result.steps if s.step.startswith(prefix)]


def test_sets_each_gpu_and_reads_back_the_enforced_limit(tmp_path):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    fake = FakeNvml(pro6000x2_phb())
    result = provision(with_power(config, 250), facts, fake)
    uuids = [g.uuid for g in facts.gpus.devices]
    assert fake.sets == [(uuids[0], 250_000), (uuids[1], 250_000)]
    assert statuses(result, "gpu/power/") == [("gpu/power/0", "changed"), ("gpu/power/1", "changed")]
    step = next(s for s in result.steps if s.step == "gpu/power/0")
    assert "300 W -> 250 W (150-600 W)" in step.detail and "enforced 250 W" in step.detail
    assert step.evidence == ["read back: limit 250 W, enforced 250 W"]
    result.raise_for_failure()  # nothing failed


def test_per_gpu_override_and_keep(tmp_path):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    fake = FakeNvml(pro6000x2_phb())
    result = provision(with_power(config, 300, {"1": 450}), facts, fake)
    assert fake.sets == [(facts.gpus.devices[1].uuid, 450_000)]
    assert statuses(result, "gpu/power/") == [("gpu/power/0", "ok"), ("gpu/power/1", "changed")]


def test_out_of_range_is_bad_input_showing_the_range_and_nothing_is_set(tmp_path, sysroot):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    fake = FakeNvml(pro6000x2_phb())
    with pytest.raises(InputError) as exc:
        provision(with_power(config, 700), facts, fake)
    assert exc.value.exit_code == 2
    text = exc.value.render()
    assert "nothing was changed" in text and "700 W requested, this GPU accepts 150-600 W" in text
    assert fake.sets == [] and not any(sysroot.rglob("*"))  # not even the unit was written
    with pytest.raises(InputError):
        provision(with_power(config, 100), facts, fake, dry_run=True)  # dry run validates too
    assert fake.sets == []


def test_live_range_is_checked_before_anything_is_set(tmp_path):
    """The facts said 150-600 W, but GPU 1 accepts only up to 450 W now: neither GPU is touched."""
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    live = pro6000x2_phb()
    live.gpus[1].max_mw = 450_000
    fake = FakeNvml(live)
    with pytest.raises(InputError) as exc:
        provision(with_power(config, 500), facts, fake)
    assert "accepts 150-450 W" in exc.value.render() and fake.sets == []


def test_readback_mismatch_fails(tmp_path):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    host = pro6000x2_phb()
    host.gpus[1].enforced_cap_mw = 200_000  # another limiter holds GPU 1 lower
    fake = FakeNvml(host)
    result = provision(with_power(config, 250), facts, fake)
    assert statuses(result, "gpu/power/") == [("gpu/power/0", "changed"), ("gpu/power/1", "fail")]
    assert "the driver enforces 200 W" in result.failures[0].detail
    with pytest.raises(FailedError) as exc:
        result.raise_for_failure()
    assert exc.value.exit_code == 1


def test_setting_without_root_says_so(tmp_path):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    host = pro6000x2_phb()
    host.root = False
    result = provision(with_power(config, 250), facts, FakeNvml(host))
    assert [s.status for s in result.failures] == ["fail", "fail"]
    assert "needs root" in result.failures[0].detail


def test_dry_run_changes_nothing_and_says_what_it_would_do(tmp_path, sysroot):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    facts.state.p2p = None  # no verdict yet: the functional check would run
    fake = FakeNvml(pro6000x2_phb())
    result = provision(with_power(config, 250), facts, fake, dry_run=True)
    assert fake.sets == [] and fake.init_calls == 0
    assert not any(sysroot.rglob("*"))
    lines = "\n".join(result.lines())
    assert f"nvidia-smi -i {facts.gpus.devices[0].uuid} -pl 250" in lines
    assert "would    gpu/power-unit: write /etc/systemd/system/hostctl-power.service" in lines
    assert "would    gpu/p2p/functional: would run an all-reduce on GPUs 0, 1 with NCCL_P2P_DISABLE=0 NCCL_P2P_LEVEL=PHB" in lines


def test_a_stored_verdict_for_this_driver_and_cmdline_is_reused(tmp_path):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    assert facts.state.p2p.verdict == "ok" and facts.state.p2p.driver_version == facts.gpus.driver_version
    result = provision(config, facts, FakeNvml(pro6000x2_phb()))
    (step,) = [s for s in result.steps if s.step == "gpu/p2p/functional"]
    assert step.status == "ok" and "stored verdict ok" in step.detail and "not measured again" in step.detail
    assert result.ladder.stored_at is None


def test_unit_is_installed_and_enabled_idempotently(tmp_path, sysroot):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    first = provision(config, facts, FakeNvml(pro6000x2_phb()))
    unit = sysroot / "etc/systemd/system" / UNIT_NAME
    link = sysroot / "etc/systemd/system/multi-user.target.wants" / UNIT_NAME
    assert unit.is_file() and os.readlink(link) == f"/etc/systemd/system/{UNIT_NAME}"
    text = unit.read_text()
    assert "ExecStart=/usr/bin/true --config " in text and "provision --only gpu --boot" in text
    assert [s.status for s in first.steps if s.step == "gpu/power-unit"][0] == "changed"
    again = provision(config, facts, FakeNvml(pro6000x2_phb()))
    assert [s.status for s in again.steps if s.step == "gpu/power-unit" and s.status != "warn"] == ["ok", "ok"]


@needs_systemd_analyze
def test_installed_unit_passes_systemd_analyze_verify(tmp_path, sysroot):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    result = provision_gpu(config, facts, build_plan(config, facts), dry_run=False, yes=False,
                           adapter=FakeNvml(pro6000x2_phb()), hostctl_bin=shutil.which("python3"),
                           p2p_options={"torch_python": NO_TORCH, "lspci": (LSPCI, "")})
    assert not result.failures
    unit = sysroot / "etc/systemd/system" / UNIT_NAME
    res = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True)
    assert res.returncode == 0 and res.stderr.strip() == "", res.stderr


def test_host_without_driver_installs_the_unit_and_skips_the_rest(tmp_path, sysroot):
    config, facts = examples.load("pro6000x2-desktop")
    facts = facts.model_copy(update={"gpus": GpuFacts(available=False, reason="NVIDIA driver not loaded")})
    fake = FakeNvml(pro6000x2_phb())
    result = provision(config, facts, fake)
    assert (sysroot / "etc/systemd/system" / UNIT_NAME).is_file()
    (skip,) = [s for s in result.steps if s.step == "gpu"]
    assert skip.status == "skip" and skip.detail.startswith("no driver")
    assert fake.init_calls == 0 and result.ladder is None and not result.failures


def test_no_limits_configured_needs_no_unit(tmp_path, sysroot):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    result = provision(with_power(config, None), facts, FakeNvml(pro6000x2_phb()))
    assert not (sysroot / "etc").exists()
    assert ("gpu/power-unit", "skip") in statuses(result, "gpu/power")


def test_boot_mode_waits_for_the_driver_then_sets_only_the_limits(tmp_path, sysroot):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    no_driver = facts.model_copy(update={"gpus": GpuFacts(available=False, reason="not yet")})
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  595.71.05\n")
    fake = FakeNvml(pro6000x2_phb(), driver_after=2)  # NVML answers on the third try
    config = with_power(config, 280)
    result = provision_gpu(config, no_driver, build_plan(config, no_driver), dry_run=False, yes=False, boot=True,
                           adapter=fake, version_file=version, driver_wait_s=30)
    assert [u for u, _ in fake.sets] == [g.uuid for g in facts.gpus.devices] and {w for _, w in fake.sets} == {280_000}
    assert [s.step for s in result.steps] == ["gpu/driver", "gpu/power/0", "gpu/power/1"]
    assert result.ladder is None and not (sysroot / "etc").exists() and not (sysroot / "var").exists()


def test_boot_mode_gives_up_after_the_bound():
    clock = iter(range(0, 1000, 10))
    ready, waited, why = wait_for_driver(FakeNvml(pro6000x2_phb()), timeout_s=60, version_file=Path("/nonexistent"),
                                         sleep=lambda s: None, clock=lambda: float(next(clock)))
    assert not ready and waited >= 60 and "does not exist yet" in why


def test_two_socket_host_limits_both_gpus(tmp_path):
    config, facts = fake_facts(tmp_path, two_socket(), base="pro6000x1-mapped")
    assert [g.numa_node for g in facts.gpus.devices] == [0, 1]
    fake = FakeNvml(two_socket())
    result = provision(with_power(config, 400), facts, fake)
    assert [w for _, w in fake.sets] == [400_000, 400_000]
    # one GPU serves the mapped recipe: P2P is not applicable and says so
    assert result.ladder.verdict.verdict == "not_applicable"


def test_cli_boot_needs_only_gpu(capsys):
    assert main(["provision", "--boot"]) == 2
    assert "--boot goes with --only gpu" in capsys.readouterr().err
