"""Storage plan: where each cache role lives (planes cache, expert store, compile cache), which
drive holds each tensor-parallel rank's store, and the files bound over the shared store path.

A rank store is the per-rank set of expert-store files vLLM-MoET writes:
`<stem>.rank<r>of<N>.pack`, its `.json` sidecar and `.lock`. Report 001 (docs/field-reports.md) copied rank 0's
files to the other SSD and bound them file by file over the shared store, so each rank
reads its own drive.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from hostctl.facts.records import HostFacts
from hostctl.plan import codes
from hostctl.plan.records import RankStore, RoleTarget, StoragePlan
from hostctl.storage_roles import CONVERSION_ROLES, ROLES
from hostctl.bytesizes import GIB, fmt_gib

if TYPE_CHECKING:  # annotations only: doctor's checks import these modules without a profile
    from hostctl.config import Config

CONTAINER_PATHS = {"planes_cache": "/planes", "expert_store": "/packs", "compile_cache": "/root/.cache"}
ROLE_DIRS = {"planes_cache": "moet-planes", "expert_store": "moet-store", "compile_cache": "compile-cache"}
DEFAULT_COMPILE_CACHE = "/var/lib/hostctl/compile-cache"
RANK_FILE_EXTS = ("pack", "json", "lock")
# Filesystems that live in RAM or in a container layer: an expert store there silently eats memory.
NOT_A_REAL_FS = {"overlay", "tmpfs", "ramfs", "aufs"}


def rank_store_dir(mount: str, rank: int) -> str:
    return f"{mount}/{ROLE_DIRS['expert_store']}-rank{rank}"


def rank_files(names: list[str], rank: int, world: int) -> list[str]:
    """The pack, sidecar and lock of one rank among a store directory's file names. A hidden name
    is never one (a temporary, or something planted to look like a fourth rank file)."""
    pattern = re.compile(rf"^(?P<stem>[^.].*)\.rank{rank}of{world}(?:\.pp\d+of\d+)?\.(?:{'|'.join(RANK_FILE_EXTS)})$")
    return sorted(n for n in names if pattern.match(n))


def _role_target(config: Config, role: str, plan: StoragePlan) -> RoleTarget | None:
    target = getattr(config.profile.storage, role)
    if target is None and role == "compile_cache":
        plan.decide("compile cache", DEFAULT_COMPILE_CACHE,
                    "no drive named for it: kept in hostctl's state directory so tuned kernels survive restarts")
        return RoleTarget(role=role, drive=None, host_path=DEFAULT_COMPILE_CACHE,
                          container_path=CONTAINER_PATHS[role], mount=None)
    if target is None:
        return None
    drive = config.profile.drive(target)
    if drive is None:
        return RoleTarget(role=role, drive=None, host_path=target, container_path=CONTAINER_PATHS[role], mount=None)
    return RoleTarget(role=role, drive=drive.name, host_path=f"{drive.mount}/{ROLE_DIRS[role]}",
                      container_path=CONTAINER_PATHS[role], mount=drive.mount)


def plan_storage(config: Config, facts: HostFacts, world: int) -> StoragePlan:
    plan = StoragePlan()
    # A role the recipe's env or serve_args name by placeholder is needed like one in `storage:`:
    # mounted, checked and provisioned (vLLM-MoET's recipes say it only by placeholder).
    fields = [(where, m.group(1)) for where, m in config.recipe.placeholders() if m.group(1) in ROLES]
    needed = config.recipe.needed_roles() | {"compile_cache"}
    for role in ROLES:
        target = _role_target(config, role, plan)
        if target is None:
            if role in needed:
                _unnamed(plan, role, [where for where, r in fields if r == role])
            continue
        if role not in needed:
            continue
        plan.roles.append(target)
        if getattr(config.profile.storage, role) is not None:
            where = f"drive {target.drive} ({target.mount})" if target.drive else "a directory"
            plan.decide(role.replace("_", " "), target.host_path, f"storage.{role} names {where}")
        _check_path(config, facts, target, plan)

    store = plan.role("expert_store")
    if config.profile.storage.rank_stores and store is not None and world >= 1:
        drives = config.profile.storage.rank_stores
        shared_facts = facts.path(store.host_path)
        shared_names = [n for n, _ in (shared_facts.files or [])] if shared_facts else []
        for rank in range(world):
            name = drives[rank % len(drives)]
            drive = config.profile.drive(name)
            if drive is None:
                continue
            if name == store.drive:
                plan.rank_stores.append(RankStore(rank=rank, drive=name, host_dir=store.host_path, shared=True,
                                                  status="reads the shared expert store"))
                plan.decide(f"rank {rank} store", name, "the shared expert store is on this drive")
                continue
            host_dir = rank_store_dir(drive.mount, rank)
            copy = facts.path(host_dir)
            files = rank_files([n for n, _ in (copy.files or [])], rank, world) if copy else []
            sizes = dict(copy.files or []) if copy else {}
            shared_sizes = dict(shared_facts.files or []) if shared_facts else {}
            entry = RankStore(rank=rank, drive=name, host_dir=host_dir, shared=False, status="")
            if len(files) == len(RANK_FILE_EXTS):
                mismatched = [f for f in files if f in shared_sizes and shared_sizes[f] != sizes[f] and not f.endswith(".lock")]
                if mismatched:
                    entry.status = "stale copy"
                    plan.problem(codes.RANK_STALE_COPY, "error", f"rank {rank}'s copy on {name} differs in size from the shared store: "
                                 + ", ".join(mismatched), fix="re-run `hostctl store split`")
                else:
                    entry.files = files
                    entry.status = f"split: {len(files)} files bound over the shared store path"
                    plan.decide(f"rank {rank} store", name,
                                f"rank {rank} reads its own copy on {name}, so the ranks load from different drives")
            else:
                entry.status = "not split yet"
                plan.decide(f"rank {rank} store", f"{store.drive} (shared)",
                            f"no copy of rank {rank}'s files in {host_dir} yet; it reads the shared store")
                if rank_files(shared_names, rank, world):
                    plan.problem(codes.RANK_NOT_SPLIT, "warn", f"rank {rank} should read from {name} but its files are only in the shared store",
                                 fix="run `hostctl store split`")
            plan.rank_stores.append(entry)
            if entry.files and drive.mount not in plan.required_mounts:
                plan.required_mounts.append(drive.mount)

    for target in plan.roles:
        if target.mount and target.mount not in plan.required_mounts:
            plan.required_mounts.append(target.mount)
    plan.required_mounts.sort()
    if plan.required_mounts:
        plan.decide("required mounts", " ".join(plan.required_mounts),
                    "the service unit waits for these mounts (RequiresMountsFor=): a cache drive that did not "
                    "come up must stop the start, not let the runtime fill the root filesystem")
    return plan


def _unnamed(plan: StoragePlan, role: str, fields: list[str]) -> None:
    """A role the recipe needs and the profile does not name: one error per field whose placeholder then
    has no value (the runtime leaves them out of a plan that cannot start), else one for `storage:`."""
    label = role.replace("_", " ")
    fix = f"set storage.{role} to a drive name or an absolute directory (hostctl provision --only storage creates it)"
    for where in sorted(set(fields), key=fields.index):
        plan.problem(codes.role_code(role, "unnamed"), "error",
                     f"{where}: {{{role}}} has no value: the profile names no storage.{role}", fix=fix)
    if not fields:
        plan.problem(codes.role_code(role, "unnamed"), "error",
                     f"the recipe needs {'an' if label[0] in 'aeiou' else 'a'} {label} but the profile names none", fix=fix)


def _check_path(config: Config, facts: HostFacts, target: RoleTarget, plan: StoragePlan) -> None:
    pf = facts.path(target.host_path)
    if pf is None:
        return
    label = target.role.replace("_", " ")
    if not pf.exists:
        plan.problem(codes.role_code(target.role, "missing"), "warn", f"{label} directory {target.host_path} does not exist yet",
                     fix="hostctl provision --only storage creates it")
        return
    if pf.fs_type in NOT_A_REAL_FS:
        plan.problem(codes.role_code(target.role, "not_real_fs"), "error", f"{label} {target.host_path} is on {pf.fs_type}: its contents would live in RAM "
                     "or a container layer", fix="put it on a real filesystem (a provisioned drive)")
    if target.mount and pf.mount_target != target.mount:
        plan.problem(codes.role_code(target.role, "not_mounted"), "error", f"{label} {target.host_path} is on {pf.mount_target or 'an unknown mount'}, not on "
                     f"drive {target.drive}'s mount {target.mount}: the drive is not mounted",
                     fix=f"mount {target.mount} (hostctl provision --only storage)")
    need = config.recipe.conversion.cache_free_gib * GIB
    if config.profile.phase == "converting" and need and target.role in CONVERSION_ROLES \
            and pf.free_bytes is not None and pf.free_bytes < need:
        plan.problem(codes.role_code(target.role, "no_space"), "error", f"{label} filesystem has {fmt_gib(pf.free_bytes)} free; the first conversion needs "
                     f"{fmt_gib(need)} (ENOSPC otherwise)", fix="free space or use a larger drive")
