"""System settings (`provision --only system`): the host profile and the systemd units hostctl
renders, installed under /etc and enabled, so the host comes back by itself after a reboot.

Owned here: /etc/hostctl/hostctl.toml (plus a recipe the profile names by a relative path,
at the same place beside it), /etc/systemd/system/hostctl-runtime.service, its enablement,
and the daemon-reload that makes a running systemd see it. The unit calls the profile at its
installed path, so what runs at boot does not depend on where provision was started from.
The GPU power unit belongs to `provision --only gpu` (hostctl/provision/gpu.py); run that with
--config /etc/hostctl/hostctl.toml after this, so both units read the installed profile.

Every file is compared with what it should hold and written only when it differs; a unit is
enabled only when `systemctl is-enabled` does not already say so. A re-run is a no-op.
Under HOSTCTL_SYSROOT (tests) files land in that tree and systemctl works on it offline
(`systemctl --root`), so the running systemd is never touched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from hostctl import paths, runner
from hostctl.atomic import write_atomic
from hostctl.config import Config, recipe_path
from hostctl.errors import FailedError, InputError
from hostctl.facts.model import HostFacts
from hostctl.plan.model import Plan
from hostctl.provision.actions import Action, command
from hostctl.service.render import INSTALLED_HOSTCTL, INSTALLED_PROFILE, render_files

UNIT_DIR = PurePosixPath("/etc/systemd/system")
PROFILE_DIR = PurePosixPath(INSTALLED_PROFILE).parent
# The units this part installs (hostctl-power.service is the gpu part's).
UNITS = ("hostctl-runtime.service",)
SYSTEMCTL_TIMEOUT = 60


@dataclass
class SystemResult:
    actions: list[Action] = field(default_factory=list)
    applied: bool = False
    notes: list[str] = field(default_factory=list)


def reload_deferred(plan: Plan, facts: HostFacts | None) -> str | None:
    """Why `systemctl daemon-reload` must wait, or None. A reload while a GPU container runs can
    take its GPUs away (the engine's systemd cgroup driver rewrites the container's device
    cgroup; "Failed to initialize NVML: Unknown Error" inside: NVIDIA/nvidia-container-toolkit#48),
    so with hostctl's GPU runtime up the unit is written and enabled without a reload."""
    if facts is None or not plan.runtime.gpu_uuids or not facts.engine.available:
        return None
    running = sorted(c.name for c in facts.engine.containers
                     if c.state == "running" and c.labels.get("io.hostctl.profile"))
    if not running:
        return None
    driver = facts.engine.cgroup_driver or "unknown"
    return (f"systemd was not reloaded: the GPU runtime {', '.join(running)} is up, and a daemon-reload can take "
            f"its GPUs away (engine cgroup driver: {driver}; NVIDIA/nvidia-container-toolkit#48). Run "
            "`systemctl daemon-reload` after `hostctl down`; the unit file is in place and enabled")


def _systemctl(*args: str) -> list[str]:
    root = paths.sysroot()
    return ["systemctl", *([] if root == Path("/") else [f"--root={root}"]), *args]


def _systemd_running() -> bool:
    """A live systemd to reload: only for the real root, and only when systemd is PID 1."""
    return paths.sysroot() == Path("/") and Path("/run/systemd/system").is_dir()


def desired_files(config: Config, plan: Plan, *, hostctl_bin: str = INSTALLED_HOSTCTL) -> dict[PurePosixPath, bytes]:
    """Host path -> the exact bytes it must hold."""
    files: dict[PurePosixPath, bytes] = {}
    source = Path(config.source)
    files[PurePosixPath(INSTALLED_PROFILE)] = source.read_bytes()
    ref = config.profile.recipe
    recipe = recipe_path(ref, source.parent)
    if recipe.parent != paths.recipes_dir() and not Path(ref).is_absolute():
        # A relative recipe path is resolved from the profile's folder: put the recipe at the
        # same place beside the installed profile, so the installed profile loads the same recipe.
        rel = PurePosixPath(ref)
        if ".." in rel.parts:
            raise InputError(
                f"recipe {ref!r} is a relative path that leaves the profile's folder; the installed profile "
                f"in {PROFILE_DIR} could not find it",
                fix="name a bundled recipe, use an absolute path, or keep the recipe beside the profile",
            )
        files[PROFILE_DIR / rel] = recipe.read_bytes()
    rendered = render_files(plan, hostctl_bin=hostctl_bin, config_path=INSTALLED_PROFILE)
    for unit in UNITS:
        files[UNIT_DIR / unit] = rendered[unit].encode()
    return files


def _file_action(host_path: PurePosixPath, data: bytes) -> Action | None:
    target = paths.system_path(host_path)
    try:
        if target.read_bytes() == data:
            return None
        verb = "replace"
    except FileNotFoundError:
        verb = "create"

    def _run() -> None:
        write_atomic(target, data, mode=0o644)

    return Action(step=f"system/file{host_path}", describe=f"{verb} {host_path} ({len(data)} bytes, mode 0644)", run=_run)


def _enabled(unit: str) -> bool:
    res = runner.run(_systemctl("is-enabled", unit), timeout=SYSTEMCTL_TIMEOUT)
    return res.ok and res.stdout.strip() == "enabled"


def system_actions(config: Config, plan: Plan, *, hostctl_bin: str = INSTALLED_HOSTCTL,
                   defer_reload: bool = False) -> list[Action]:
    """The actions still needed to make /etc match the plan (empty when it already does).
    defer_reload: no daemon-reload, and `enable` with --no-reload (see reload_deferred)."""
    if plan.errors:
        raise FailedError(
            "the plan has errors; no unit was installed",
            details=[f"[{p.area}] {p.message}" + (f" (fix: {p.fix})" if p.fix else "") for p in plan.errors],
            fix="fix the problems above (`hostctl plan` explains each decision)",
        )
    if not paths.system_path(hostctl_bin).is_file():
        raise FailedError(
            f"the units would call {hostctl_bin}, which does not exist: they would fail at every boot",
            fix=f"link the installed hostctl there, e.g. `ln -s \"$(command -v hostctl)\" {hostctl_bin}`",
        )
    if runner.run(["systemctl", "--version"], timeout=SYSTEMCTL_TIMEOUT).missing:
        raise FailedError("systemctl is not installed: hostctl's units need systemd",
                          fix="run hostctl on a systemd host (Debian, Ubuntu, Fedora, ...)")
    actions = [a for p, data in desired_files(config, plan, hostctl_bin=hostctl_bin).items()
               if (a := _file_action(p, data)) is not None]
    if any(a.step.startswith(f"system/file{UNIT_DIR}/") for a in actions) and _systemd_running() and not defer_reload:
        actions.append(command("system/daemon-reload", ["systemctl", "daemon-reload"], timeout=SYSTEMCTL_TIMEOUT))
    for unit in UNITS:
        if not _enabled(unit):
            # `systemctl enable` reloads systemd by itself unless told not to.
            enable = ["--no-reload", "enable", unit] if defer_reload and _systemd_running() else ["enable", unit]
            actions.append(command(f"system/enable/{unit}", _systemctl(*enable), timeout=SYSTEMCTL_TIMEOUT))
    return actions


def verify_system(config: Config, plan: Plan, *, hostctl_bin: str = INSTALLED_HOSTCTL) -> list[str]:
    """What still differs after acting (empty when /etc matches the plan)."""
    wrong = []
    for host_path, data in desired_files(config, plan, hostctl_bin=hostctl_bin).items():
        target = paths.system_path(host_path)
        if not target.is_file() or target.read_bytes() != data:
            wrong.append(f"{host_path} does not hold the rendered content")
    wrong += [f"{unit} is not enabled" for unit in UNITS if not _enabled(unit)]
    return wrong


def provision_system(config: Config, plan: Plan, *, dry_run: bool, hostctl_bin: str = INSTALLED_HOSTCTL,
                     facts: HostFacts | None = None) -> SystemResult:
    deferred = reload_deferred(plan, facts)
    result = SystemResult(actions=system_actions(config, plan, hostctl_bin=hostctl_bin, defer_reload=bool(deferred)))
    if deferred and any(a.step.startswith("system/") for a in result.actions):
        result.notes.append(deferred)
    if dry_run or not result.actions:
        return result
    for action in result.actions:
        action.run()
    result.applied = True
    wrong = verify_system(config, plan, hostctl_bin=hostctl_bin)
    if wrong:
        raise FailedError("system settings did not take effect", details=wrong)
    return result
