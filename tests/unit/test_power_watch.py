"""GPU power limits that drift after ready (hostctl/provision/power_watch.py, README "Supervision"),
on the FAKE NVML adapter (a limit cannot be set on this machine, nor on the lent GPU, which is
read-only): a driver reload resets the limits to the GPUs' default; the supervisor's check finds
it and puts them back through `provision --only gpu --boot`'s own path; doctor's gpu.power.limit
names the drift."""

from __future__ import annotations

from fake_nvml import FakeNvml, pro6000x2_phb, write_sysfs
from hostctl import examples
from hostctl.config import Config
from hostctl.doctor.registry import CheckContext
from hostctl.doctor.checks.gpu import power_limit
from hostctl.facts.gpu import probe_gpus
from hostctl.facts.gpu_telemetry import read_power_limits_w
from hostctl.plan import build_plan
from hostctl.plan.records import PowerSetting
from hostctl.provision.power_watch import RETRY_S, PowerWatch, drift


def _host(tmp_path, watts: float):
    """The report-001 desktop's config asking for `watts` on both GPUs, its fake NVML, and facts read through it."""
    host = pro6000x2_phb()
    config, facts = examples.load("pro6000x2-desktop")
    gpu = config.profile.gpu.model_copy(update={"power_limit_w": watts, "power_limits_w": {}})
    config = config.model_copy(update={"profile": config.profile.model_copy(update={"gpu": gpu})})
    fake = FakeNvml(host)
    host = fake.host  # the adapter's own copy: what a driver reload changes
    pci = write_sysfs(host, tmp_path / "pci")

    def read(_config: Config = config):
        return facts.model_copy(update={"gpus": probe_gpus(fake, pci_root=pci, version_file=tmp_path / "absent")})

    return config, host, fake, read


def test_a_drift_is_a_limit_the_plan_sets_and_the_gpu_no_longer_has():
    s = [PowerSetting(index=0, uuid="GPU-a", desired_w=280, current_w=300, min_w=150, max_w=600, action="set"),
         PowerSetting(index=1, uuid="GPU-b", desired_w=280, current_w=280, min_w=150, max_w=600, action="keep"),
         PowerSetting(index=2, uuid="GPU-c", desired_w=None, current_w=600, min_w=150, max_w=600, action="none")]
    assert drift(s, {0: 280.0, 1: 280.4, 2: 600.0}) == []  # milliwatt rounding is not a drift; GPU 2 is not watched
    assert drift(s, {0: 600.0, 1: None, 2: 450.0}) == ["GPU 0 (GPU-a) is at 600 W, the plan sets 280 W"]


def test_limits_lost_to_a_driver_reload_are_put_back(tmp_path):
    config, host, fake, read = _host(tmp_path, 280)
    for g in host.gpus:  # provisioned: both at 280 W
        g.limit_mw = 280_000
    said: list[str] = []
    watch = PowerWatch(config, build_plan(config, read()).power.gpus, said.append, adapter=fake, facts=read)
    assert watch.active and watch.check() == [] and said == [] and fake.sets == []

    for g in host.gpus:  # `nvidia-smi -r`: every limit back at the GPU's default
        g.limit_mw = g.default_mw
    found = watch.check()
    assert found == [f"GPU {i} ({g.uuid}) is at 600 W, the plan sets 280 W" for i, g in enumerate(host.gpus)]
    assert [g.limit_mw for g in host.gpus] == [280_000, 280_000]  # put back, through the boot path's set and read-back
    assert sorted(fake.sets) == sorted((g.uuid, 280_000) for g in host.gpus)
    assert "power limits drifted" in said[0] and said[1] == "power limits put back: GPU 0 280 W, GPU 1 280 W"
    assert read_power_limits_w(fake, [0, 1]) == {0: 280.0, 1: 280.0}
    assert watch.check() == [] and len(said) == 2


def test_a_put_back_that_fails_is_said_once_and_tried_again_later(tmp_path):
    config, host, fake, read = _host(tmp_path, 280)
    said: list[str] = []
    watch = PowerWatch(config, build_plan(config, read()).power.gpus, said.append, adapter=fake, facts=read)
    host.root = False  # a supervisor that is not root: NVML refuses the set
    assert watch.check() and watch.check()
    assert [line.split(":")[0] for line in said] == ["power limits drifted (a driver reload resets them to the default)",
                                                    "power limits NOT put back"]
    assert "needs root" in said[1] and fake.sets == []
    # tried again once RETRY_S has passed (not at every check): now as root, it is put back
    host.root = True
    assert watch.check() and fake.sets == [] and len(said) == 2
    watch.failed_at -= RETRY_S
    assert watch.check() and len(fake.sets) == 2
    assert said[2] == "power limits put back: GPU 0 280 W, GPU 1 280 W" and watch.check() == []


def test_a_profile_without_limits_is_not_watched(tmp_path):
    config, _, fake, read = _host(tmp_path, None)
    watch = PowerWatch(config, build_plan(config, read()).power.gpus, print, adapter=fake, facts=read)
    assert not watch.active


def test_doctor_names_a_limit_back_at_its_default(tmp_path):
    config, host, fake, read = _host(tmp_path, 280)
    for g in host.gpus:
        g.limit_mw = g.default_mw
    facts = read()
    ctx = CheckContext(config=config, facts=facts, plan=build_plan(config, facts))
    r = power_limit(ctx)
    assert r.status == "fail"
    assert "GPU 0 at 600 W (its default)" in r.summary and "drifted" in r.summary and "driver reload" in r.summary
    host.gpus[0].limit_mw = 350_000  # set to something else by hand: not called a drift
    host.gpus[1].limit_mw = 350_000
    facts = read()
    r = power_limit(CheckContext(config=config, facts=facts, plan=build_plan(config, facts)))
    assert r.status == "fail" and "(its default)" not in r.summary and "drifted" not in r.summary
