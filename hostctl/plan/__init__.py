"""Pure planning: (Config, HostFacts) -> Plan, every decision with its reason. records.py holds the
Plan and its sections, codes.py the problem codes, requests.py which directories the facts must
describe; each other module plans one section. No I/O happens in this package."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hostctl.config import Config
    from hostctl.facts.records import HostFacts
    from hostctl.plan.records import Plan


def build_plan(config: Config, facts: HostFacts) -> Plan:
    # The planners are imported here, not at the top: doctor's checks import hostctl.plan.codes
    # (and so this package) on a host without a profile, where no plan is built and the config
    # records and the runtime planner (~30 ms) are not needed.
    from hostctl.plan.box import plan_box
    from hostctl.plan.memory import plan_memory
    from hostctl.plan.records import Plan
    from hostctl.plan.nccl import plan_nccl
    from hostctl.plan.placement import plan_placement
    from hostctl.plan.power import plan_power
    from hostctl.plan.runtime import plan_runtime
    from hostctl.plan.storage import plan_storage

    memory = plan_memory(config, facts)
    placement = plan_placement(config, facts)
    nccl = plan_nccl(config, facts, placement)
    storage = plan_storage(config, facts, world=max(len(placement.gpus), 1))
    power = plan_power(config, facts)
    runtime = plan_runtime(config, memory, placement, nccl, storage)
    return Plan(
        profile=config.profile.name,
        recipe=config.recipe.id,
        phase=config.profile.phase,
        memory=memory,
        placement=placement,
        nccl=nccl,
        storage=storage,
        power=power,
        runtime=runtime,
        box=plan_box(config, facts),
        warnings=list(config.warnings),
    )


def alias_requests(config: Config) -> list[str]:
    """The `path:` drive identities, which facts resolve to the devices they lead to."""
    return [d.identity.value for d in config.profile.drives if d.identity.kind == "path"]


def role_paths(config: Config) -> list[tuple[str, str]]:
    """(role, directory) of each storage role the profile places: in its drive's folder, or the
    directory it names (hostctl metrics reports each one's free space)."""
    from hostctl.plan.storage import DEFAULT_COMPILE_CACHE, ROLE_DIRS
    from hostctl.storage_roles import ROLES

    profile = config.profile
    out: list[tuple[str, str]] = []
    for role in ROLES:
        target = getattr(profile.storage, role)
        if target is None and role == "compile_cache":
            target = DEFAULT_COMPILE_CACHE  # the plan keeps it in the state directory when no drive is named
        if target is None:
            continue
        drive = profile.drive(target)
        out.append((role, f"{drive.mount}/{ROLE_DIRS[role]}" if drive else target))
    return out


def path_requests(config: Config) -> list[tuple[str, bool]]:
    """Directories the plan reads facts about: (path, list its files?)."""
    from hostctl.plan.storage import rank_store_dir

    profile = config.profile
    out = [(path, role == "expert_store") for role, path in role_paths(config)]
    roles = profile.storage
    for rank, name in enumerate(roles.rank_stores):
        drive = profile.drive(name)
        if drive is not None:
            out.append((rank_store_dir(drive.mount, rank), True))
    if profile.runtime.model_dir:
        out.append((profile.runtime.model_dir, False))
    return out
