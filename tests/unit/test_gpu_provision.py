"""`provision --only gpu` on the reference hosts through the FAKE NVML adapter (setting power
cannot happen on a machine without those GPUs), run by the one executor: validate against each
GPU's own range, set, read back the enforced limit (a fresh decide on re-probed GPUs proves it);
the boot unit; boot mode waiting for the driver; the P2P verdict."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import needs_systemd_analyze
from hostctl import examples
from hostctl.cli import main
from hostctl.config import Config
from hostctl.errors import FailedError, InputError, RefusedError
from hostctl.facts.gpu import probe_gpus
from fake_nvml import FakeHost, FakeNvml, pro6000x2_phb, two_socket, write_sysfs
from hostctl.facts.records import GpuFacts, HostFacts
from hostctl.gpu.harness import TorchPython
from hostctl.gpu.p2p import store_verdict
from hostctl.provision import parts
from hostctl.act.actions import Settled
from hostctl.act.report import Report
from hostctl.provision.gpu import UNIT_NAME, wait_for_driver

LSPCI = (Path(__file__).parent / "data" / "lspci-pro6000x2-acs-redirect.txt").read_text()
NO_TORCH = TorchPython(python=None, why="no torch in the unit tier")
LOCK = "var/lib/hostctl/provision.lock"


@pytest.fixture(autouse=True)
def sysroot(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "sysroot"
    root.mkdir()
    monkeypatch.setenv("HOSTCTL_SYSROOT", str(root))
    return root


def files_in(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file() or p.is_symlink())


def with_power(config: Config, watts: float | None, per_gpu: dict[str, float] | None = None) -> Config:
    gpu = config.profile.gpu.model_copy(update={"power_limit_w": watts, "power_limits_w": per_gpu or {}})
    return config.model_copy(update={"profile": config.profile.model_copy(update={"gpu": gpu})})


def fake_facts(tmp_path: Path, host: FakeHost, base: str = "pro6000x2-desktop") -> tuple[Config, HostFacts]:
    config, facts = examples.load(base)
    gpus = probe_gpus(FakeNvml(host), pci_root=write_sysfs(host, tmp_path / "pci"), version_file=tmp_path / "absent")
    return config, facts.model_copy(update={"gpus": gpus})


@dataclass
class Result:
    report: Report
    text: str

    def raise_for_failure(self) -> None:
        self.report.raise_for_error()

    @property
    def failed(self):
        return [r for r in self.report.actions if r.status == "failed"]

    @property
    def final(self):
        return self.report.part("gpu").final


def provision(config, facts, fake, *, dry_run=False, tmp_path=None, torch=NO_TORCH, **kw) -> Result:
    """The gpu part alone through the executor; the GPUs are re-probed through the same fake
    after each round, as NVML is on a real host."""
    opts = {"torch_python": torch, "lspci": (LSPCI, ""), "pci_root": Path("/nonexistent")}
    pci = write_sysfs(fake.host, tmp_path / "pci") if tmp_path is not None else None
    out = io.StringIO()
    gpu_options = {"adapter": fake, "hostctl_bin": "/usr/bin/true", "p2p_options": opts,
                   "gpus": lambda: probe_gpus(fake, **({"pci_root": pci} if pci else {})), **kw}
    report = parts.provision(config, only="gpu", dry_run=dry_run, facts=lambda c: facts, out=out, err=io.StringIO(),
                             gpu_options=gpu_options)
    return Result(report, out.getvalue())


def statuses(result, prefix):
    return sorted((r.id, r.status) for r in result.report.actions if r.id.startswith(prefix))


def test_sets_each_gpu_and_reads_back_the_enforced_limit(tmp_path):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    fake = FakeNvml(pro6000x2_phb())
    result = provision(with_power(config, 250), facts, fake, tmp_path=tmp_path)
    uuids = [g.uuid for g in facts.gpus.devices]
    assert fake.sets == [(uuids[0], 250_000), (uuids[1], 250_000)]
    assert statuses(result, "gpu/power/") == [("gpu/power/0", "changed"), ("gpu/power/1", "changed")]
    step = next(r for r in result.report.actions if r.id == "gpu/power/0")
    assert "300 W -> 250 W (150-600 W)" in step.describe and "read back the enforced limit" in step.describe
    assert step.argv is None and "nvidia-smi -i" in step.describe and step.seconds is not None
    # the re-probed GPUs decide nothing more: the limit holds and the driver enforces it
    assert Settled(id="gpu/power/0", what="250 W already set (150-600 W); the driver enforces 250 W") in result.final.items
    result.raise_for_failure()  # nothing failed
    assert result.report.part("gpu").status == "converged" and result.report.part("gpu").rounds == 2


def test_per_gpu_override_and_keep(tmp_path):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    fake = FakeNvml(pro6000x2_phb())
    result = provision(with_power(config, 300, {"1": 450}), facts, fake, tmp_path=tmp_path)
    assert fake.sets == [(facts.gpus.devices[1].uuid, 450_000)]
    assert statuses(result, "gpu/power/") == [("gpu/power/0", "ok"), ("gpu/power/1", "changed")]


def test_out_of_range_is_bad_input_showing_the_range_and_nothing_is_set(tmp_path, sysroot):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    fake = FakeNvml(pro6000x2_phb())
    with pytest.raises(InputError) as exc:
        provision(with_power(config, 700), facts, fake).raise_for_failure()
    assert exc.value.exit_code == 2
    text = exc.value.render()
    assert "nothing was changed" in text and "700 W requested, this GPU accepts 150-600 W" in text
    assert fake.sets == [] and files_in(sysroot) == [LOCK]  # not even the unit was written
    with pytest.raises(InputError):
        provision(with_power(config, 100), facts, fake, dry_run=True).raise_for_failure()  # dry run validates too
    assert fake.sets == []


def test_live_range_is_checked_before_anything_is_set(tmp_path):
    """The facts said 150-600 W, but GPU 1 accepts only up to 450 W now: neither GPU is touched."""
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    live = pro6000x2_phb()
    live.gpus[1].max_mw = 450_000
    fake = FakeNvml(live)
    result = provision(with_power(config, 500), facts, fake)
    with pytest.raises(InputError) as exc:
        result.raise_for_failure()
    assert "accepts 150-450 W" in exc.value.render() and fake.sets == []
    assert statuses(result, "gpu/power/") == [("gpu/power/0", "failed"), ("gpu/power/1", "skipped")]


def test_readback_mismatch_fails(tmp_path):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    host = pro6000x2_phb()
    host.gpus[1].enforced_cap_mw = 200_000  # another limiter holds GPU 1 lower
    fake = FakeNvml(host)
    result = provision(with_power(config, 250), facts, fake)
    assert statuses(result, "gpu/power/") == [("gpu/power/0", "changed"), ("gpu/power/1", "failed")]
    assert "the driver enforces 200 W" in result.failed[0].reason
    assert result.failed[0].output[0] == "read back: limit 250 W, enforced 200 W"
    with pytest.raises(FailedError) as exc:
        result.raise_for_failure()
    assert exc.value.exit_code == 1 and "gpu/power/1" in exc.value.message


def test_setting_without_root_says_so(tmp_path):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    host = pro6000x2_phb()
    host.root = False
    result = provision(with_power(config, 250), facts, FakeNvml(host))
    # the executor stops at the first failed action; the next one is reported, not attempted
    assert statuses(result, "gpu/power/") == [("gpu/power/0", "failed"), ("gpu/power/1", "skipped")]
    assert "needs root" in result.failed[0].reason


def test_dry_run_changes_nothing_and_says_what_it_would_do(tmp_path, sysroot):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    facts.state.p2p = None  # no verdict yet: the functional check would run
    fake = FakeNvml(pro6000x2_phb())
    result = provision(with_power(config, 250), facts, fake, dry_run=True, torch=TorchPython(python="/usr/bin/python3", why="test"))
    assert fake.sets == [] and fake.init_calls == 0
    assert not any(sysroot.rglob("*"))
    lines = result.text
    assert f"nvidia-smi -i {facts.gpus.devices[0].uuid} -pl 250" in lines
    assert "would    gpu/power-unit: write /etc/systemd/system/hostctl-power.service" in lines
    assert "would    gpu/p2p/functional: run an all-reduce on GPUs 0, 1 with NCCL_P2P_DISABLE=0 NCCL_P2P_LEVEL=PHB" in lines
    assert {r.status for r in result.report.actions if r.id.startswith("gpu/power")} == {"would-change"}
    # with no Python that has torch, the dry run says the check cannot run (as the real run would)
    result = provision(with_power(config, 250), facts, fake, dry_run=True)
    assert "skip     gpu/p2p/functional: cannot run the functional check: no torch in the unit tier" in result.text


def test_a_stored_verdict_for_this_driver_and_cmdline_is_reused(tmp_path):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    assert facts.state.p2p.verdict == "ok" and facts.state.p2p.driver_version == facts.gpus.driver_version
    stored = store_verdict(facts.state.p2p)  # what an earlier provision left on that host
    before = stored.stat().st_mtime_ns
    result = provision(config, facts, FakeNvml(pro6000x2_phb()), tmp_path=tmp_path)
    (step,) = [r for r in result.report.actions if r.id == "gpu/p2p/functional"]
    assert step.status == "ok" and "stored verdict ok" in step.describe and "not measured again" in step.describe
    assert stored.stat().st_mtime_ns == before  # not measured, not written again
    # the rungs and the verdict go to the warnings list as data
    rungs = {w["id"]: w for w in result.report.document()["warnings"] if w["id"].startswith("gpu/p2p/")}
    assert rungs["gpu/p2p/acs"]["severity"] == "warn" and rungs["gpu/p2p/acs"]["data"]["status"] == "unknown"  # no sysfs here
    assert rungs["gpu/p2p/topology"]["data"]["summary"].startswith("worst path PHB")
    assert rungs["gpu/p2p/verdict"]["data"]["verdict"] == "ok"


def test_unit_is_installed_and_enabled_idempotently(tmp_path, sysroot):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    first = provision(config, facts, FakeNvml(pro6000x2_phb()), tmp_path=tmp_path)
    unit = sysroot / "etc/systemd/system" / UNIT_NAME
    link = sysroot / "etc/systemd/system/multi-user.target.wants" / UNIT_NAME
    assert unit.is_file() and os.readlink(link) == f"/etc/systemd/system/{UNIT_NAME}"
    text = unit.read_text()
    assert "ExecStart=/usr/bin/true --config " in text and "provision --only gpu --boot" in text
    assert statuses(first, "gpu/power-unit") == [("gpu/power-unit", "changed"), ("gpu/power-unit/enable", "changed")]
    # every file but the lock, which names its holder while a run (a no-op one too) holds it
    def written():
        return {p: p.stat().st_mtime_ns for p in sysroot.rglob("*") if p.is_file() and p.name != "provision.lock"}

    before = written()
    assert {unit, sysroot / "var/lib/hostctl/provisioned.json"} <= set(before)
    again = provision(config, facts, FakeNvml(pro6000x2_phb()), tmp_path=tmp_path)
    assert statuses(again, "gpu/power-unit") == [("gpu/power-unit", "ok"), ("gpu/power-unit/enable", "ok")]
    assert written() == before  # the record too
    assert json.loads((sysroot / "var/lib/hostctl/provisioned.json").read_text())["parts"]["gpu"]["profile"] == \
        config.profile.name


@needs_systemd_analyze
def test_installed_unit_passes_systemd_analyze_verify(tmp_path, sysroot):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    result = provision(config, facts, FakeNvml(pro6000x2_phb()), hostctl_bin=shutil.which("python3"))
    result.raise_for_failure()
    unit = sysroot / "etc/systemd/system" / UNIT_NAME
    res = subprocess.run(["systemd-analyze", "verify", "--man=no", str(unit)], capture_output=True, text=True)
    assert res.returncode == 0 and res.stderr.strip() == "", res.stderr


def test_host_without_driver_installs_the_unit_and_skips_the_rest(tmp_path, sysroot):
    config, facts = examples.load("pro6000x2-desktop")
    facts = facts.model_copy(update={"gpus": GpuFacts(available=False, reason="NVIDIA driver not loaded")})
    fake = FakeNvml(pro6000x2_phb())
    result = provision(config, facts, fake)
    assert (sysroot / "etc/systemd/system" / UNIT_NAME).is_file()
    (skip,) = [r for r in result.report.actions if r.id == "gpu"]
    assert skip.status == "skipped" and skip.reason.startswith("no driver")
    assert "skip     gpu: no driver" in result.text
    assert fake.init_calls == 0 and not [r for r in result.report.actions if r.id.startswith("gpu/p2p")]
    result.raise_for_failure()


def test_no_limits_configured_needs_no_unit(tmp_path, sysroot):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    result = provision(with_power(config, None), facts, FakeNvml(pro6000x2_phb()), tmp_path=tmp_path)
    assert not (sysroot / "etc").exists()
    assert ("gpu/power-unit", "skipped") in statuses(result, "gpu/power")


def test_boot_mode_waits_for_the_driver_then_sets_only_the_limits(tmp_path, sysroot):
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    no_driver = facts.model_copy(update={"gpus": GpuFacts(available=False, reason="not yet")})
    version = tmp_path / "version"
    version.write_text("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  595.71.05\n")
    fake = FakeNvml(pro6000x2_phb(), driver_after=2)  # NVML answers on the third try
    config = with_power(config, 280)
    out = io.StringIO()
    report = parts.provision(config, only="gpu", boot=True, facts=lambda c: no_driver, out=out, err=io.StringIO(),
                             gpu_options={"adapter": fake, "version_file": version, "driver_wait_s": 30})
    report.raise_for_error()
    assert [u for u, _ in fake.sets] == [g.uuid for g in facts.gpus.devices] and {w for _, w in fake.sets} == {280_000}
    assert sorted(r.id for r in report.actions) == ["gpu/driver", "gpu/power/0", "gpu/power/1"]
    assert "ok       gpu/driver: driver 595.71.05 ready after" in out.getvalue()
    # only the limits: no unit, no P2P, and a boot run is not recorded as the part converging
    assert files_in(sysroot) == [LOCK]


def test_boot_mode_gives_up_after_the_bound():
    clock = iter(range(0, 1000, 10))
    ready, waited, why = wait_for_driver(FakeNvml(pro6000x2_phb()), timeout_s=60, version_file=Path("/nonexistent"),
                                         sleep=lambda s: None, clock=lambda: float(next(clock)))
    assert not ready and waited >= 60 and "does not exist yet" in why


def test_two_socket_host_limits_both_gpus(tmp_path):
    config, facts = fake_facts(tmp_path, two_socket(), base="pro6000x1-mapped")
    assert [g.numa_node for g in facts.gpus.devices] == [0, 1]
    fake = FakeNvml(two_socket())
    result = provision(with_power(config, 400), facts, fake, tmp_path=tmp_path)
    assert [w for _, w in fake.sets] == [400_000, 400_000]
    # one GPU serves the mapped recipe: P2P is not applicable, and the stored verdict says so
    assert ("gpu/p2p/verdict", "changed") in statuses(result, "gpu/p2p")
    stored = json.loads((Path(os.environ["HOSTCTL_SYSROOT"]) / "var/lib/hostctl/p2p.json").read_text())
    assert stored["verdict"] == "not_applicable"
    assert ("gpu/p2p", "ok") in statuses(provision(with_power(config, 400), facts, FakeNvml(two_socket())), "gpu/p2p")


def test_cli_boot_needs_only_gpu(capsys):
    assert main(["provision", "--boot"]) == 2
    assert "--boot goes with --only gpu" in capsys.readouterr().err


def test_a_masked_power_unit_is_refused_untouched(tmp_path, sysroot):
    units = sysroot / "etc/systemd/system"
    units.mkdir(parents=True)
    (units / UNIT_NAME).symlink_to("/dev/null")
    config, facts = fake_facts(tmp_path, pro6000x2_phb())
    fake = FakeNvml(pro6000x2_phb())
    result = provision(with_power(config, 250), facts, fake, tmp_path=tmp_path)
    with pytest.raises(RefusedError) as refused:
        result.report.raise_for_error()
    assert refused.value.details == [f"/etc/systemd/system/{UNIT_NAME} -> /dev/null (the unit is masked)"]
    assert os.readlink(units / UNIT_NAME) == "/dev/null" and fake.sets == []
    assert not (units / "multi-user.target.wants").exists()
