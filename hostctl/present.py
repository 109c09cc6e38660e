"""Text a person reads: facts summaries and plan explanations. Pure string building, so the
CLI only prints, and tests can read exactly what a user sees."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostctl.bytesizes import fmt_bytes, fmt_gib
from hostctl.cpulists import format_cpulist

if TYPE_CHECKING:  # annotations only: `facts` prints without importing the plan's schema
    from hostctl.facts.records import HostFacts
    from hostctl.plan.records import Plan


def _yn(value: bool | None) -> str:
    return "unknown" if value is None else ("yes" if value else "no")


def facts_text(f: HostFacts) -> str:
    out: list[str] = [f"host {f.hostname}  (kernel {f.kernel.release}, collected {f.collected_at})"]
    out += [f"  note: {n}" for n in f.notes]
    if f.kernel.virtualization:
        out.append(f"  virtualised: {f.kernel.virtualization} ({f.kernel.virtualization_evidence or 'detected'}); "
                   "GPU topology, P2P and NUMA readings may not describe the hardware")

    g = f.gpus
    out.append("")
    if not g.available:
        out.append(f"GPUs: none readable — {g.reason}")
    else:
        out.append(f"GPUs: {len(g.devices)}  (driver {g.driver_version or '?'}, "
                   f"{g.kernel_module or 'unknown'} kernel module, CUDA {g.cuda_driver_version or '?'})")
        for d in g.devices:
            p, link = d.power, d.pcie
            power = (f"{p.limit_w:g} W (range {p.min_w:g}-{p.max_w:g}, default {p.default_w:g}, enforced {p.enforced_w:g})"
                     if None not in (p.limit_w, p.min_w, p.max_w, p.default_w, p.enforced_w) else "unknown")
            node = str(d.numa_node) if d.numa_node is not None else "unknown"
            out.append(f"  [{d.index}] {d.name}  {d.pci_bus_id}  {d.uuid}")
            out.append(f"      memory {fmt_gib(d.memory_total_bytes)}, power {power}, persistence {_yn(d.persistence_mode)}")
            out.append(f"      PCIe gen {link.gen_current}/{link.gen_max} x{link.width_current}/x{link.width_max} (current/max), "
                       f"NUMA node {node}" + (f", local CPUs {format_cpulist(d.local_cpus)}" if d.local_cpus else ""))
        for pair in g.pairs:
            out.append(f"  GPU {pair.a}<->{pair.b}: {pair.topology or 'unknown'}, P2P read {pair.p2p_read or '?'}, "
                       f"write {pair.p2p_write or '?'}")

    m = f.memory
    out.append("")
    out.append(f"memory: RAM {fmt_gib(m.mem_total_bytes)} ({fmt_gib(m.mem_available_bytes)} available), "
               f"swap {fmt_gib(m.swap_total_bytes)} ({fmt_gib(m.swap_free_bytes)} free), RAM+swap {fmt_gib(m.ram_plus_swap)}")
    out.append(f"  swappiness {m.swappiness}, page-cluster {m.page_cluster}, memlock "
               + ("unlimited" if m.memlock_limit_bytes is None else fmt_bytes(m.memlock_limit_bytes))
               + (f", /dev/shm {fmt_gib(m.shm_total_bytes)}" if m.shm_total_bytes else ""))
    for s in m.swaps:
        out.append(f"  swap {s.path} ({s.kind}) {fmt_gib(s.size_bytes)}, used {fmt_gib(s.used_bytes)}, priority {s.priority}")

    out.append("")
    out.append(f"NUMA: {len(f.numa.nodes)} node(s), {f.numa.cpu_count} CPUs")
    for n in f.numa.nodes:
        out.append(f"  node {n.id}: CPUs {format_cpulist(n.cpus)}"
                   + (f", {fmt_gib(n.mem_total_bytes)}" if n.mem_total_bytes else ""))
    i = f.iommu
    flags = " ".join(f"{k}={v}" for k, v in i.cmdline_flags.items()) or "none"
    out.append(f"IOMMU: {'on' if i.enabled else 'off'} ({len(i.class_entries)} units, {i.group_count} groups, "
               f"default domain {i.default_domain_type or 'n/a'}; kernel flags: {flags})")
    a = f.acs
    if a is None:
        out.append("ACS: not read (facts from before hostctl read ACS)")
    elif not a.available:
        out.append(f"ACS: {a.reason}")
    else:
        out.append(f"ACS: {len(a.devices)} device(s) on the paths between {len(a.gpu_paths)} GPU(s) (lspci -vvv)")
        for dev in a.devices:
            state = ("<access denied>" if dev.access_denied else f"ACSCtl {dev.ctl_text()}" if dev.acs_ctl is not None
                     else "no ACS capability")
            out.append(f"  {dev.bdf} {dev.description[:60]}: {state}" + (f"; redirects {', '.join(dev.redirects)}"
                                                                          if dev.redirects else ""))

    d = f.disks
    out.append("")
    out.append(f"disks ({d.source}" + (f": {d.source_reason}" if d.source_reason else "") + "):" if d.available
               else f"disks: unreadable — {d.reason}")
    for disk in d.devices:
        tags = [t for t in ("root disk" if disk.is_root_disk else "", f"holders {','.join(disk.holders)}" if disk.holders else "") if t]
        out.append(f"  {disk.path}  {disk.model or '?'}  serial {disk.serial or '?'}  {fmt_gib(disk.size_bytes)}"
                   f"  table {disk.table_type or 'none'}" + (f"  ({'; '.join(tags)})" if tags else ""))
        for p in disk.partitions:
            what = p.fs_type or "no filesystem"
            extra = []
            if p.part_label:
                extra.append(f"name {p.part_label}")
            if p.fs_label:
                extra.append(f"label {p.fs_label}")
            if p.mountpoints:
                extra.append("on " + ",".join(p.mountpoints))
            if p.swap_active:
                extra.append(f"swap active, priority {p.swap_priority}")
            out.append(f"    {p.path}  {fmt_gib(p.size_bytes)}  {what}" + (f"  ({'; '.join(extra)})" if extra else ""))

    e = f.engine
    out.append("")
    if e.available:
        out.append(f"docker: engine {e.version} (API {e.api_version}), cgroup v{e.cgroup_version} ({e.cgroup_driver}), "
                   f"runtimes {', '.join(e.runtimes) or 'none'}")
    else:
        out.append(f"docker: engine unreachable — {e.reason}")
    out.append(f"compose: {e.compose_version}" if e.compose_version else f"compose: unavailable — {e.compose_reason}")
    if f.paths:
        out.append("")
        out.append("directories the plan uses:")
        for p in f.paths:
            if not p.exists:
                out.append(f"  {p.path}: missing")
            else:
                free = f", {fmt_gib(p.free_bytes)} free" if p.free_bytes is not None else ""
                files = f", {len(p.files)} files" if p.files else ""
                out.append(f"  {p.path}: {p.fs_type} on {p.mount_target}{free}{files}")
    if f.state.p2p:
        v = f.state.p2p
        out.append(f"stored P2P verdict: {v.verdict} (measured {v.measured_at}, driver {v.driver_version})")
    return "\n".join(out) + "\n"


def plan_text(plan: Plan) -> str:
    out = [f"plan for {plan.profile}: recipe {plan.recipe}, {plan.phase} phase"]
    out += [f"  warning: {w}" for w in plan.warnings]
    for section in plan.sections():
        out.append("")
        out.append(f"{section.area()}:")
        for d in section.decisions:
            out.append(f"  {d.key}: {d.value}")
            out.append(f"      because {d.reason}")
    problems = plan.problems
    out.append("")
    if not problems:
        out.append("problems: none")
    else:
        out.append(f"problems: {len(plan.errors)} error(s), {len(problems) - len(plan.errors)} warning(s)")
        for p in problems:
            out.append(f"  {p.severity.upper()} [{p.area}] {p.message}")
            if p.fix:
                out.append(f"      fix: {p.fix}")
    return "\n".join(out) + "\n"
