"""The parts of `hostctl provision` and their order: storage (drives, swap, fstab, mounts, cache
directories, swap sysctls), then system (the installed profile and the runtime unit, which the
boot units read), then gpu (power limits, the power unit, the P2P verdict). Each part binds its
reader (facts and files, read again every round) to its pure decide() and to the text people
read; the one executor (hostctl.act) runs them. The storage part is storage_part.py's.

A dry run decides every part before any has acted, so a later part is judged on the facts the
earlier ones would leave, as the real run judges it after they ran: the system part's plan counts
the swap the storage part would add (storage.facts_after), and the gpu part sees the profile the
system part would install. The text says when it did so. A full run judges every part that way
before the first acts (blocked_later_writes), so a later part's refusal stops it before any change.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, TextIO

from hostctl import paths
from hostctl.act.actions import Action, Assessment
from hostctl.act.executor import Context, Executor
from hostctl.act.report import PartOutcome, Report
from hostctl.bytesizes import fmt_bytes
from hostctl.config import Config
from hostctl.errors import FailedError, HostctlError, RefusedError
from hostctl.facts.records import GpuFacts, HostFacts
from hostctl.facts.sysfiles import LocalReader
from hostctl.provision.executor import COMMAND, SCHEMA, provision_lock
from hostctl.provision.converged import record_converged
from hostctl.plan.requests import fact_requests
from hostctl.provision.storage_part import StoragePart

ORDER = ("storage", "system", "gpu")


def live_facts(config: Config) -> HostFacts:
    """Every fact of this host the plan reads (provision refuses --facts: it acts on this host)."""
    from hostctl.facts import collect
    from hostctl.plan import alias_requests

    return collect(fact_requests(config), alias_paths=alias_requests(config))


class SystemPart:
    name = "system"
    record = True

    def __init__(self, config: Config, *, facts: Callable[[], HostFacts], hostctl_bin: str | None = None):
        self.config, self.facts = config, facts
        self.hostctl_bin = paths.hostctl_for_units(hostctl_bin)
        self.plan = None
        self.plan_facts: HostFacts | None = None
        self.projected: str | None = None

    def read(self, ctx: Context) -> Any:
        from hostctl.plan import build_plan
        from hostctl.provision import storage
        from hostctl.provision.system import read_system

        if self.plan is None:  # the plan is made once per run, from the facts the earlier parts left
            facts = self.facts()
            earlier = ctx.earlier.get("storage")
            if ctx.dry_run and earlier is not None and earlier.actions:
                added = storage.pending_swap_bytes(earlier.detail)
                facts = storage.facts_after(facts, earlier.detail)
                if added:
                    self.projected = (f"system: judged as after the storage part, with the {fmt_bytes(added)} of swap "
                                      "it would add")
            self.plan, self.plan_facts = build_plan(self.config, facts), facts
        return read_system(self.config, self.plan, LocalReader(), hostctl_bin=self.hostctl_bin, facts=self.plan_facts)

    def decide(self, snapshot: Any) -> Assessment:
        from hostctl.provision import system

        return system.decide(self.config, self.plan, snapshot)

    def plan_text(self, d: Assessment, round_no: int) -> str:
        return f"{self.projected}\n" if self.projected and round_no == 1 else ""

    def done_text(self, first: Assessment, final: Assessment, ran: list[Action], *, dry_run: bool) -> str:
        from hostctl.provision import system

        return system.text(first, dry_run=dry_run, ran=ran)

    def refusal(self, d: Assessment, ran: int) -> HostctlError:
        return FailedError("system part refused", details=[r.reason for r in d.refusals])

    def consent(self, d: Assessment) -> list[consent.Request]:
        return []


class GpuPart:
    name = "gpu"

    def __init__(self, config: Config, *, facts: Callable[[], HostFacts], adapter: Any = None,
                 gpus: Callable[[], GpuFacts] | None = None, boot: bool = False, hostctl_bin: str | None = None,
                 p2p_options: dict | None = None, driver_wait_s: float | None = None, version_file: Path | None = None):
        from hostctl.facts.gpu import NvmlAdapter

        self.config, self.facts = config, facts
        self.adapter = adapter or NvmlAdapter()
        self.gpus = gpus
        self.boot, self.record = boot, not boot  # a boot run applies only the limits: not the whole part
        self.hostctl_bin, self.p2p_options = paths.hostctl_for_units(hostctl_bin), p2p_options or {}
        self.driver_wait_s, self.version_file = driver_wait_s, version_file
        self.base: HostFacts | None = None
        self.driver: str | None = None

    def _gpus(self) -> GpuFacts:
        from hostctl.facts.gpu import probe_gpus

        return self.gpus() if self.gpus is not None else probe_gpus(self.adapter)

    def read(self, ctx: Context) -> Any:
        from hostctl.facts.state import probe_state
        from hostctl.provision import gpu
        from hostctl.service.render import INSTALLED_PROFILE

        first = self.base is None
        if first:
            self.base = self.facts()
            if self.boot:
                kw = {k: v for k, v in (("timeout_s", self.driver_wait_s), ("version_file", self.version_file))
                      if v is not None}
                self.base, self.driver = gpu.boot_driver(self.adapter, self.base, **kw)
        # hostctl's state (the stored P2P verdict) is read every round; the GPUs again after the
        # first look (a limit just set). With no driver at the first look there is nothing to read back.
        again = not first and self.base.gpus.available
        snap = gpu.read_gpu(self.config, self.base, LocalReader(), gpus=self._gpus if again else None,
                            state=lambda: probe_state()[0], p2p_options=self.p2p_options, read_acs=not self.boot,
                            hostctl_bin=self.hostctl_bin)
        snap.driver = self.driver
        system = ctx.earlier.get("system")
        if ctx.dry_run and system is not None and any(a.changes == INSTALLED_PROFILE for a in system.actions):
            snap.files.files[INSTALLED_PROFILE] = snap.source_profile  # what the system part would install
        return snap

    def decide(self, snapshot: Any) -> Assessment:
        from hostctl.provision import gpu

        return gpu.decide(self.config, snapshot, hostctl_bin=self.hostctl_bin, boot=self.boot, adapter=self.adapter,
                          p2p_options=self.p2p_options)

    def plan_text(self, d: Assessment, round_no: int) -> str:
        return ""

    def done_text(self, first: Assessment, final: Assessment, ran: list[Action], *, dry_run: bool) -> str:
        from hostctl.provision import gpu

        ids = {a.id for a in ran}
        items = [i for i in first.items if not isinstance(i, Action) or dry_run or i.id in ids]
        # what the last look adds once the actions ran (a verdict measured now, its warnings)
        seen = {(type(i), getattr(i, "id", None)) for i in first.items}
        items += [i for i in final.items if (type(i), getattr(i, "id", None)) not in seen and not isinstance(i, Action)]
        lines = gpu.text_lines(items, dry_run=dry_run, ran=ids)
        return "".join(line + "\n" for line in lines)

    def refusal(self, d: Assessment, ran: int) -> HostctlError:
        return FailedError("gpu part refused", details=[r.reason for r in d.refusals])

    def consent(self, d: Assessment) -> list[consent.Request]:
        return []


def provision(config: Config, *, only: str | None = None, dry_run: bool = False, yes: bool = False,
              erase: tuple[str, ...] = (), boot: bool = False, stdin: TextIO | None = None, out: TextIO | None = None,
              err: TextIO | None = None, facts: Callable[[Config], HostFacts] | None = None,
              gpu_options: dict | None = None) -> Report:
    """Run the parts (all, in ORDER, or `only` one) and return the report; its error, if any, is
    what the run stopped at (the caller raises it after presenting the report)."""
    from hostctl.provision.storage import StorageOptions
    from hostctl.safefs import sudo_owner

    names = [only] if only else list(ORDER)
    cached: dict[str, HostFacts] = {}

    def fresh() -> HostFacts:
        # each part reads the host when it starts: after the parts before it have acted
        cached["facts"] = (facts or live_facts)(config)
        return cached["facts"]

    def part(name: str) -> Any:
        if name == "storage":
            return StoragePart(config, StorageOptions(erase=tuple(erase), owner=sudo_owner()))
        if name == "system":
            return SystemPart(config, facts=fresh)
        return GpuPart(config, facts=fresh, boot=boot, **(gpu_options or {}))

    parts = [part(name) for name in names]
    executor = Executor(command=COMMAND, lock=provision_lock, dry_run=dry_run, yes=yes, stdin=stdin or sys.stdin,
                        out=out, err=err, record=lambda name: record_converged(name, config) and None)
    report = Report(schema_tag=SCHEMA, dry_run=dry_run, profile=config.profile.name, only=only)
    if len(names) > 1:
        try:
            # fresh parts: a part keeps what its first read found (the gpu part its facts)
            blocked = blocked_later_writes([part(name) for name in names])
        except RefusedError as refused:
            report.error = refused  # a later part refuses whatever the earlier ones do: nothing is changed first
        else:
            if blocked:
                report.error = RefusedError(
                    "; ".join(f"the {name} part would have to write {'; '.join(writes)}" for name, writes in blocked)
                    + "; nothing was changed (no drive is touched before every file the run will write is known to "
                      "be writable)",
                    fix="make the file writable (or run `hostctl provision --only storage` first), then re-run; "
                        "`--dry-run` checks it too")
        if report.error is not None:
            report.parts = [PartOutcome(part=n, status="not-run", reason=f"not run: {report.error.message}")
                            for n in names]
            return report
    return executor.run(parts, report)


def blocked_later_writes(parts: list[Any]) -> list[tuple[str, list[str]]]:
    """Every part judged as a dry run judges it, each on the facts the parts before it would leave,
    before any acts: the files a part would write once an earlier part has acted that cannot be
    written where they are (facts.sysfiles.write_target: immutable, a read-only /etc, a link root
    does not trust), as (part, [file: problem]). Each part checks its own files before it writes
    one; this checks the later parts', so a run never partitions and formats, or installs the
    system part's files, only to stop at an immutable unit. A refusal of a later part itself
    (RefusedError: a masked unit, a hostctl others can change) is raised once an earlier part would
    act: it does not depend on what they do, so the run stops before any of them changes the host.
    Empty where no earlier part would act, or where a part refuses anyway by its own assessment
    (the real run stops there and says why)."""
    from hostctl.facts.sysfiles import write_target

    blocked: list[tuple[str, list[str]]] = []
    acting = False  # whether a part before the one judged now would change the host
    with ExitStack() as held:
        ctx = Context(dry_run=True, held=held)
        for p in parts:
            if not acting and p is parts[-1]:
                break  # nothing before the last part acts: the real run meets whatever it finds first
            try:
                d = p.decide(p.read(ctx))
            except RefusedError:
                if acting:
                    raise
                return blocked  # nothing before it acts: the real run refuses at this part, as here
            except HostctlError:
                return blocked  # the real run meets the same error at its own step and reports it there
            if d.refusals:
                return blocked
            writes = [f"{a.writes}: {t.problem}" for a in d.actions if a.writes and (t := write_target(a.writes)).problem]
            if acting and writes:
                blocked.append((p.name, writes))
            acting = acting or bool(d.actions)
            ctx.earlier[p.name] = d
    return blocked
