"""The system part of `hostctl provision` (`--only system`): the host profile and the systemd
units hostctl renders, installed under /etc and enabled, so the host comes back by itself after a
reboot. In the act protocol: read_system() reads what is there, decide() is pure.

Owned here: /etc/hostctl/hostctl.toml (plus a recipe the profile names by a relative path,
at the same place beside it), /etc/systemd/system/hostctl-runtime.service, its enablement,
hostctl-metrics.service and .timer (installed, left for the user to enable), and the daemon-reload that makes a running systemd see it. The unit calls the profile at its
installed path, so what runs at boot does not depend on where provision was started from.
The GPU power unit belongs to the gpu part (hostctl/provision/gpu.py), which runs after this
one and reads the installed profile too.

A file is written only when its bytes differ from what it must hold; a unit is enabled only when
`systemctl is-enabled` does not already say so. A re-run decides nothing. Under HOSTCTL_SYSROOT
(tests) files land in that tree and systemctl works on it offline (`systemctl --root`), so the
running systemd is never touched.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from hostctl import paths
from hostctl.act.actions import Action, Assessment, Note, Settled, command
from hostctl.safefs import write_file
from hostctl.safeload import read_text
from hostctl.config import Config, recipe_path
from hostctl.errors import FailedError, InputError
from hostctl.facts.records import HostFacts
from hostctl.facts.executable import ExecChain, read_exec_chain
from hostctl.facts.sysfiles import LocalReader, ManagedFiles, Reader, read_managed, systemctl_argv, text_of
from hostctl.plan.records import Plan
from hostctl.provision import files as file_edit
from hostctl.provision import boot_code
from hostctl.service.render import INSTALLED_HOSTCTL, INSTALLED_PROFILE, render_files

UNIT_DIR = PurePosixPath("/etc/systemd/system")
PROFILE_DIR = PurePosixPath(INSTALLED_PROFILE).parent
# The units this part installs and enables (hostctl-power.service is the gpu part's).
UNITS = ("hostctl-runtime.service",)
# Installed, not enabled: the metrics timer is the user's choice (README "Watching the host").
INSTALLED_UNITS = ("hostctl-metrics.service", "hostctl-metrics.timer")
SYSTEMCTL_TIMEOUT = 60


def desired_files(config: Config, plan: Plan, *, hostctl_bin: str = INSTALLED_HOSTCTL) -> dict[PurePosixPath, bytes]:
    """Host path -> the exact bytes it must hold (the profile as validated, the recipe read through
    safefs from beside the profile's real path, the units rendered from the plan)."""
    files: dict[PurePosixPath, bytes] = {}
    source = Path(config.source)
    files[PurePosixPath(INSTALLED_PROFILE)] = config.source_text.encode()
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
        files[PROFILE_DIR / rel] = read_text(recipe, "recipe").encode()
    rendered = render_files(plan, hostctl_bin=hostctl_bin, config_path=INSTALLED_PROFILE)
    for unit in UNITS + INSTALLED_UNITS:
        files[UNIT_DIR / unit] = rendered[unit].encode()
    return files


class SystemSnapshot:
    """What the system part decides on: the bytes each file must hold (None when the plan has
    errors: nothing is rendered then) and what the host holds now. A plain class: one look's
    reads, handed to decide() and never written anywhere."""

    def __init__(self, *, desired: dict[PurePosixPath, bytes] | None, files: ManagedFiles, sysroot: str,
                 hostctl_bin: str = INSTALLED_HOSTCTL, reload_deferred: str | None = None,
                 exec_chain: ExecChain | None = None) -> None:
        self.desired, self.files, self.sysroot, self.hostctl_bin = desired, files, sysroot, hostctl_bin
        self.reload_deferred = reload_deferred  # why systemd must not be reloaded now (see reload_deferred)
        # The code behind hostctl_bin (owners and modes); None where the reader is another
        # machine's (`verify --host`), which then checks only that the file exists.
        self.exec_chain = exec_chain


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


def read_system(config: Config, plan: Plan, reader: Reader, *, hostctl_bin: str = INSTALLED_HOSTCTL,
                facts: HostFacts | None = None) -> SystemSnapshot:
    desired = None if plan.errors else desired_files(config, plan, hostctl_bin=hostctl_bin)
    owned = [str(p) for p in desired or {}]
    files = read_managed(reader, files=owned, links=owned, units=list(UNITS), present=[hostctl_bin])
    chain = read_exec_chain(hostctl_bin) if isinstance(reader, LocalReader) else None
    return SystemSnapshot(desired=desired, files=files, sysroot=reader.sysroot, hostctl_bin=hostctl_bin,
                          reload_deferred=reload_deferred(plan, facts), exec_chain=chain)


def _why(host_path: PurePosixPath) -> str:
    if str(host_path) == INSTALLED_PROFILE:
        return "the boot units read the installed profile, whatever --config provision was given"
    if host_path.name.startswith("hostctl-metrics."):
        return f"{host_path.name} writes `hostctl metrics` for node_exporter every minute once enabled (not enabled here)"
    if host_path.parent == UNIT_DIR:
        return f"{host_path.name} starts the runtime at boot, after the cache mounts (RequiresMountsFor)"
    return "the recipe the installed profile names by a relative path, beside it"


def _file_action(host_path: PurePosixPath, current: bytes | None, data: bytes) -> Action:
    target = paths.system_path(host_path)
    verb = "create" if current is None else "replace"
    old, new = text_of(current), text_of(data)
    diff = file_edit.diff(str(host_path), old, new) if new is not None else None
    return Action(step=f"system/file{host_path}", describe=f"{verb} {host_path} ({len(data)} bytes, mode 0644)",
                  run=lambda: write_file(target, data, mode=0o644) and None, diff=diff, changes=str(host_path),
                  why=_why(host_path), writes=str(host_path))


def decide(config: Config, plan: Plan, snap: SystemSnapshot) -> Assessment:
    """The actions still needed to make /etc match the plan (none when it already does)."""
    if plan.errors or snap.desired is None:
        raise FailedError(
            "the plan has errors; no unit was installed",
            details=[f"[{p.area}] {p.message}" + (f" (fix: {p.fix})" if p.fix else "") for p in plan.errors],
            fix="fix the problems above (`hostctl plan` explains each decision)",
        )
    if snap.exec_chain is not None:
        # Root runs this at every boot: refused while anyone else can change it (boot_code).
        refused = boot_code.problem(snap.exec_chain)
        if refused is not None:
            raise refused
    elif not snap.files.present.get(snap.hostctl_bin):
        raise FailedError(
            f"the units would call {snap.hostctl_bin}, which does not exist: they would fail at every boot",
            fix=boot_code.INSTALL_ROUTE,
        )
    if not snap.files.systemctl:
        raise FailedError("systemctl is not installed: hostctl's units need systemd",
                          fix="run hostctl on a systemd host (Debian, Ubuntu, Fedora, ...)")
    file_edit.refuse_links({str(p): snap.files.links.get(str(p)) for p in snap.desired})
    d = Assessment("system")
    units_changed = False
    for host_path, data in snap.desired.items():
        current = snap.files.files.get(str(host_path))
        if current == data:
            d.add(Settled(id=f"system/file{host_path}", what=f"{host_path} is current"))
            continue
        d.add(_file_action(host_path, current, data))
        units_changed |= host_path.parent == UNIT_DIR
    defer = snap.reload_deferred if snap.files.systemd_running else None
    if units_changed and snap.files.systemd_running and not defer:
        d.add(command("system/daemon-reload", ["systemctl", "daemon-reload"], timeout=SYSTEMCTL_TIMEOUT,
                      changes="the running systemd", why="make systemd read the new unit files"))
    for unit in UNITS:
        if snap.files.enabled.get(unit):
            d.add(Settled(id=f"system/enable/{unit}", what=f"{unit} is enabled"))
        else:
            # `systemctl enable` reloads systemd by itself unless told not to
            enable = ["--no-reload", "enable", unit] if defer else ["enable", unit]
            d.add(command(f"system/enable/{unit}", systemctl_argv(snap.sysroot, *enable),
                          timeout=SYSTEMCTL_TIMEOUT, changes=unit, why="so systemd starts it at every boot"))
    if defer and d.actions:
        d.add(Note(id="system/daemon-reload", message=defer))
    return d


def text(d: Assessment, *, dry_run: bool, ran: list[Action]) -> str:
    """As `provision --only system` has always printed: one line per change, or nothing to change."""
    shown = d.actions if dry_run else ran
    if not shown:
        return "system: nothing to change\n"
    return "".join(("would: " if dry_run else "done: ") + a.describe + "\n" for a in shown)
