"""The gpu part of `hostctl provision`: GPU power limits (validated, set through NVML, read back),
the boot unit that re-applies them, and the P2P verdict (hostctl.gpu.p2p), in the act protocol.

read_gpu() reads what deciding needs (GPUs through NVML, hostctl's state, the unit file and its
enablement, the installed profile, the read-only P2P rungs, the Python that would run the
functional check); decide() is pure and yields only the actions still needed:
  1. the boot unit hostctl-power.service written and enabled (also on a host without the
     driver: its ExecCondition skips it there cleanly);
  2. without a driver, everything else is skipped: "no driver";
  3. every power limit is checked against its GPU's own min/max first - out of range is bad
     input (exit 2) and nothing is set, the unit included; each set action checks the live
     range of every GPU it sets before the first one is touched, sets, and reads the ENFORCED
     limit back: a difference is a failure (exit 1);
  4. the P2P ladder: rungs 1-4 are reported as data, the functional check runs (and stores its
     verdict) only when no stored verdict measured under this driver, command line and GPUs
     applies.
`boot=True` is what the unit runs: wait (bounded) for the driver, then only step 3.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from hostctl import paths
from hostctl.act.actions import Action, Assessment, Note, Settled, Skipped, command
from hostctl.safefs import write_file
from hostctl.config import Config
from hostctl.errors import FailedError, InputError, RefusedError
from hostctl.facts.executable import ExecChain, read_exec_chain
from hostctl.facts.gpu import NVIDIA_VERSION, NvmlAdapter, NvmlUnavailable
from hostctl.facts.records import AcsFacts, GpuFacts, HostFacts, P2PVerdict
from hostctl.facts.sysfiles import LocalReader, ManagedFiles, Reader, read_managed, text_of
from hostctl.gpu.harness import TorchPython
from hostctl.plan import build_plan
from hostctl.plan.records import Plan, PowerSetting
from hostctl.plan.placement import serving_gpus
from hostctl.plan.power import TOLERANCE_W
from hostctl.provision import boot_code
from hostctl.provision import files as file_edit
from hostctl.service.render import INSTALLED_PROFILE

UNIT_NAME = "hostctl-power.service"
UNIT_DIR = "/etc/systemd/system"
UNIT_PATH = f"{UNIT_DIR}/{UNIT_NAME}"
WANTS_DIR = "/etc/systemd/system/multi-user.target.wants"
WANTS_LINK = f"{WANTS_DIR}/{UNIT_NAME}"
DRIVER_WAIT_S = 60.0
READBACK_TOLERANCE_MW = int(TOLERANCE_W * 1000)


def render_power_unit(plan: Plan, *, hostctl_bin: str, config_path: str) -> str:
    from hostctl.service.render import render_files

    return render_files(plan, hostctl_bin=hostctl_bin, config_path=config_path)[UNIT_NAME]


def configured(config: Config) -> bool:
    return config.profile.gpu.power_limit_w is not None or bool(config.profile.gpu.power_limits_w)


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


# ---------------------------------------------------------------- what deciding reads


class GpuSnapshot:
    """What the gpu part decides on, one look's reads: a plain class, as it holds who would run the
    functional P2P check (a TorchPython)."""

    def __init__(self, *, facts: HostFacts, files: ManagedFiles, source_profile: bytes | None, acs: Any = None,
                 torch: TorchPython | None = None, acs_facts: AcsFacts | None = None, driver: str | None = None,
                 exec_chain: ExecChain | None = None) -> None:
        self.facts = facts  # the GPUs (NVML) and hostctl's state as they are this round
        self.files = files  # the unit file, its wants link or enablement, the installed profile
        self.source_profile = source_profile  # the profile provision runs with
        self.acs = acs  # hostctl.gpu.p2p.Rung: the ACS rung (lspci and sysfs); None: not read
        self.torch = torch  # who would run the functional check; None: not looked up
        self.acs_facts = acs_facts  # what the ACS rung read this round (handed to the functional run)
        self.driver = driver  # boot mode: how the driver came up
        self.exec_chain = exec_chain  # the code behind the hostctl the unit calls (None: not read)


def read_gpu(config: Config, facts: HostFacts, reader: Reader, *, gpus: Callable[[], GpuFacts] | None = None,
             state: Callable[[], Any] | None = None, p2p_options: dict | None = None, look_for_torch: bool = True,
             read_acs: bool = True, hostctl_bin: str | None = None) -> GpuSnapshot:
    """The GPU facts this round (gpus() re-probes NVML; None keeps facts' own), hostctl's state,
    the files the part manages, the ACS rung (lspci, sysfs) and, when the functional check may be
    needed, the Python that would run it."""
    from hostctl.gpu.p2p import acs_rung, driver_rung, verdict_applies

    opts = dict(p2p_options or {})
    update: dict[str, Any] = {}
    if gpus is not None:
        update["gpus"] = gpus()
    if state is not None:
        update["state"] = state()
    facts = facts.model_copy(update=update) if update else facts
    hostctl_bin = paths.hostctl_for_units(hostctl_bin)
    files = read_managed(reader, files=[UNIT_PATH, INSTALLED_PROFILE], links=[UNIT_PATH, WANTS_LINK],
                         present=[hostctl_bin])
    if files.systemd_running:
        files.enabled = read_managed(reader, units=[UNIT_NAME]).enabled
    source = config.source_text.encode() if config.source_text else None  # as validated, not re-read
    chain = read_exec_chain(hostctl_bin) if isinstance(reader, LocalReader) else None
    snap = GpuSnapshot(facts=facts, files=files, source_profile=source, exec_chain=chain)
    if not facts.gpus.available:
        return snap
    plan = build_plan(config, facts)
    serving = serving_gpus(facts, plan)
    if len(serving) < 2:
        return snap
    if read_acs:  # act time reads ACS again, through the facts' own probe
        from hostctl.facts.acs import probe_acs

        snap.acs_facts = probe_acs([g.pci_bus_id for g in serving], lspci=opts.get("lspci"),
                                   **{k: v for k, v in opts.items() if k == "pci_root"})
        snap.acs = acs_rung(snap.acs_facts, serving)
    driver = driver_rung(facts, serving)
    stored = facts.state.p2p
    fresh = verdict_applies(stored, facts, [g.uuid for g in serving]) and stored.verdict != "not_applicable"
    if look_for_torch and not fresh and driver.status != "fail":
        from hostctl.gpu.harness import find_torch_python

        snap.torch = opts.get("torch_python") or find_torch_python()
    return snap


# ---------------------------------------------------------------- deciding (pure)


def decide(config: Config, snap: GpuSnapshot, *, hostctl_bin: str | None = None, boot: bool = False,
           adapter: NvmlAdapter | None = None, p2p_options: dict | None = None) -> Assessment:
    """The gpu part's actions on this snapshot. `adapter` is what the power actions will set
    through (nothing is called on it here)."""
    facts = snap.facts
    plan = build_plan(config, facts)
    d = Assessment("gpu")
    adapter = adapter or NvmlAdapter()
    if boot:
        if snap.driver:
            d.add(Settled(id="gpu/driver", what=snap.driver))
        _power(d, plan.power.gpus, facts, adapter)
        if not plan.power.gpus or all(s.action == "none" for s in plan.power.gpus):
            d.add(Skipped(id="gpu/power", reason="the profile sets no power limits"))
        return d

    wanted = configured(config)
    if wanted and facts.gpus.available:
        validate_power(plan.power.gpus)  # bad input changes nothing, the unit included
    if wanted:
        _unit(d, config, plan, snap, paths.hostctl_for_units(hostctl_bin))
    else:
        d.add(Skipped(id="gpu/power-unit", reason="the profile sets no power limits: no boot unit needed"))

    if not facts.gpus.available:
        d.add(Skipped(id="gpu", reason=f"no driver ({facts.gpus.reason}): power limits and the P2P check skipped"
                      + ("; the boot unit applies the limits once the driver loads" if wanted else "")))
        return d

    if wanted:
        _power(d, plan.power.gpus, facts, adapter)
        off = [g.index for g in facts.gpus.devices if g.persistence_mode is False]
        if off:
            d.add(Note(id="gpu/power", message=f"persistence mode is off on GPU(s) {', '.join(map(str, off))}: limits may be "
                       "lost when the driver unloads between clients; enable nvidia-persistenced"))
    else:
        d.add(Skipped(id="gpu/power", reason="the profile sets no power limits"))
    _p2p(d, facts, plan, snap, p2p_options or {})
    return d


def _unit(d: Assessment, config: Config, plan: Plan, snap: GpuSnapshot, hostctl_bin: str) -> None:
    """hostctl-power.service in /etc/systemd/system, enabled for multi-user.target: `systemctl
    enable` when systemd runs the host, else the wants/ symlink systemctl would make."""
    # Like the runtime unit, the boot unit reads the installed profile (`provision --only system`
    # puts it there), so both units always act on one profile whatever --config provision got.
    problem = boot_code.problem(snap.exec_chain) if snap.exec_chain is not None else None
    if isinstance(problem, RefusedError):
        raise problem  # root would run code someone else can change at every boot: no unit
    file_edit.refuse_links({UNIT_PATH: snap.files.links.get(UNIT_PATH)})
    text = render_power_unit(plan, hostctl_bin=hostctl_bin, config_path=INSTALLED_PROFILE)
    current = text_of(snap.files.files.get(UNIT_PATH))
    changed = current != text
    why = "NVML forgets power limits at every boot: this unit sets them again (`provision --only gpu --boot`)"
    if changed:
        target = paths.system_path(UNIT_PATH)
        d.add(Action("gpu/power-unit", f"write {UNIT_PATH} ({len(text.splitlines())} lines, "
                     f"{'replacing a different one' if current is not None else 'new'})",
                     run=lambda: write_file(target, text, mode=0o644) and None,
                     diff=file_edit.diff(UNIT_PATH, current, text), changes=UNIT_PATH, why=why, writes=UNIT_PATH))
    else:
        d.add(Settled(id="gpu/power-unit", what=f"{UNIT_PATH} is current"))
    if problem is not None or (snap.exec_chain is None and snap.files.present.get(hostctl_bin) is False):
        d.add(Note(id="gpu/power-unit", message=f"the unit calls {hostctl_bin}, which does not exist, so it would fail at boot: "
                   f"{boot_code.INSTALL_ROUTE} (`provision --only system` refuses until it exists)", severity="warn"))
    installed = snap.files.files.get(INSTALLED_PROFILE)
    if installed is None or (snap.source_profile is not None and installed != snap.source_profile):
        what = "does not exist" if installed is None else f"differs from {config.source}"
        d.add(Note(id="gpu/power-unit", message=f"the unit applies the limits of {INSTALLED_PROFILE} at boot, which {what}: "
                   "run `hostctl provision --only system` to install this profile there"))

    enable_why = "so systemd starts it at every boot (multi-user.target wants it)"
    if snap.files.systemd_running:
        if changed:
            d.add(command("gpu/power-unit/daemon-reload", ["systemctl", "daemon-reload"], timeout=60,
                          changes="the running systemd", why="make systemd read the new unit file"))
        if snap.files.enabled.get(UNIT_NAME):
            d.add(Settled(id="gpu/power-unit/enable", what=f"{UNIT_NAME} is enabled"))
        else:
            d.add(command("gpu/power-unit/enable", ["systemctl", "enable", UNIT_NAME], timeout=60,
                          changes=UNIT_NAME, why=enable_why))
        return
    # No systemd running (a container, a chroot, a test sysroot): make the link systemctl would.
    if snap.files.links.get(WANTS_LINK) == UNIT_PATH:
        d.add(Settled(id="gpu/power-unit/enable", what=f"enabled ({WANTS_LINK})"))
        return
    link = paths.system_path(WANTS_LINK)

    def _link() -> None:
        link.parent.mkdir(parents=True, exist_ok=True)
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(UNIT_PATH)

    d.add(Action("gpu/power-unit/enable", f"ln -sf {UNIT_PATH} {WANTS_LINK} (systemd is not running here, so no "
                 "systemctl)", run=_link, argv=("ln", "-sf", UNIT_PATH, WANTS_LINK), changes=WANTS_LINK,
                 why=enable_why))


def _power(d: Assessment, settings: list[PowerSetting], facts: HostFacts, adapter: NvmlAdapter) -> None:
    validate_power(settings)
    by_index = {g.index: g for g in facts.gpus.devices}
    to_set = [s for s in settings if s.action == "set"]
    for s in settings:
        step = f"gpu/power/{s.index}"
        if s.action == "none":
            d.add(Skipped(id=step, reason="the profile sets no limit for this GPU"))
        elif s.action == "keep":
            enforced = by_index[s.index].power.enforced_w if s.index in by_index else None
            text = f"{s.desired_w:g} W already set ({_range_text(s)})" + (
                f"; the driver enforces {enforced:g} W" if enforced is not None else "")
            if enforced is None or abs(enforced - s.desired_w) <= TOLERANCE_W:
                d.add(Settled(id=step, what=text))
            else:
                d.add(Note(id=step, message=text + ": another limiter is lower"))
        elif s.action == "set":
            d.add(Action(step, f"NVML set power limit {s.current_w:g} W -> {s.desired_w:g} W ({_range_text(s)}) on "
                         f"{s.uuid} (nvmlDeviceSetPowerManagementLimit {_mw(s.desired_w)} mW, like `nvidia-smi -i "
                         f"{s.uuid} -pl {s.desired_w:g}`), then read back the enforced limit",
                         run=_set_power(s, to_set if s is to_set[0] else [s], adapter),
                         changes=f"GPU {s.index} ({s.uuid}) power limit",
                         why=f"the profile asks for {s.desired_w:g} W (gpu.power_limit_w / gpu.power_limits_w)"))


def _set_power(s: PowerSetting, check: list[PowerSetting], adapter: NvmlAdapter) -> Callable[[], None]:
    """Set one GPU's limit. The first set action checks the live range (and identity) of every
    GPU this run sets before touching any: the facts can be older than the driver's view."""

    def _run() -> None:
        try:
            adapter.init()
        except NvmlUnavailable as exc:
            raise FailedError(f"gpu/power/{s.index}: cannot open NVML to set the limit: {exc}") from None
        try:
            live_invalid = []
            for c in check:
                h = adapter.handle(c.index)
                if adapter.uuid(h) != c.uuid:
                    raise FailedError(f"GPU {c.index} is {adapter.uuid(h)} now, not {c.uuid} as the facts said; nothing "
                                      "was changed", fix="re-run provision (the GPUs were re-enumerated)")
                lo, hi = adapter.power_constraints_mw(h)
                if not lo <= _mw(c.desired_w) <= hi:
                    live_invalid.append(f"GPU {c.index} ({c.uuid}): {c.desired_w:g} W requested, this GPU accepts "
                                        f"{lo / 1000:g}-{hi / 1000:g} W")
            if live_invalid:
                raise InputError("power limit outside the GPU's own range; nothing was changed", details=live_invalid,
                                 fix="set gpu.power_limit_w inside the range shown")
            h, mw = adapter.handle(s.index), _mw(s.desired_w)
            try:
                adapter.set_power_limit_mw(h, mw)
            except adapter.errors as exc:
                if adapter.is_no_permission(exc):
                    raise FailedError(f"gpu/power/{s.index}: NVML refused to set {s.desired_w:g} W: setting a power "
                                      "limit needs root (run provision with sudo)") from None
                raise FailedError(f"gpu/power/{s.index}: NVML refused to set {s.desired_w:g} W on {s.uuid}: {exc}") \
                    from None
            limit, enforced = adapter.power_limit_mw(h), adapter.power_enforced_mw(h)
            if abs(enforced - mw) > READBACK_TOLERANCE_MW:
                raise FailedError(f"gpu/power/{s.index}: set {s.desired_w:g} W but the driver enforces "
                                  f"{enforced / 1000:g} W (configured limit reads {limit / 1000:g} W): another limiter "
                                  "overrides it", details=[f"read back: limit {limit / 1000:g} W, enforced "
                                                           f"{enforced / 1000:g} W"])
        finally:
            try:
                adapter.shutdown()
            except adapter.errors:
                pass

    return _run


def _p2p(d: Assessment, facts: HostFacts, plan: Plan, snap: GpuSnapshot, opts: dict) -> None:
    from hostctl.facts.state import P2P_FILE
    from hostctl.gpu.p2p import (driver_rung, iommu_rung, recommendations, run_ladder, store_verdict, topology_rung,
                                 verdict_applies)

    serving = serving_gpus(facts, plan)
    uuids = [g.uuid for g in serving]
    stored = facts.state.p2p
    state_file = f"{paths.STATE_DIR}/{P2P_FILE}"
    if len(serving) < 2:
        if verdict_applies(stored, facts, uuids) and stored.verdict == "not_applicable":
            d.add(Settled(id="gpu/p2p", what=f"not applicable: {len(serving)} GPU, no peer to talk to (stored {state_file})"))
            return
        verdict = P2PVerdict(verdict="not_applicable", measured_at=_now(), driver_version=facts.gpus.driver_version,
                             kernel_cmdline=facts.kernel.cmdline, gpu_uuids=uuids,
                             detail=f"{len(serving)} GPU: no collectives run")
        d.add(Action("gpu/p2p/verdict", f"write {state_file}: P2P not applicable ({len(serving)} GPU, no peer to "
                     "talk to)", run=lambda: store_verdict(verdict) and None, changes=state_file,
                     why="the plan reads the stored verdict"))
        return

    driver = driver_rung(facts, serving)
    rungs = [topology_rung(facts, serving), driver, iommu_rung(facts)] + ([snap.acs] if snap.acs is not None else [])
    for rung in rungs:  # rungs 1-4 only read: they are reported as data, the plan's verdict is rung 5
        d.add(Note(id=f"gpu/p2p/{rung.name}", message=rung.summary, severity="info" if rung.status == "ok" else "warn",
                   data=rung.to_dict()))
    if driver.status == "fail":
        d.add(Skipped(id="gpu/p2p/functional", reason="not run: the driver refuses P2P, so NCCL cannot use it and the plan "
                      "keeps it off (NCCL_P2P_DISABLE=1)"))
        if driver.fix:
            d.add(Note(id="gpu/p2p", message=driver.fix))
        return
    if verdict_applies(stored, facts, uuids) and stored.verdict != "not_applicable":
        text = (f"stored verdict {stored.verdict} from {stored.measured_at} still applies (same driver, kernel command "
                "line and GPUs); not measured again")
        d.add(Settled(id="gpu/p2p/functional", what=text))
        d.add(Note(id="gpu/p2p/verdict", message=f"P2P verdict {stored.verdict}: {stored.detail or ''}".rstrip(": "),
                   severity="info" if stored.verdict == "ok" else "warn", data=stored.model_dump()))
        for rec in recommendations(stored, facts):
            d.add(Note(id="gpu/p2p", message=rec))
        if stored.verdict == "inconclusive":
            d.failures.append(f"gpu/p2p/functional: the functional check was inconclusive: {stored.detail}")
        return
    if snap.torch is not None and snap.torch.python is None:
        d.add(Skipped(id="gpu/p2p/functional", reason=f"cannot run the functional check: {snap.torch.why}"))
        d.add(Note(id="gpu/p2p/functional", message="install PyTorch for the host's Python, or set HOSTCTL_TORCH_PYTHON, then "
                   "re-run `hostctl provision --only gpu`; P2P stays off until then"))
        return
    from hostctl.gpu.p2p import DEFAULT_TIMEOUT_S, configured_env

    env = configured_env(facts, serving)
    timeout = opts.get("timeout_s", DEFAULT_TIMEOUT_S)
    run_opts = {k: v for k, v in opts.items() if k not in ("lspci", "pci_root")}
    if snap.torch is not None:
        run_opts["torch_python"] = snap.torch

    def _measure() -> None:
        read = facts.model_copy(update={"acs": snap.acs_facts}) if snap.acs_facts is not None else facts
        ladder = run_ladder(read, serving, measure=True, recheck=True,
                            **({} if snap.acs_facts is not None else {"lspci": (None, "not read this round")}), **run_opts)
        if ladder.verdict is None:
            rung = ladder.rung("functional")
            raise FailedError(f"gpu/p2p/functional: {rung.summary if rung else 'no verdict'}",
                              fix=rung.fix if rung else None)

    d.add(Action("gpu/p2p/functional",
                 f"run an all-reduce on GPUs {', '.join(str(g.index) for g in serving)} with "
                 f"{' '.join(f'{k}={v}' for k, v in env.items())}, then with NCCL_P2P_DISABLE=1, each killed after "
                 f"{timeout:g} s, and write {state_file}",
                 run=_measure, changes=state_file,
                 why="the plan turns NCCL P2P on only with a fresh functional verdict: "
                     + ("none is stored" if stored is None else "the stored one was measured under another driver, "
                        "kernel command line or GPUs")))


def _now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def boot_driver(adapter: NvmlAdapter, facts: HostFacts, *, timeout_s: float = DRIVER_WAIT_S,
                version_file: Path = NVIDIA_VERSION) -> tuple[HostFacts, str]:
    """Boot mode: wait (bounded) for the driver; the facts with the GPUs it shows, and how it came up."""
    from hostctl.facts.gpu import probe_gpus

    if facts.gpus.available:
        return facts, f"driver {facts.gpus.driver_version} ready"
    ready, waited, why = wait_for_driver(adapter, timeout_s=timeout_s, version_file=version_file)
    if not ready:
        raise FailedError(f"gpu/driver: the NVIDIA driver did not come up within {timeout_s:g} s: {why}")
    facts = facts.model_copy(update={"gpus": probe_gpus(adapter)})
    return facts, f"driver {facts.gpus.driver_version} ready after {waited:.0f} s"


def text_lines(items: list, *, dry_run: bool, ran: set[str] = frozenset()) -> list[str]:
    """The gpu part's text, one line per item: ok, changed, would, skip, warn, fail."""
    out = []
    for i in items:
        if isinstance(i, Action):
            status = "would" if dry_run else ("changed" if i.id in ran else "pending")
            out.append(f"{status:<8} {i.id}: {i.describe}")
        elif isinstance(i, Settled):
            out.append(f"{'ok':<8} {i.id}: {i.what}")
        elif isinstance(i, Skipped):
            out.append(f"{'skip':<8} {i.id}: {i.reason}")
        elif isinstance(i, Note):
            status = "warn" if i.severity == "warn" else "ok"
            if i.data and "status" in i.data and "evidence" in i.data:  # a P2P rung
                status = {"ok": "ok", "warn": "warn", "fail": "warn", "unknown": "unknown", "skip": "skip"}.get(
                    i.data["status"], status)
            out.append(f"{status:<8} {i.id}: {i.message}")
            if i.data and i.data.get("evidence"):
                out += [f"           {e}" for e in i.data["evidence"] if e]
                if i.data.get("fix"):
                    out.append(f"           fix: {i.data['fix']}")
    return out


