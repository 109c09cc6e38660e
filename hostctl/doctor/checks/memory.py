"""Memory checks: the host's RAM+swap against the recipe, swap areas and their priorities, the
swap sysctls for the phase, memlock for GPU containers, the container's caps against the host
reserve, and /dev/shm (size, stale runtime segments). They read MemoryFacts, ShmFacts,
EngineFacts.daemon and the plan's memory section."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostctl.doctor.registry import CheckContext, CheckResult, check, failed, passed, skipped, warned
from hostctl.plan import codes
from hostctl.bytesizes import GIB, MIB, fmt_bytes, fmt_gib

if TYPE_CHECKING:  # annotations only: doctor without a profile builds no plan, and the plan records cost ~10-14 ms to import
    from hostctl.plan.records import Problem

MEMINFO = "/proc/meminfo (MemTotal, SwapTotal)"
# Under host IPC NCCL and vLLM's shared-memory broadcast live in the host's /dev/shm.
MIN_SHM = 1 * GIB
MIN_SHM_FREE = 512 * MIB


def _size(n: int) -> str:
    """GiB like the rest of hostctl, but a small swap (a test's, a zram) in the unit that shows it."""
    return "0 GiB" if n == 0 else fmt_gib(n) if n >= GIB else fmt_bytes(n)


# The memory planner's problems are of two kinds: the host's RAM/RAM+swap against the recipe,
# and the container's own caps.
HOST_CODES = (codes.MEMORY_HOST_RAM_SHORT, codes.MEMORY_HOST_CONVERSION_SHORT)
CONTAINER_CODES = (codes.MEMORY_CONTAINER_RAM_LOW, codes.MEMORY_CONTAINER_RAM_OVER_RESERVE, codes.MEMORY_CONTAINER_NO_ROOM,
                   codes.MEMORY_CONTAINER_SWAP_BELOW_RAM, codes.MEMORY_CONTAINER_SWAP_OVER_HOST)


def _from_problems(problems: list[Problem], observed: str, expected: str | None, source: str) -> CheckResult | None:
    if not problems:
        return None
    worst = next((p for p in problems if p.severity == "error"), problems[0])
    make = failed if worst.severity == "error" else warned
    return make(worst.message, fix=worst.fix or "see `hostctl plan`", observed=observed, expected=expected, source=source)


@check("memory.ram_swap", "host RAM+swap covers the recipe", codes=HOST_CODES)
def ram_swap(ctx: CheckContext) -> CheckResult:
    m = ctx.facts.memory
    observed = f"RAM {fmt_gib(m.mem_total_bytes)} + swap {_size(m.swap_total_bytes)} = {fmt_gib(m.ram_plus_swap)}"
    if ctx.plan is None:
        return skipped(f"{ctx.no_config_reason}: no recipe to compare {observed} with", source=MEMINFO)
    mp = ctx.plan.memory
    need = mp.conversion_need_bytes
    expected = f">= {fmt_gib(need)} for the first conversion" if need else None
    r = _from_problems(ctx.problems(HOST_CODES), observed, expected, MEMINFO)
    if r is not None:
        return r
    if mp.conversion_verdict == "ok":
        return passed(f"{observed} covers the first conversion's {fmt_gib(need)}", observed, expected, MEMINFO)
    return passed(f"{observed}; the recipe declares no conversion need", observed, expected, MEMINFO)


@check("memory.swap", "swap active, equal priorities")
def swap(ctx: CheckContext) -> CheckResult:
    m = ctx.facts.memory
    source = "/proc/swaps"
    want = [d for d in ctx.config.profile.drives if d.swap > 0] if ctx.config is not None else []
    observed = "; ".join(f"{s.path} ({s.kind}) {_size(s.size_bytes)}, priority {s.priority}" for s in m.swaps) \
        or "no swap active"
    expected = (f"{len(want)} swap partition(s) at priority "
                + "/".join(sorted({str(d.swap_priority) for d in want}))) if want else None
    fix = "hostctl provision --only storage (swap partitions, swapon at the configured priority, fstab)"
    if not m.swaps:
        if want:
            return failed(f"no swap active; the profile puts swap on drive(s) {', '.join(d.name for d in want)}", fix=fix,
                          observed=observed, expected=expected, source=source)
        return skipped("no swap is active and " + ("the profile configures none" if ctx.config is not None
                                                   else f"there is no host profile asking for any ({ctx.no_config_reason})"),
                       source=source)
    parts = [s for s in m.swaps if s.kind == "partition"]
    if want and len(parts) < len(want):
        return failed(f"{len(parts)} swap partition(s) active; the profile configures {len(want)} "
                      f"(on {', '.join(d.name for d in want)})", fix=fix, observed=observed, expected=expected, source=source)
    prios = sorted({s.priority for s in parts}, reverse=True)
    if len(prios) > 1:
        return warned(f"swap partitions at unequal priorities {', '.join(map(str, prios))}: the kernel fills the highest "
                      "first instead of striping across the drives", fix="give them one priority: " + fix,
                      observed=observed, expected=expected or "one priority for every swap partition", source=source)
    if want and prios and prios[0] not in {d.swap_priority for d in want}:
        return warned(f"swap partitions at priority {prios[0]}; the profile says "
                      + "/".join(sorted({str(d.swap_priority) for d in want})), fix=fix,
                      observed=observed, expected=expected, source=source)
    total = _size(sum(s.size_bytes for s in m.swaps))
    what = (f"{len(parts)} partition(s) striped at priority {prios[0]}" if len(parts) > 1
            else f"{len(m.swaps)} swap area(s)")
    return passed(f"{total} of swap: {what}", observed, expected, source)


@check("memory.swappiness", "swap sysctls for the phase")
def swappiness(ctx: CheckContext) -> CheckResult:
    m = ctx.facts.memory
    source = "/proc/sys/vm/swappiness, /proc/sys/vm/page-cluster"
    observed = f"vm.swappiness={m.swappiness}, vm.page-cluster={m.page_cluster}"
    if m.swappiness is None:
        return skipped("/proc/sys/vm/swappiness is unreadable", source=source)
    if ctx.config is None:
        return skipped(f"{ctx.no_config_reason}: no phase to compare {observed} with", source=source)
    profile = ctx.config.profile
    want = profile.storage.swappiness_converting if profile.phase == "converting" else profile.storage.swappiness_serving
    expected = f"vm.swappiness={want} ({profile.phase} phase), vm.page-cluster={profile.storage.page_cluster}"
    wrong = []
    if m.swappiness != want:
        wrong.append(f"vm.swappiness is {m.swappiness}; the {profile.phase} phase wants {want}")
    if m.page_cluster is not None and m.page_cluster != profile.storage.page_cluster:
        wrong.append(f"vm.page-cluster is {m.page_cluster}; the profile wants {profile.storage.page_cluster}")
    if wrong:
        why = ("a conversion pages hundreds of GiB: swap eagerly so the page cache stays" if profile.phase == "converting"
               else "serving from complete caches: keep the runtime's pages in RAM")
        return warned("; ".join(wrong) + f" ({why})",
                      fix=f"sysctl -w vm.swappiness={want} vm.page-cluster={profile.storage.page_cluster} now; "
                      "hostctl provision --only storage keeps it across reboots",
                      observed=observed, expected=expected, source=source)
    return passed(f"{observed}, as the {profile.phase} phase wants", observed, expected, source)


@check("memory.memlock", "memlock for GPU containers")
def memlock(ctx: CheckContext) -> CheckResult:
    e, m = ctx.facts.engine, ctx.facts.memory
    own = "unlimited" if m.memlock_limit_bytes is None else fmt_bytes(m.memlock_limit_bytes)
    gpu_runtime = ctx.plan is not None and bool(ctx.plan.runtime.gpu_uuids)
    if ctx.plan is not None and not gpu_runtime:
        return skipped(f"the runtime uses no GPU, so it asks for no memlock limit (this shell's memlock: {own})")
    if ctx.plan is None and not ctx.facts.gpus.available:
        return skipped(f"no GPU here: memlock matters for GPU runtime containers only (this shell's memlock: {own})")
    if not e.available:
        return skipped(f"the Docker engine is unreachable ({e.reason}): its limits are unknown")
    d = e.daemon
    if d is None:
        return skipped(f"the engine daemon's limits are unknown: {e.daemon_reason}" if e.daemon_reason else
                       "the facts carry no engine daemon limits (a snapshot made before they were read)")
    hard = "unlimited" if d.memlock_hard_bytes is None else fmt_bytes(d.memlock_hard_bytes)
    soft = "unlimited" if d.memlock_soft_bytes is None else fmt_bytes(d.memlock_soft_bytes)
    cap = {True: "yes", False: "no", None: "unknown"}[d.cap_sys_resource]
    observed = f"dockerd (pid {d.pid}): memlock {soft} soft / {hard} hard, CAP_SYS_RESOURCE {cap}; this shell: {own}"
    source = f"/proc/{d.pid}/limits, /proc/{d.pid}/status (CapEff)"
    expected = "the engine can set memlock unlimited (hard limit unlimited, or CAP_SYS_RESOURCE)"
    if d.memlock_hard_bytes is None or d.cap_sys_resource:
        return passed(f"GPU containers can get unlimited memlock (dockerd: {hard} hard, CAP_SYS_RESOURCE {cap})",
                      observed, expected, source)
    make = failed if gpu_runtime else warned
    return make(f"the runtime container asks for memlock unlimited (pinned host buffers); the engine is held at {hard} "
                "and cannot raise it, so the start fails with 'error setting rlimit'",
                fix="give the engine unlimited memlock: `systemctl edit docker.service` with [Service] "
                "LimitMEMLOCK=infinity, then `systemctl restart docker` (inside a container or sandbox, the engine "
                "also needs CAP_SYS_RESOURCE)", observed=observed, expected=expected, source=source)


@check("memory.container_caps", "container caps leave the host reserve", codes=CONTAINER_CODES)
def container_caps(ctx: CheckContext) -> CheckResult:
    if ctx.plan is None:
        return ctx.no_profile("no container caps to check")
    mp, m = ctx.plan.memory, ctx.facts.memory
    source = "/proc/meminfo; the plan's memory section"
    expected = f">= {fmt_gib(mp.host_reserve_bytes)} of RAM outside the container (memory.host_reserve)"
    if mp.limit_bytes is None:
        observed = f"host RAM {fmt_gib(m.mem_total_bytes)}; no cap planned"
    else:
        observed = (f"RAM cap {fmt_gib(mp.limit_bytes)}, reservation {fmt_gib(mp.reservation_bytes or mp.limit_bytes)}, "
                    f"RAM+swap cap {fmt_gib(mp.ram_swap_bytes or mp.limit_bytes)}; host RAM {fmt_gib(m.mem_total_bytes)}, "
                    f"swap {fmt_gib(m.swap_total_bytes)}")
    r = _from_problems(ctx.problems(CONTAINER_CODES), observed, expected, source)
    if r is not None:
        return r
    if mp.limit_bytes is None:
        return failed("no container RAM cap could be planned", fix="see `hostctl plan`", observed=observed, source=source)
    kept = m.mem_total_bytes - mp.limit_bytes
    return passed(f"RAM cap {fmt_gib(mp.limit_bytes)} leaves {fmt_gib(kept)} of {fmt_gib(m.mem_total_bytes)} to the host "
                  f"(reserve {fmt_gib(mp.host_reserve_bytes)}); RAM+swap cap {fmt_gib(mp.ram_swap_bytes or mp.limit_bytes)}",
                  observed, expected, source)


@check("memory.shm.size", "/dev/shm size for host IPC")
def shm_size(ctx: CheckContext) -> CheckResult:
    shm = ctx.facts.shm
    total = shm.total_bytes if shm is not None and shm.available else ctx.facts.memory.shm_total_bytes
    free = shm.free_bytes if shm is not None and shm.available else None
    source = "statvfs(/dev/shm)"
    if total is None:
        return skipped("/dev/shm is missing or unreadable", source=source)
    if ctx.plan is not None and ctx.plan.runtime.ipc != "host":
        return skipped(f"the runtime has a private IPC namespace with its own {ctx.plan.runtime.shm_size or 'default'} "
                       "/dev/shm", source=source)
    observed = f"/dev/shm {fmt_gib(total)}" + (f", {fmt_gib(free)} free" if free is not None else "")
    expected = f">= {fmt_gib(MIN_SHM)}, >= {fmt_bytes(MIN_SHM_FREE)} free"
    fix = "enlarge it: mount -o remount,size=50% /dev/shm (and the same option in /etc/fstab)"
    if total < MIN_SHM:
        return warned(f"{observed}: too small for NCCL and vLLM's shared-memory queues under host IPC", fix=fix,
                      observed=observed, expected=expected, source=source)
    if free is not None and free < MIN_SHM_FREE:
        return warned(f"{observed}: nearly full", fix="remove stale segments (memory.shm.stale) or " + fix,
                      observed=observed, expected=expected, source=source)
    return passed(observed, observed, expected, source)


@check("memory.shm.stale", "no stale runtime segments in /dev/shm")
def shm_stale(ctx: CheckContext) -> CheckResult:
    shm = ctx.facts.shm
    if shm is None:
        return skipped("the facts carry no /dev/shm scan (a snapshot from before it existed, or another host)")
    if not shm.available:
        return skipped(shm.reason or "/dev/shm unreadable")
    source = f"{shm.path} (names nccl-*, psm_*, vllm*, torch_*), /proc/*/maps and /proc/*/fd"
    stale = [s for s in shm.segments if s.in_use is False]
    unknown = [s for s in shm.segments if s.in_use is None]
    in_use = [s for s in shm.segments if s.in_use]
    if stale:
        size = sum(s.used_bytes for s in stale)
        names = ", ".join(f"{s.name} ({fmt_bytes(s.used_bytes)})" for s in stale[:5]) + (
            f" and {len(stale) - 5} more" if len(stale) > 5 else "")
        return warned(f"{len(stale)} stale segment(s) hold {fmt_bytes(size)} of RAM: {names}",
                      fix="no process maps or holds them (their runtime died): rm -f "
                      + " ".join(f"{shm.path}/{s.name}" for s in stale),
                      observed=f"{len(shm.segments)} runtime segment(s), {len(in_use)} in use, {len(stale)} stale",
                      expected="no segment without a process", source=source)
    if unknown:
        return warned(f"{len(unknown)} runtime segment(s) whose users could not be checked "
                      f"({shm.unreadable_processes} processes unreadable)",
                      fix="run `hostctl doctor` as root to tell stale segments from live ones",
                      observed=", ".join(s.name for s in unknown), source=source)
    return passed(f"no stale runtime segments ({len(in_use)} in use)" if in_use else "no runtime segments",
                  source=source)


CHECKS = (ram_swap, swap, swappiness, memlock, container_caps, shm_size, shm_stale)
