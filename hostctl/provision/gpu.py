"""`hostctl provision --only gpu`: GPU power limits (validated, set through NVML, read back), the
boot unit that re-applies them, and the P2P verdict (hostctl.gpu.p2p).

Entry point: provision_gpu(config, facts, plan, dry_run=..., yes=...). Order and guarantees:
  1. the boot unit hostctl-power.service is written and enabled (also on a host without the
     driver: its ExecCondition skips it there cleanly);
  2. without a driver, everything else reports "skip: no driver";
  3. every power limit is checked against its GPU's own min/max first - out of range is bad
     input (exit 2) and nothing is set; then each is set and the ENFORCED limit read back, a
     difference is a failure (exit 1);
  4. the P2P ladder, whose functional verdict is stored for the plan (not in boot mode).
`boot=True` is what the unit runs: wait (bounded) for the driver, then only step 3.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hostctl import paths, runner
from hostctl.atomic import write_atomic
from hostctl.config import Config
from hostctl.errors import FailedError, InputError
from hostctl.facts.gpu import NVIDIA_VERSION, NvmlAdapter, NvmlUnavailable, probe_gpus
from hostctl.facts.model import Gpu, HostFacts
from hostctl.plan.model import Plan, PowerSetting
from hostctl.plan.power import TOLERANCE_W, plan_power
from hostctl.service.render import INSTALLED_PROFILE

UNIT_NAME = "hostctl-power.service"
UNIT_DIR = "/etc/systemd/system"
WANTS_DIR = "/etc/systemd/system/multi-user.target.wants"
DRIVER_WAIT_S = 60.0
READBACK_TOLERANCE_MW = int(TOLERANCE_W * 1000)

StepStatus = Literal["ok", "changed", "would", "skip", "warn", "fail", "unknown"]


@dataclass
class Step:
    step: str
    status: StepStatus
    detail: str
    evidence: list[str] = field(default_factory=list)

    def line(self) -> str:
        return f"{self.status:<8} {self.step}: {self.detail}"


@dataclass
class GpuProvisionResult:
    dry_run: bool
    boot: bool = False
    steps: list[Step] = field(default_factory=list)
    ladder: Any = None  # hostctl.gpu.p2p.P2PLadder when the ladder ran

    def add(self, step: str, status: StepStatus, detail: str, evidence: list[str] | None = None) -> Step:
        s = Step(step, status, detail, evidence or [])
        self.steps.append(s)
        return s

    @property
    def failures(self) -> list[Step]:
        return [s for s in self.steps if s.status == "fail"]

    def lines(self) -> list[str]:
        out = []
        for s in self.steps:
            out.append(s.line())
            out += [f"           {e}" for e in s.evidence if e]
        return out

    def to_dict(self) -> dict:
        return {"dry_run": self.dry_run, "boot": self.boot,
                "steps": [{"step": s.step, "status": s.status, "detail": s.detail, "evidence": s.evidence}
                          for s in self.steps],
                "p2p": self.ladder.to_dict() if self.ladder is not None else None}

    def raise_for_failure(self) -> None:
        if self.failures:
            raise FailedError(f"{len(self.failures)} GPU step(s) failed",
                              details=[s.line() for s in self.failures],
                              fix="see each step above; re-run `hostctl provision --only gpu` after fixing it")


# ---------------------------------------------------------------- the boot unit


def systemd_is_pid1() -> bool:
    """sd_booted(): systemd runs this host (and we act on the real root, not a test sysroot)."""
    return paths.sysroot() == Path("/") and Path("/run/systemd/system").is_dir()


def default_hostctl_bin() -> str:
    """The hostctl the unit should call: the console script running now, else the one on PATH."""
    argv0 = Path(sys.argv[0]) if sys.argv and sys.argv[0] else None
    if argv0 is not None and argv0.name == "hostctl" and argv0.exists():
        return str(argv0.absolute())
    return shutil.which("hostctl") or "/usr/local/bin/hostctl"


def render_power_unit(plan: Plan, *, hostctl_bin: str, config_path: str) -> str:
    from hostctl.service.render import render_files

    return render_files(plan, hostctl_bin=hostctl_bin, config_path=config_path)[UNIT_NAME]


def install_power_unit(plan: Plan, config: Config, result: GpuProvisionResult, *, dry_run: bool,
                       hostctl_bin: str | None = None) -> None:
    """Write /etc/systemd/system/hostctl-power.service and enable it for multi-user.target:
    `systemctl enable` when systemd runs the host, else the wants/ symlink systemctl would make."""
    # Like the runtime unit, the boot unit reads the installed profile (`provision --only system`
    # puts it there), so both units always act on one profile whatever --config provision got.
    config_path = INSTALLED_PROFILE
    text = render_power_unit(plan, hostctl_bin=hostctl_bin or default_hostctl_bin(), config_path=config_path)
    unit_path = f"{UNIT_DIR}/{UNIT_NAME}"
    target = paths.system_path(unit_path)
    current = target.read_text() if target.is_file() else None
    changed = current != text
    if changed:
        if dry_run:
            result.add("gpu/power-unit", "would", f"write {unit_path} ({len(text.splitlines())} lines, "
                       f"{'replacing a different one' if current is not None else 'new'})")
        else:
            write_atomic(target, text, mode=0o644)
            result.add("gpu/power-unit", "changed", f"wrote {unit_path}")
    else:
        result.add("gpu/power-unit", "ok", f"{unit_path} is current")
    installed = paths.system_path(INSTALLED_PROFILE)
    source = Path(config.source)
    if not installed.is_file() or (source.resolve() != installed.resolve()
                                   and installed.read_bytes() != source.read_bytes()):
        what = "does not exist" if not installed.is_file() else f"differs from {source}"
        result.add("gpu/power-unit", "warn", f"the unit applies the limits of {INSTALLED_PROFILE} at boot, which {what}: "
                   "run `hostctl provision --only system` to install this profile there")

    link = paths.system_path(f"{WANTS_DIR}/{UNIT_NAME}")
    if systemd_is_pid1():
        enabled = runner.run(["systemctl", "is-enabled", UNIT_NAME], timeout=15)
        argvs = ([["systemctl", "daemon-reload"]] if changed else []) + (
            [] if enabled.ok and enabled.stdout.strip() == "enabled" else [["systemctl", "enable", UNIT_NAME]])
        for argv in argvs:
            if dry_run:
                result.add("gpu/power-unit", "would", " ".join(argv))
                continue
            res = runner.run(argv, timeout=60)
            if not res.ok:
                result.add("gpu/power-unit", "fail", res.why())
                return
            result.add("gpu/power-unit", "changed", " ".join(argv))
        if not argvs:
            result.add("gpu/power-unit", "ok", f"{UNIT_NAME} is enabled")
        return
    # No systemd running (a container, a chroot, a test sysroot): make the link systemctl would.
    if link.is_symlink() and os.readlink(link) == unit_path:
        result.add("gpu/power-unit", "ok", f"enabled ({WANTS_DIR}/{UNIT_NAME})")
        return
    if dry_run:
        result.add("gpu/power-unit", "would", f"ln -sf {unit_path} {WANTS_DIR}/{UNIT_NAME} (systemd is not running "
                   "here, so no systemctl)")
        return
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        link.unlink()
    link.symlink_to(unit_path)
    result.add("gpu/power-unit", "changed", f"enabled: {WANTS_DIR}/{UNIT_NAME} -> {unit_path} (systemd is not "
               "running here, so the link was made directly)")


# ---------------------------------------------------------------- power limits


def _range_text(s: PowerSetting) -> str:
    return f"{s.min_w:g}-{s.max_w:g} W" if s.min_w is not None and s.max_w is not None else "range unknown"


def validate_power(settings: list[PowerSetting]) -> None:
    """Bad input (exit 2, nothing set) when any desired limit lies outside its GPU's range."""
    invalid = [s for s in settings if s.action == "invalid"]
    if invalid:
        raise InputError(
            "power limit outside the GPU's own range; nothing was changed",
            details=[f"GPU {s.index} ({s.uuid}): {s.desired_w:g} W requested, this GPU accepts {_range_text(s)}"
                     for s in invalid],
            fix="set gpu.power_limit_w (or gpu.power_limits_w for that GPU) inside the range shown",
        )


def _mw(watts: float) -> int:
    return int(round(watts * 1000))


def apply_power(settings: list[PowerSetting], gpus: list[Gpu], adapter: NvmlAdapter, result: GpuProvisionResult, *,
                dry_run: bool) -> None:
    validate_power(settings)
    by_index = {g.index: g for g in gpus}
    to_set = [s for s in settings if s.action == "set"]
    for s in settings:
        if s.action == "none":
            result.add(f"gpu/power/{s.index}", "skip", "the profile sets no limit for this GPU")
        elif s.action == "keep":
            enforced = by_index[s.index].power.enforced_w if s.index in by_index else None
            ok = enforced is None or abs(enforced - s.desired_w) <= TOLERANCE_W
            result.add(f"gpu/power/{s.index}", "ok" if ok else "warn",
                       f"{s.desired_w:g} W already set ({_range_text(s)})" + (
                           f"; the driver enforces {enforced:g} W" if enforced is not None else "")
                       + ("" if ok else ": another limiter is lower"))
    if not to_set:
        return
    if dry_run:
        for s in to_set:
            result.add(f"gpu/power/{s.index}", "would",
                       f"NVML set power limit {s.current_w:g} W -> {s.desired_w:g} W ({_range_text(s)}) on {s.uuid} "
                       f"(nvmlDeviceSetPowerManagementLimit {_mw(s.desired_w)} mW, like `nvidia-smi -i {s.uuid} "
                       f"-pl {s.desired_w:g}`), then read back the enforced limit")
        return
    try:
        adapter.init()
    except NvmlUnavailable as exc:
        result.add("gpu/power", "fail", f"cannot open NVML to set the limits: {exc}")
        return
    try:
        handles: dict[int, Any] = {}
        live_invalid = []
        for s in to_set:  # validate everything against the live range before setting anything
            h = adapter.handle(s.index)
            if adapter.uuid(h) != s.uuid:
                raise FailedError(f"GPU {s.index} is {adapter.uuid(h)} now, not {s.uuid} as the facts said; nothing was "
                                  "changed", fix="re-run provision (the GPUs were re-enumerated)")
            lo, hi = adapter.power_constraints_mw(h)
            if not lo <= _mw(s.desired_w) <= hi:
                live_invalid.append(f"GPU {s.index} ({s.uuid}): {s.desired_w:g} W requested, this GPU accepts "
                                    f"{lo / 1000:g}-{hi / 1000:g} W")
            handles[s.index] = h
        if live_invalid:
            raise InputError("power limit outside the GPU's own range; nothing was changed", details=live_invalid,
                             fix="set gpu.power_limit_w inside the range shown")
        for s in to_set:
            h, mw, step = handles[s.index], _mw(s.desired_w), f"gpu/power/{s.index}"
            try:
                adapter.set_power_limit_mw(h, mw)
            except adapter.errors as exc:
                if adapter.is_no_permission(exc):
                    result.add(step, "fail", f"NVML refused to set {s.desired_w:g} W: setting a power limit needs root "
                               "(run provision with sudo)")
                else:
                    result.add(step, "fail", f"NVML refused to set {s.desired_w:g} W on {s.uuid}: {exc}")
                continue
            limit, enforced = adapter.power_limit_mw(h), adapter.power_enforced_mw(h)
            evidence = [f"read back: limit {limit / 1000:g} W, enforced {enforced / 1000:g} W"]
            if abs(enforced - mw) > READBACK_TOLERANCE_MW:
                result.add(step, "fail", f"set {s.desired_w:g} W but the driver enforces {enforced / 1000:g} W "
                           f"(configured limit reads {limit / 1000:g} W): another limiter overrides it", evidence)
            else:
                result.add(step, "changed", f"{s.current_w:g} W -> {s.desired_w:g} W ({_range_text(s)}), "
                           f"enforced {enforced / 1000:g} W", evidence)
    finally:
        try:
            adapter.shutdown()
        except adapter.errors:
            pass


def wait_for_driver(adapter: NvmlAdapter, *, timeout_s: float = DRIVER_WAIT_S, interval_s: float = 1.0,
                    version_file: Path = NVIDIA_VERSION, sleep: Callable[[float], None] = time.sleep,
                    clock: Callable[[], float] = time.monotonic) -> tuple[bool, float, str]:
    """Poll until the driver answers NVML (bounded): (ready, seconds waited, last reason)."""
    start = clock()
    why = "not tried"
    while True:
        if version_file.exists():
            try:
                adapter.init()
            except NvmlUnavailable as exc:
                why = str(exc)
            else:
                try:
                    adapter.shutdown()
                except adapter.errors:
                    pass
                return True, clock() - start, "ready"
        else:
            why = f"{version_file} does not exist yet"
        if clock() - start >= timeout_s:
            return False, clock() - start, why
        sleep(interval_s)


# ---------------------------------------------------------------- the entry point


def serving_gpus(facts: HostFacts, plan: Plan) -> list[Gpu]:
    out = []
    for g in plan.placement.gpus:
        gpu = facts.gpus.by_index(g.index)
        if gpu is not None:
            out.append(gpu)
    return out


def provision_gpu(config: Config, facts: HostFacts, plan: Plan, *, dry_run: bool, yes: bool, boot: bool = False,
                  adapter: NvmlAdapter | None = None, hostctl_bin: str | None = None,
                  version_file: Path = NVIDIA_VERSION, driver_wait_s: float = DRIVER_WAIT_S,
                  p2p_options: dict | None = None) -> GpuProvisionResult:
    """Provision the GPU part of the host; see the module docstring. `yes` is accepted for the
    CLI's sake: nothing here is destructive. p2p_options go to hostctl.gpu.p2p.run_ladder."""
    del yes
    adapter = adapter or NvmlAdapter()
    result = GpuProvisionResult(dry_run=dry_run, boot=boot)
    configured = any(s.desired_w is not None for s in plan.power.gpus) or \
        config.profile.gpu.power_limit_w is not None or bool(config.profile.gpu.power_limits_w)

    if boot:
        if not facts.gpus.available:
            ready, waited, why = wait_for_driver(adapter, timeout_s=driver_wait_s, version_file=version_file)
            if not ready:
                result.add("gpu/driver", "fail", f"the NVIDIA driver did not come up within {driver_wait_s:g} s: {why}")
                return result
            facts = facts.model_copy(update={"gpus": probe_gpus(adapter)})
            result.add("gpu/driver", "ok", f"driver {facts.gpus.driver_version} ready after {waited:.0f} s")
        power = plan_power(config, facts)
        apply_power(power.gpus, facts.gpus.devices, adapter, result, dry_run=dry_run)
        if not power.gpus or all(s.action == "none" for s in power.gpus):
            result.add("gpu/power", "skip", "the profile sets no power limits")
        return result

    if configured and facts.gpus.available:
        validate_power(plan.power.gpus)  # bad input changes nothing, the unit included
    if configured:
        install_power_unit(plan, config, result, dry_run=dry_run, hostctl_bin=hostctl_bin)
    else:
        result.add("gpu/power-unit", "skip", "the profile sets no power limits: no boot unit needed")

    if not facts.gpus.available:
        result.add("gpu", "skip", f"no driver ({facts.gpus.reason}): power limits and the P2P check skipped"
                   + ("; the boot unit applies the limits once the driver loads" if configured else ""))
        return result

    if configured:
        apply_power(plan.power.gpus, facts.gpus.devices, adapter, result, dry_run=dry_run)
        off = [g.index for g in facts.gpus.devices if g.persistence_mode is False]
        if off:
            result.add("gpu/power", "warn", f"persistence mode is off on GPU(s) {', '.join(map(str, off))}: limits may "
                       "be lost when the driver unloads between clients; enable nvidia-persistenced")
    else:
        result.add("gpu/power", "skip", "the profile sets no power limits")

    from hostctl.gpu.p2p import run_ladder

    ladder = run_ladder(facts, serving_gpus(facts, plan), measure=True, dry_run=dry_run, **(p2p_options or {}))
    result.ladder = ladder
    for rung in ladder.rungs:
        status: StepStatus = {"ok": "ok", "warn": "warn", "fail": "fail" if rung.name == "functional" else "warn",
                              "unknown": "unknown", "skip": "skip"}[rung.status]
        if rung.name == "functional" and ladder.verdict is not None and ladder.verdict.verdict != "inconclusive":
            status = "ok" if ladder.verdict.verdict in ("ok", "not_applicable") else "warn"
        if rung.name == "functional" and dry_run and rung.status == "skip" and "would" in rung.summary:
            status = "would"
        result.add(f"gpu/p2p/{rung.name}", status, rung.summary, rung.evidence + ([f"fix: {rung.fix}"] if rung.fix else []))
    if ladder.stored_at:
        result.add("gpu/p2p", "changed", f"verdict {ladder.verdict.verdict} stored in {ladder.stored_at}")
    for rec in ladder.recommendations:
        result.add("gpu/p2p", "warn", rec)
    return result
