"""Memory plan: the container's RAM cap, soft reservation and RAM+swap cap, and whether the
host's RAM+swap can carry the recipe's first conversion.

Two different numbers (report 001, docs/field-reports.md): the host's MemTotal + SwapTotal must cover the
conversion (>= 220 GiB for DeepSeek-V4), while the container's own caps keep physical RAM
in reserve so a runaway load is killed in its cgroup instead of taking the desktop down.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostctl.facts.records import HostFacts
from hostctl.plan import codes
from hostctl.plan.records import MemoryPlan
from hostctl.bytesizes import GIB, docker_size, fmt_gib

if TYPE_CHECKING:  # annotations only: doctor's checks import these modules without a profile
    from hostctl.config import Config

# "GB" in recipes is the vendor's decimal figure; MemTotal sits a few percent below the installed RAM
# (the kernel and firmware keep their share), so a recipe's host_ram_gb is met at 93% of it.
HOST_RAM_SLACK = 0.93

# With less than this the container cannot even start a runtime; refuse rather than render a cap
# that only produces an OOM kill.
MIN_CONTAINER_RAM = 2 * GIB
# Default share of swap the container may use when the profile does not set container_ram_swap:
# the rest stays for the host, which also pages under a heavy conversion.
DEFAULT_SWAP_SHARE = 0.75


def _floor_gib(n: int) -> int:
    return (n // GIB) * GIB


def plan_memory(config: Config, facts: HostFacts) -> MemoryPlan:
    policy = config.profile.memory
    recipe = config.recipe
    ram, swap = facts.memory.mem_total_bytes, facts.memory.swap_total_bytes
    plan = MemoryPlan(host_ram_bytes=ram, host_swap_bytes=swap, host_reserve_bytes=policy.host_reserve)

    if policy.container_ram is not None:
        limit = policy.container_ram
        plan.limit_bytes = limit
        plan.decide("container RAM cap", docker_size(limit), "set in the profile (memory.container_ram)")
        if limit < MIN_CONTAINER_RAM:
            plan.problem(codes.MEMORY_CONTAINER_RAM_LOW, "warn", f"memory.container_ram {fmt_gib(limit)} is below {fmt_gib(MIN_CONTAINER_RAM)}: the "
                         "runtime will most likely be OOM-killed while it starts",
                         fix="raise memory.container_ram (or remove it to derive the cap from host_reserve)")
        if limit > ram - policy.host_reserve:
            plan.problem(codes.MEMORY_CONTAINER_RAM_OVER_RESERVE, "warn", f"memory.container_ram {fmt_gib(limit)} leaves less than the host reserve "
                         f"{fmt_gib(policy.host_reserve)} of this host's {fmt_gib(ram)} RAM",
                         fix="lower memory.container_ram or memory.host_reserve")
    else:
        limit = _floor_gib(ram - policy.host_reserve)
        if limit < MIN_CONTAINER_RAM:
            plan.problem(
                codes.MEMORY_CONTAINER_NO_ROOM,
                "error",
                f"host RAM {fmt_gib(ram)} minus the host reserve {fmt_gib(policy.host_reserve)} leaves "
                f"{fmt_gib(max(limit, 0))} for the container; at least {fmt_gib(MIN_CONTAINER_RAM)} is needed",
                fix="lower memory.host_reserve in the profile, or add RAM",
            )
            return plan
        plan.limit_bytes = limit
        plan.decide(
            "container RAM cap",
            docker_size(limit),
            f"MemTotal {fmt_gib(ram)} minus host reserve {fmt_gib(policy.host_reserve)}, rounded down to whole GiB: "
            "the cgroup kills the runtime before the kernel's OOM killer picks a desktop process",
        )

    reservation = min(limit, max(limit - policy.reservation_margin, MIN_CONTAINER_RAM))
    plan.reservation_bytes = reservation
    plan.decide(
        "container RAM reservation",
        docker_size(reservation),
        f"{fmt_gib(policy.reservation_margin)} below the cap: under pressure the kernel reclaims from the "
        "container down to this soft limit before it touches the host's share",
    )

    host_room = ram + swap - policy.host_reserve
    if policy.container_ram_swap is not None:
        ram_swap = policy.container_ram_swap
        why = "set in the profile (memory.container_ram_swap)"
    else:
        ram_swap = limit + _floor_gib(int(swap * DEFAULT_SWAP_SHARE))
        why = f"RAM cap plus {DEFAULT_SWAP_SHARE:.0%} of the host's {fmt_gib(swap)} swap, leaving the rest to the host"
    if ram_swap < limit:
        plan.problem(
            codes.MEMORY_CONTAINER_SWAP_BELOW_RAM,
            "error",
            f"memory.container_ram_swap {fmt_gib(ram_swap)} is below the container RAM cap {fmt_gib(limit)}",
            fix="set memory.container_ram_swap to at least the RAM cap (Docker's --memory-swap counts RAM too)",
        )
    elif ram_swap > host_room:
        plan.problem(
            codes.MEMORY_CONTAINER_SWAP_OVER_HOST,
            "error",
            f"memory.container_ram_swap {fmt_gib(ram_swap)} exceeds the host's RAM+swap less its reserve "
            f"({fmt_gib(host_room)}): the container could exhaust the host before its own cap acts",
            fix=f"lower memory.container_ram_swap to {fmt_gib(_floor_gib(host_room))} or add swap (hostctl provision --only storage)",
        )
    plan.ram_swap_bytes = ram_swap
    plan.decide("container RAM+swap cap", docker_size(ram_swap), why)

    if recipe.requires.host_ram_gb and ram < recipe.requires.host_ram_gb * 10**9 * HOST_RAM_SLACK:
        plan.problem(
            codes.MEMORY_HOST_RAM_SHORT,
            "error",
            f"the recipe requires about {recipe.requires.host_ram_gb:g} GB of host RAM; this host has {fmt_gib(ram)}",
            fix="choose a recipe for this host or add RAM",
        )

    need = int(recipe.conversion.host_ram_swap_gib * GIB)
    plan.conversion_need_bytes = need
    if need == 0:
        plan.conversion_verdict = "not_needed"
        plan.decide("conversion RAM+swap", "not needed", "the recipe declares no conversion need")
    elif ram + swap >= need:
        plan.conversion_verdict = "ok"
        plan.decide(
            "conversion RAM+swap",
            "ok",
            f"host MemTotal+SwapTotal {fmt_gib(ram + swap)} covers the recipe's first-conversion need of {fmt_gib(need)}",
        )
    else:
        missing = need - (ram + swap)
        plan.conversion_verdict = "short"
        plan.conversion_missing_bytes = missing
        plan.decide(
            "conversion RAM+swap",
            f"short by {fmt_gib(missing)}",
            f"host MemTotal+SwapTotal {fmt_gib(ram + swap)} < the first conversion's {fmt_gib(need)}",
        )
        severity = "error" if config.profile.phase == "converting" else "warn"
        plan.problem(
            codes.MEMORY_HOST_CONVERSION_SHORT,
            severity,
            f"host RAM+swap is {fmt_gib(ram + swap)}; the recipe's first conversion needs {fmt_gib(need)} "
            f"({fmt_gib(missing)} missing)"
            + ("" if severity == "error" else "; serving from complete caches does not need it, a re-conversion would"),
            fix=f"add at least {fmt_gib(missing)} of swap (NVMe swap partitions: hostctl provision --only storage)",
        )
    return plan
