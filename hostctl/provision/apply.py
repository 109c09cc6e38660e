"""The storage part's reading and presenting: its facts (disks, mounts, swap, memory and the
directories the plan names), the system files it decides on, the plan text people read, its
refusal and consent requests, and provision_storage(), which runs this part alone through the one
executor (provision/executor.py): decide, print, consent, act, read the host again and decide
again until nothing is left to do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TextIO

from hostctl.config import Config
from hostctl.errors import RefusedError
from hostctl.facts.model import HostFacts
from hostctl.facts.sysfiles import LocalReader, Reader, read_storage_files
from hostctl.provision import consent, fstab, sysctl
from hostctl.provision.actions import Action
from hostctl.provision.executor import MAX_ROUNDS, run_actions  # noqa: F401  (the storage tests' entry points)
from hostctl.plan.requests import fact_requests
from hostctl.provision.storage import (
    STATUS_WORDS,
    DriveVerdict,
    StorageOptions,
    StorageProvision,
    SystemFiles,
    layout,
    role_dirs,
)
from hostctl.safefs import sudo_owner
from hostctl.bytesizes import fmt_bytes



@dataclass
class StorageOutcome:
    changed: int  # actions run
    rounds: int
    final: StorageProvision


def storage_facts(config: Config) -> HostFacts:
    """Disks, mounts, swap, memory and the directories the storage plan names: all that storage
    decisions read (a full collect would wait on NVML and the Docker socket, every round)."""
    from hostctl.facts import collect_storage
    from hostctl.plan import alias_requests

    return collect_storage(fact_requests(config), alias_requests(config),
                           [(d.identity.kind, d.identity.value) for d in config.profile.drives])


def read_system_files(config: Config, facts: HostFacts, reader: Reader | None = None) -> SystemFiles:
    plain = [directory for _, directory in role_dirs(config, facts)[1]]
    return read_storage_files(reader or LocalReader(), fstab.FSTAB, sysctl.SYSCTL_FILE, plain)


# ---------------------------------------------------------------- presenting


def _layout_text(sp: StorageProvision, name: str) -> str:
    d = next(x for x in sp.drives if x.drive.name == name).drive
    return " + ".join(f"{s.role} {fmt_bytes(s.size)}" if s.size else f"{s.fs} data (the rest) at {d.mount}"
                      for s in layout(d))


def plan_text(sp: StorageProvision, *, heading: str | None = None) -> str:
    lines = [heading or f"storage plan for profile {sp.profile} (phase {sp.phase}):"]
    n = 0

    def _action(a: Action) -> None:
        nonlocal n
        n += 1
        first, *rest = a.describe.splitlines()
        lines.append(f"    {n:>2}. {'[destructive] ' if a.destructive else ''}{first}")
        lines.extend(f"          {r}" for r in rest)

    if not sp.drives:
        lines.append("  the profile names no drives")
    for d in sp.drives:
        state = STATUS_WORDS[d.status]
        lines.append(f"  drive {d.where()}: {d.found}; {state}")
        if d.status != "refused":
            lines.append(f"    layout: {_layout_text(sp, d.drive.name)}")
        for r in d.reasons:
            lines.append(f"    refused: {r}")
        if d.fix and d.refused:
            lines.append(f"    fix: {d.fix}")
        for a in d.actions:
            _action(a)
        if d.replan:
            lines.append("    then: its partitions are read again and the rest of its plan is made")
    if sp.system:
        lines.append("  system files and directories:")
        for a in sp.system:
            _action(a)
    elif sp.replan:
        lines.append("  system files (fstab, sysctl) are planned once every drive's partitions are known")
    for note in sp.notes:
        lines.append(f"  note: {note}")
    return "\n".join(lines) + "\n"


def _refusal(sp: StorageProvision, ran: int) -> RefusedError:
    refused = sp.refused
    first = refused[0]
    message = f"drive {first.where()} refused: {'; '.join(first.reasons)}"
    if len(refused) > 1:
        message += f" (and {len(refused) - 1} more drive(s))"
    message += "; " + ("nothing was changed" if ran == 0 else f"{ran} earlier action(s) ran, nothing more was changed")
    details = []
    for i, d in enumerate(refused):
        if i:
            details += [f"drive {d.where()} refused: {r}" for r in d.reasons]
        if d.fix:
            details.append(f"fix for {d.drive.name}: {d.fix}")
    return RefusedError(message, details=details)


# ---------------------------------------------------------------- running


def _consent_request(d: DriveVerdict) -> consent.Request:
    where = d.disk.path if d.disk else "?"
    what = (f"ERASES {d.found.removeprefix('erase: ')} on {where}" if d.status == "erase"
            else f"writes a partition table or filesystems on {where}")
    return consent.Request(d.drive.name, str(d.drive.identity), d.drive.identity.value, what)


def provision_storage(
    config: Config,
    *,
    dry_run: bool = False,
    yes: bool = False,
    erase: tuple[str, ...] | list[str] = (),
    stdin: TextIO | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
    opts: StorageOptions | None = None,
    read_facts: Callable[[Config], HostFacts] = storage_facts,
) -> StorageOutcome:
    """`provision --only storage` from Python: the storage part alone through the one executor.
    Raises what the run raised (a refusal, a failed action); the StorageOutcome otherwise."""
    from hostctl.provision.executor import Executor
    from hostctl.provision.parts import StoragePart
    from hostctl.provision.record import record_converged

    opts = opts or StorageOptions(erase=tuple(erase), owner=sudo_owner())
    part = StoragePart(config, opts, read_facts=read_facts)
    executor = Executor(dry_run=dry_run, yes=yes, stdin=stdin, out=out, err=err,
                        record=lambda name: record_converged(name, config) and None)
    report = executor.run([part])
    report.raise_for_error()
    done = report.parts[0]
    return StorageOutcome(done.changed, done.rounds, done.final.detail)
