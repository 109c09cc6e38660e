"""GPU checks: driver and kernel module, GPU count against the recipe, persistence mode, power
limit against the profile, PCIe link, the P2P ladder (topology, driver status, IOMMU, the
functional verdict) and NUMA placement. They read GpuFacts and the plan's placement, power
and NCCL sections; none of them touches the GPUs."""

from __future__ import annotations

import re

from hostctl.doctor import functional
from hostctl.doctor.registry import CheckContext, CheckResult, check, failed, passed, skipped, warned
from hostctl.facts.records import Gpu, P2PVerdict
from hostctl.gpu.acs import AcsReading, judge_paths
from hostctl.gpu.health import COPY_FRACTION_WARN
from hostctl.plan import codes
from hostctl.plan.nccl import IOMMU_COST, verdict_stale
from hostctl.plan.placement import VRAM_SLACK, serving_gpus
from hostctl.bytesizes import fmt_gib
from hostctl.cpulists import format_cpulist

NVML = "NVML"
COUNT_CODES = (codes.PLACEMENT_NO_GPU, codes.PLACEMENT_UNKNOWN_DEVICE, codes.PLACEMENT_TOO_FEW_GPUS,
               codes.PLACEMENT_MAPPED_MULTI_GPU)
NUMA_CODES = (codes.NUMA_UNKNOWN, codes.NUMA_SPLIT_MAPPED, codes.NUMA_NOT_LISTED)
POWER_CODES = (codes.POWER_NO_GPU, codes.POWER_OUT_OF_RANGE)
LADDER_CODES = (codes.NCCL_P2P_REFUSED_IOMMU, codes.NCCL_IN_VM)
FUNCTIONAL_CODES = (codes.NCCL_P2P_UNVERIFIED, codes.NCCL_P2P_FAILED)
# GPUs the proprietary kernel module does not drive: Blackwell needs the open module.
NEEDS_OPEN_MODULE = re.compile(r"Blackwell|\bG?B[123]00\b|RTX PRO [2-6]\d{3}\b|RTX 50[5-9]0")


def _no_gpu(ctx: CheckContext) -> CheckResult | None:
    """Skip (or fail, when the recipe needs GPUs) when no GPU can be read."""
    g = ctx.facts.gpus
    if g.available and g.devices:
        return None
    why = g.reason or "NVML found no GPU"
    if ctx.config is not None and ctx.config.recipe.requires.gpus > 0:
        return failed(f"the recipe needs {ctx.config.recipe.requires.gpus} GPU(s) but none can be read: {why}",
                      fix="install or load the NVIDIA driver (nvidia-smi must list the GPUs)", source=NVML)
    return skipped(f"no GPU here: {why}", source=NVML)


def _gpus(ctx: CheckContext) -> list[Gpu]:
    """The GPUs that matter: the serving ones with a plan, else every GPU on the host."""
    return serving_gpus(ctx.facts, ctx.plan if ctx.plan is not None and ctx.plan.placement.gpus else None)


@check("gpu.driver", "NVIDIA driver loaded")
def driver(ctx: CheckContext) -> CheckResult:
    g = ctx.facts.gpus
    if g.driver_version:
        return passed(f"driver {g.driver_version} (CUDA {g.cuda_driver_version or '?'}), "
                      f"{len(g.devices)} GPU(s)", source="NVML nvmlSystemGetDriverVersion")
    return _no_gpu(ctx) or skipped("NVML did not report a driver version", source=NVML)


@check("gpu.kernel_module", "open NVIDIA kernel module")
def kernel_module(ctx: CheckContext) -> CheckResult:
    g = ctx.facts.gpus
    if not g.driver_version:
        return _no_gpu(ctx) or skipped("no NVIDIA driver")
    source = "/proc/driver/nvidia/version"
    if g.kernel_module is None:
        return skipped(f"{source} was unreadable or unrecognised: open vs proprietary unknown", source=source)
    if g.kernel_module == "open":
        return passed("open kernel module", expected="open", source=source)
    needs_open = [f"GPU {d.index} ({d.name})" for d in g.devices if NEEDS_OPEN_MODULE.search(d.name)]
    fix = "install the open kernel module flavour of the same driver (e.g. nvidia-open / nvidia-driver-<N>-open) and reboot"
    if needs_open:
        return failed(f"proprietary kernel module; {', '.join(needs_open)} need(s) the open one", fix=fix,
                      observed="proprietary", expected="open", source=source)
    return warned("proprietary kernel module; NVIDIA recommends the open one for Turing and newer", fix=fix,
                  observed="proprietary", expected="open", source=source)


@check("gpu.count", "GPUs visible vs the recipe", codes=COUNT_CODES)
def count(ctx: CheckContext) -> CheckResult:
    g = ctx.facts.gpus
    visible = len(g.devices)
    names = ", ".join(f"{d.index}: {d.name} ({fmt_gib(d.memory_total_bytes)})" for d in g.devices)
    if ctx.config is None:
        if not visible:
            return _no_gpu(ctx) or skipped("no GPU here")
        return skipped(f"{ctx.no_config_reason}: no recipe to count against ({visible} visible: {names})", source=NVML)
    recipe = ctx.config.recipe
    want = recipe.requires.gpus
    if want == 0:
        return skipped(f"the recipe {recipe.id} runs on the CPU" + (f" ({visible} GPU(s) visible)" if visible else ""))
    placement = ctx.plan.placement
    expected = f"{want} GPU(s)" + (f" with {recipe.requires.vram_gb:g} GB each" if recipe.requires.vram_gb else "")
    mine = ctx.problems(COUNT_CODES)
    if mine:
        return failed("; ".join(p.message for p in mine), fix=mine[0].fix or "choose a recipe for this host",
                      observed=f"{visible} visible: {names or 'none'}", expected=expected, source=NVML)
    small = [d for d in _gpus(ctx) if recipe.requires.vram_gb and d.memory_total_bytes < recipe.requires.vram_gb * 1e9 * VRAM_SLACK]
    if small:
        return failed(", ".join(f"GPU {d.index} has {fmt_gib(d.memory_total_bytes)}" for d in small)
                      + f"; the recipe needs {recipe.requires.vram_gb:g} GB per GPU",
                      fix="serve on larger GPUs (gpu.devices) or choose a recipe for these", expected=expected, source=NVML)
    serving = ", ".join(str(s.index) for s in placement.gpus)
    return passed(f"{len(placement.gpus)} of {visible} GPU(s) serve ({serving}); the recipe needs {want}",
                  observed=names, expected=expected, source=NVML)


@check("gpu.persistence", "persistence mode on")
def persistence(ctx: CheckContext) -> CheckResult:
    if (r := _no_gpu(ctx)) is not None:
        return r
    gpus = _gpus(ctx)
    off = [g.index for g in gpus if g.persistence_mode is False]
    unknown = [g.index for g in gpus if g.persistence_mode is None]
    source = "NVML nvmlDeviceGetPersistenceMode"
    if off:
        return warned(f"persistence mode off on GPU {', '.join(map(str, off))}",
                      fix="enable the persistence daemon: systemctl enable --now nvidia-persistenced (the driver then "
                      "keeps the GPUs initialised between runtime starts instead of tearing them down)",
                      expected="on", source=source)
    if unknown and len(unknown) == len(gpus):
        return skipped("NVML cannot read persistence mode here", source=source)
    return passed(f"on for GPU {', '.join(str(g.index) for g in gpus if g.persistence_mode)}", expected="on", source=source)


@check("gpu.power.limit", "power limit matches the profile", codes=POWER_CODES)
def power_limit(ctx: CheckContext) -> CheckResult:
    if (r := _no_gpu(ctx)) is not None:
        unread = [p for p in ctx.problems(POWER_CODES) if p.code == codes.POWER_NO_GPU]
        if unread and r.status == "skip":
            return warned(unread[0].message, fix=unread[0].fix or "load the NVIDIA driver", source=NVML)
        return r
    source = "NVML nvmlDeviceGetPowerManagementLimit / GetEnforcedPowerLimit / GetPowerManagementLimitConstraints"
    current = "; ".join(
        f"GPU {g.index}: {g.power.limit_w:g} W (range {g.power.min_w:g}-{g.power.max_w:g})"
        if None not in (g.power.limit_w, g.power.min_w, g.power.max_w) else f"GPU {g.index}: unknown"
        for g in _gpus(ctx))
    if ctx.plan is None:
        return skipped(f"{ctx.no_config_reason}: no power limit to compare ({current})", source=source)
    settings = [s for s in ctx.plan.power.gpus if s.index in {g.index for g in _gpus(ctx)}]
    invalid = [p for p in ctx.problems(POWER_CODES) if p.code == codes.POWER_OUT_OF_RANGE]
    if invalid:
        return failed(invalid[0].message, fix=invalid[0].fix or "set a limit inside the GPU's range",
                      observed=current, source=source)
    wrong = [s for s in settings if s.action == "set"]
    expected = "; ".join(f"GPU {s.index}: {s.desired_w:g} W" for s in settings if s.desired_w is not None) or None
    if wrong:
        defaults = {g.index: g.power.default_w for g in _gpus(ctx)}
        # a limit back at the GPU's default was set once and lost: a driver reload (nvidia-smi -r,
        # the module reloaded by an update) or a boot before hostctl-power.service ran resets it
        drifted = [s.index for s in wrong if s.current_w is not None and defaults.get(s.index) is not None
                   and abs(s.current_w - defaults[s.index]) <= 0.5]
        return failed(", ".join(f"GPU {s.index} at {s.current_w:g} W" + (" (its default)" if s.index in drifted else "")
                                if s.current_w is not None else f"GPU {s.index} unknown" for s in wrong)
                      + f"; the profile asks for {expected}"
                      + ("; a limit back at the default drifted: a driver reload or a boot before "
                         "hostctl-power.service ran resets it (`up --foreground` puts it back within 30 s)"
                         if drifted else ""),
                      fix="hostctl provision --only gpu (sets the limits and installs the unit that re-applies them at boot)",
                      observed=current, expected=expected, source=source)
    throttled = [g for g in _gpus(ctx) if g.power.enforced_w is not None and g.power.limit_w is not None
                 and g.power.enforced_w < g.power.limit_w - 0.5]
    if throttled:
        return warned(", ".join(f"GPU {g.index} enforces {g.power.enforced_w:g} W below its {g.power.limit_w:g} W limit"
                                for g in throttled),
                      fix="another limiter (a lower system-wide cap, thermal or the power supply) holds the GPU down: "
                      "check nvidia-smi -q -d POWER", observed=current, expected=expected, source=source)
    if expected is None:
        return passed(f"the profile sets no limit; {current}", observed=current, source=source)
    return passed(f"as the profile asks: {expected}", observed=current, expected=expected, source=source)


@check("gpu.pcie.link", "PCIe link at full width")
def pcie_link(ctx: CheckContext) -> CheckResult:
    if (r := _no_gpu(ctx)) is not None:
        return r
    source = "NVML nvmlDeviceGetCurr/MaxPcieLinkWidth, Curr/MaxPcieLinkGeneration"
    narrow, slow, parts = [], [], []
    for g in _gpus(ctx):
        link = g.pcie
        if None in (link.gen_current, link.gen_max, link.width_current, link.width_max):
            parts.append(f"GPU {g.index}: unknown")
            continue
        parts.append(f"GPU {g.index}: gen {link.gen_current}/{link.gen_max} x{link.width_current}/x{link.width_max}")
        if link.width_current < link.width_max:
            narrow.append(f"GPU {g.index} runs x{link.width_current} of x{link.width_max}")
        if link.gen_current < link.gen_max:
            slow.append(g.index)
    observed = "; ".join(parts) + " (current/max)"
    if narrow:
        return warned("; ".join(narrow) + ": the link trained narrower than the slot and card allow",
                      fix="reseat the card, check risers and the slot (the board manual says which slots share lanes); "
                      "`hostctl doctor --level full` measures the copy bandwidth", observed=observed,
                      expected="current width = max width", source=source)
    if all(p.endswith("unknown") for p in parts):
        return skipped("NVML cannot read the PCIe link here", source=source)
    note = (f"; GPU {', '.join(map(str, slow))} below max generation now, which an idle GPU does to save power"
            if slow else "")
    return passed("full width" + note, observed=observed, expected="current width = max width", source=source)


@check("gpu.pcie.bandwidth", "pinned host<->device copy bandwidth", level="full")
def pcie_bandwidth(ctx: CheckContext) -> CheckResult:
    if (r := _no_gpu(ctx)) is not None:
        return r
    results, errors = functional.measure_bandwidth(ctx.facts)
    if not results:
        return skipped("copy bandwidth could not be measured: " + "; ".join(errors),
                       source="pinned-memory copies (full level)")
    source = "pinned-memory copies (full level); NVML link generation/width read while copying"
    low = [b for b in results if min(b.h2d_gbps, b.d2h_gbps) < COPY_FRACTION_WARN * b.link_gbps]
    # An idle GPU lowers its link generation (gpu.pcie.link cannot judge it); under load it must run at its maximum.
    trained_down = [b for b in results if b.link_under_load is not None and b.link_under_load < b.link_max]
    observed = "; ".join(
        f"GPU {b.index}: H2D {b.h2d_gbps:.1f} GB/s ({b.h2d_gbps / b.link_gbps:.0%}), D2H {b.d2h_gbps:.1f} GB/s "
        f"({b.d2h_gbps / b.link_gbps:.0%}) of {b.link_gbps:g}"
        + (f", link under load gen {b.link_under_load[0]} x{b.link_under_load[1]}" if b.link_under_load else "")
        for b in results)
    expected = f">= {COPY_FRACTION_WARN:.0%} of the link's raw rate, at its maximum generation and width under load"
    if trained_down:
        return warned("; ".join(f"GPU {b.index} ran gen {b.link_under_load[0]} x{b.link_under_load[1]} under load, of "
                                f"gen {b.link_max[0]} x{b.link_max[1]}" for b in trained_down),
                      fix="check the slot's PCIe generation setting in the firmware, risers and retimers; reseat the card",
                      observed=observed, expected=expected, source=source)
    if low:
        return warned(f"GPU {', '.join(str(b.index) for b in low)} copies below {COPY_FRACTION_WARN:.0%} of its link",
                      observed=observed, expected=expected,
                      fix="check the link (gpu.pcie.link), the slot and whether the GPU hangs off the chipset",
                      source=source)
    return passed(observed, observed=observed, expected=expected, source=source)


# ---------------------------------------------------------------- P2P and NUMA


def _pairs_text(ctx: CheckContext, indices: list[int]) -> tuple[list[str], list[str]]:
    """(one text per pair, the pairs the driver refuses)."""
    texts, refused = [], []
    for i, a in enumerate(indices):
        for b in indices[i + 1:]:
            p = ctx.facts.gpus.pair(a, b)
            if p is None:
                texts.append(f"GPU {a}<->{b}: unknown")
                refused.append(f"{a}<->{b}")
                continue
            texts.append(f"GPU {a}<->{b}: {p.topology or 'unknown'}, driver P2P read {p.p2p_read or '?'}, "
                         f"write {p.p2p_write or '?'}")
            if p.p2p_read != "ok" or p.p2p_write != "ok":
                refused.append(f"{a}<->{b}")
    return texts, refused


def _iommu_text(ctx: CheckContext) -> str:
    i = ctx.facts.iommu
    if not i.enabled:
        flags = " ".join(f"{k}={v}" for k, v in i.cmdline_flags.items())
        return "IOMMU off" + (f" ({flags})" if flags else "")
    mode = "passthrough" if (i.default_domain_type or "").lower() == "identity" else (i.default_domain_type or "unknown mode")
    return f"IOMMU on ({mode}, {i.group_count} groups)"


def _iommu_translates(ctx: CheckContext) -> bool:
    i = ctx.facts.iommu
    return i.enabled and (i.default_domain_type or "").lower() != "identity"


def _acs(ctx: CheckContext) -> tuple[AcsReading | None, str]:
    """(the ACS reading over the serving GPUs, or None when the facts carry none; its text)."""
    acs = ctx.facts.acs
    if acs is None:
        return None, "ACS not read (facts from before hostctl read ACS)"
    reading = judge_paths(acs, _gpus(ctx))
    return reading, f"ACS {reading.status}: {reading.summary}" + (
        f" ({'; '.join(e.strip() for e in reading.evidence[:4])})" if reading.evidence else "")


def _serving_indices(ctx: CheckContext) -> list[int]:
    return [g.index for g in _gpus(ctx)]


@check("nccl.p2p.ladder", "P2P ladder: topology, driver P2P, IOMMU/ACS", codes=LADDER_CODES)
def p2p_ladder(ctx: CheckContext) -> CheckResult:
    if (r := _no_gpu(ctx)) is not None:
        return r
    indices = _serving_indices(ctx)
    if len(indices) < 2:
        return skipped(f"{'one GPU serves' if ctx.plan is not None and ctx.plan.placement.gpus else 'one GPU here'}: "
                       "no P2P between GPUs, no collectives", source=NVML)
    pairs, refused = _pairs_text(ctx, indices)
    vm = ctx.facts.kernel.virtualization
    acs, acs_text = _acs(ctx)
    observed = "; ".join(pairs) + f"; {_iommu_text(ctx)}; {acs_text}"
    if ctx.plan is not None and ctx.plan.nccl.applies:
        n = ctx.plan.nccl
        observed += f"; plan: NCCL P2P {'on' if n.p2p else 'off'}" + (f" at level {n.p2p_level}" if n.p2p_level else "")
    source = ("NVML nvmlDeviceGetTopologyCommonAncestor / GetP2PStatus; /sys/class/iommu, /sys/kernel/iommu_groups; "
              "lspci -vvv -D (ACSCtl) and /sys/bus/pci/devices for the bridges between the GPUs")
    vm_note = f" (read inside a VM, {vm}: the hardware may differ)" if vm else ""
    if refused:
        fix = ("the plan keeps NCCL P2P off (NCCL_P2P_DISABLE=1), so collectives go through host memory, slower. "
               + ("To allow P2P, and only if this host needs no DMA isolation: " + IOMMU_COST
                  if ctx.facts.iommu.enabled else "Check the BIOS (Above 4G decoding, ACS) and that both GPUs sit under "
                  "one root complex"))
        return warned(f"the driver refuses P2P between GPU {', '.join(refused)}{vm_note}", fix=fix, observed=observed,
                      expected="driver P2P read/write ok for every serving pair", source=source)
    verdict = ctx.facts.state.p2p
    if _iommu_translates(ctx) and (verdict is None or verdict.verdict != "ok"):
        return warned(f"the driver reports P2P, but the IOMMU translates DMA between the GPUs{vm_note}: field report "
                      "001's GPUs reported P2P like this and deadlocked in NCCL's first collective",
                      fix="validate with `hostctl provision --only gpu` (a functional all-reduce) before enabling P2P; "
                      "if it hangs: " + IOMMU_COST, observed=observed, source=source)
    if acs is not None and acs.status == "warn" and (verdict is None or verdict.verdict != "ok"):
        return warned(f"ACS redirects peer requests upstream on {', '.join(acs.redirecting)}{vm_note}: P2P between the "
                      "GPUs goes through the root complex, untested here by a functional all-reduce",
                      fix="validate with `hostctl provision --only gpu` (a functional all-reduce) before enabling P2P; "
                      "the firmware's ACS option changes this", observed=observed, source=source)
    acs_note = "" if acs is None else {
        "ok": "; ACS ok: no bridge between them redirects peer requests",
        "warn": f"; ACS redirects on {', '.join(acs.redirecting)}, and the functional all-reduce passed",
    }.get(acs.status, "; ACS unknown: " + acs.summary)
    return passed(f"driver P2P ok for {len(pairs)} pair(s); {_iommu_text(ctx)}{acs_note}{vm_note}", observed=observed,
                  source=source)


def _judge_verdict(ctx: CheckContext, v: P2PVerdict, source: str, fresh: bool) -> CheckResult:
    bw = (f"; {v.busbw_gbps:g} GB/s with P2P vs {v.control_busbw_gbps:g} GB/s without"
          if v.busbw_gbps and v.control_busbw_gbps else "")
    observed = f"{v.verdict} (measured {v.measured_at}, driver {v.driver_version or '?'}){bw}"
    if v.verdict == "not_applicable":
        return skipped(f"the functional check said not applicable (fewer than two GPUs), measured {v.measured_at}",
                       source=source)
    if not fresh:
        stale = verdict_stale(v, ctx.facts)
        if stale:
            return warned(f"the stored verdict ({v.verdict}) was measured under {' and '.join(stale)}: the plan ignores it "
                          "and keeps NCCL P2P off", fix="re-measure: hostctl provision --only gpu",
                          observed=observed, source=source)
    if v.verdict == "ok":
        return passed(f"ok{bw}", observed=observed, expected="ok", source=source)
    fix = ("the plan keeps NCCL P2P off, so the runtime still works, with slower collectives. "
           + ("With the IOMMU on, this is the deadlock two PRO 6000s behind one host bridge hit (docs/field-reports.md, 001): " + IOMMU_COST if ctx.facts.iommu.enabled
              else "Re-run after a driver or firmware update"))
    return warned(f"P2P failed its functional check: {v.verdict.replace('_', ' ')}", fix=fix, observed=observed,
                  expected="ok", source=source)


@check("nccl.p2p.functional", "P2P works in a real all-reduce", codes=FUNCTIONAL_CODES)
def p2p_functional(ctx: CheckContext) -> CheckResult:
    stored = ctx.facts.state.p2p
    source = "/var/lib/hostctl/p2p.json (stored by `hostctl provision --only gpu`)"
    if not (ctx.facts.gpus.available and ctx.facts.gpus.devices) and stored is None:
        return _no_gpu(ctx) or skipped("no GPU here")
    if len(_serving_indices(ctx)) < 2:
        return skipped("fewer than two GPUs serve: no collective to test", source=NVML)
    if ctx.level == "full":
        verdict, why = functional.measure_p2p(ctx.facts, ctx.plan)
        if verdict is None:
            now = f"stored verdict: {stored.verdict} ({stored.measured_at})" if stored else "no stored verdict"
            return skipped(f"the functional all-reduce could not run now: {why}; {now}", source=source)
        return _judge_verdict(ctx, verdict, "functional all-reduce run now (full level)", fresh=True)
    if stored is None:
        return warned("no functional P2P verdict on this host: the plan keeps NCCL P2P off (host-memory collectives, "
                      "slower)", fix="run `hostctl provision --only gpu` (a hang is killed at its timeout, not waited on), "
                      "or `hostctl doctor --level full`", expected="a stored verdict: ok", source=source)
    return _judge_verdict(ctx, stored, source, fresh=False)


@check("numa.placement", "NUMA node known, placement consistent", codes=NUMA_CODES)
def numa_placement(ctx: CheckContext) -> CheckResult:
    nodes = {n.id: n for n in ctx.facts.numa.nodes}
    source = "/sys/bus/pci/devices/<bus id>/numa_node, local_cpulist; /sys/devices/system/node"
    gpus = _gpus(ctx) if ctx.facts.gpus.available else []
    observed = "; ".join(
        f"GPU {g.index} ({g.pci_bus_id}): node {g.numa_node if g.numa_node is not None else 'unknown'}"
        + (f", local CPUs {format_cpulist(g.local_cpus)}" if g.local_cpus else "") for g in gpus) or "no GPU"
    observed += f"; {len(nodes)} node(s)"
    inconsistent = []
    for g in gpus:
        if g.numa_node is not None and g.numa_node in nodes and g.local_cpus and \
                not set(g.local_cpus) <= set(nodes[g.numa_node].cpus):
            inconsistent.append(f"GPU {g.index}'s local CPUs {format_cpulist(g.local_cpus)} are not node "
                                f"{g.numa_node}'s {format_cpulist(nodes[g.numa_node].cpus)}")
        if g.numa_node is not None and g.numa_node not in nodes:
            inconsistent.append(f"GPU {g.index} reports node {g.numa_node}, which the host does not list")
    if inconsistent:
        return warned("; ".join(inconsistent), fix="the firmware's NUMA tables (SRAT) disagree with the PCI topology: "
                      "update the BIOS; meanwhile pin by hand", observed=observed, source=source)
    if ctx.plan is not None:
        problems = ctx.problems(NUMA_CODES)
        if problems:
            p = problems[0]
            make = failed if p.severity == "error" else warned
            return make(p.message, fix=p.fix or "see `hostctl plan`", observed=observed, source=source)
        pl = ctx.plan.placement
        if pl.numa_node is not None:
            return passed(f"the runtime is bound to node {pl.numa_node} (CPUs {pl.cpuset}), where its GPU(s) attach",
                          observed=observed, source=source)
    if len(nodes) <= 1:
        return passed("one NUMA node: every CPU and page is local" + (
            " (a GPU's numa_node reads -1, which a one-node host does not need)" if any(g.numa_node is None for g in gpus)
            else ""), observed=observed, source=source)
    unknown = [g for g in gpus if g.numa_node is None]
    if unknown:
        vm = ctx.facts.kernel.virtualization
        return warned(f"NUMA node unknown for GPU {', '.join(str(g.index) for g in unknown)} on a {len(nodes)}-node host"
                      + (f" (inside a VM, {vm})" if vm else ""),
                      fix="check /sys/bus/pci/devices/<bus id>/numa_node on the host itself; enable NUMA/SRAT reporting "
                      "in the firmware", observed=observed, source=source)
    if ctx.plan is not None:
        decision = next((d for d in ctx.plan.placement.decisions if d.key == "NUMA node"), None)
        if decision is not None:
            return passed(f"NUMA node {decision.value}: {decision.reason}", observed=observed, source=source)
    return passed("every GPU's NUMA node is known", observed=observed, source=source)


CHECKS = (driver, kernel_module, count, persistence, power_limit, pcie_link, pcie_bandwidth, p2p_ladder, p2p_functional, numa_placement)
