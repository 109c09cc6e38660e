"""The storage part of provision: its reading (disks, mounts, swap, memory and the directories
the plan names, then the system files it decides on, with each disk locked for a real run), its
plan text, its refusal and consent requests; and provision_storage(), which runs this part alone
through the one executor (hostctl.act): decide, print, consent, act, read the host again and
decide again until nothing is left to do. The decisions themselves are storage.py's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple, TextIO

from hostctl.act import consent
from hostctl.act.actions import Action, Assessment
from hostctl.act.executor import Context, Executor
from hostctl.act.report import Report
from hostctl.bytesizes import fmt_bytes
from hostctl.config import Config
from hostctl.errors import HostctlError, RefusedError
from hostctl.facts.records import HostFacts
from hostctl.facts.sysfiles import LocalReader, Reader, read_storage_files
from hostctl.provision import fstab, storage, sysctl
from hostctl.provision.executor import COMMAND, SCHEMA, disk_lock, provision_lock
from hostctl.provision.converged import record_converged
from hostctl.plan.requests import fact_requests
from hostctl.provision.storage import (
    STATUS_WORDS,
    DriveVerdict,
    StorageOptions,
    StorageProvision,
    SystemFiles,
    add_drive_problems,
    layout,
    role_dirs,
)
from hostctl.plan.records import Plan
from hostctl.safefs import sudo_owner


class StorageOutcome(NamedTuple):
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


def add_refusals(plan: Plan, config: Config, facts: HostFacts, *, snapshot: bool) -> Plan:
    """The plan with what `provision --only storage --dry-run` would refuse as its problems
    (storage.drive_problems): on the host, with the files the run would edit read as they are; on
    a snapshot of another host (snapshot), on the facts alone."""
    files = None if snapshot else read_system_files(config, facts)
    return add_drive_problems(plan, config, facts, snapshot=snapshot, files=files)


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


def refusal(sp: StorageProvision, ran: int) -> RefusedError:
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


def consent_request(d: DriveVerdict) -> consent.Request:
    where = d.disk.path if d.disk else "?"
    what = (f"ERASES {d.found.removeprefix('erase: ')} on {where}" if d.status == "erase"
            else f"writes a partition table or filesystems on {where}")
    return consent.Request(drive=d.drive.name, identity=str(d.drive.identity), answer=d.drive.identity.value,
                           what=what)


class StoragePart:
    name = "storage"
    record = True

    def __init__(self, config: Config, opts: StorageOptions, *,
                 read_facts: Callable[[Config], HostFacts] | None = None):
        self.config, self.opts = config, opts
        self.read_facts = read_facts or storage_facts
        self.locked: set[str] = set()

    def read(self, ctx: Context) -> Any:
        facts = self.read_facts(self.config)
        if not ctx.dry_run:
            for disk in storage.resolve_drives(self.config, facts)[0].values():
                if disk.path not in self.locked:  # held until the whole run ends
                    ctx.held.enter_context(disk_lock(disk.path))
                    self.locked.add(disk.path)
        return facts, read_system_files(self.config, facts)

    def decide(self, snapshot: Any) -> Assessment:
        facts, files = snapshot
        return storage.decide(self.config, facts, files, self.opts)

    def plan_text(self, d: Assessment, round_no: int) -> str:
        if round_no == 1:
            return plan_text(d.detail)
        return plan_text(d.detail, heading="re-planned with the partitions the kernel has loaded now:")

    def done_text(self, first: Assessment, final: Assessment, ran: list[Action], *, dry_run: bool) -> str:
        if dry_run:
            return ("storage: no changes needed\n" if not first.actions else
                    f"dry run: {len(first.actions)} action(s) shown, nothing was changed\n")
        return ("storage: no changes\n" if not ran else
                f"storage: {len(ran)} action(s) run; verified: a fresh look at the host needs nothing more\n")

    def refusal(self, d: Assessment, ran: int) -> HostctlError:
        return refusal(d.detail, ran)

    def consent(self, d: Assessment) -> list[consent.Request]:
        return [consent_request(v) for v in d.detail.drives if v.destructive]


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
    opts = opts or StorageOptions(erase=tuple(erase), owner=sudo_owner())
    part = StoragePart(config, opts, read_facts=read_facts)
    executor = Executor(command=COMMAND, lock=provision_lock, dry_run=dry_run, yes=yes, stdin=stdin, out=out, err=err,
                        record=lambda name: record_converged(name, config) and None)
    report = executor.run([part], Report(schema_tag=SCHEMA, dry_run=dry_run))
    report.raise_for_error()
    done = report.parts[0]
    return StorageOutcome(done.changed, done.rounds, done.final.detail)
