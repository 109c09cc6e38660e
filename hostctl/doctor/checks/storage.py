"""Storage checks: the mounts the plan requires, each cache role's directory (on a real
filesystem, on its drive, with the free space the recipe needs) and the rank stores (each
rank on its own filesystem, copies matching the shared store). They read the plan's storage
section, whose problems already judge the directories, and the facts' mounts and paths."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostctl.doctor.registry import Check, CheckContext, CheckResult, check, failed, passed, skipped, warned
from hostctl.plan import codes
from hostctl.storage_roles import CONVERSION_ROLES, ROLES
from hostctl.bytesizes import GIB, fmt_gib

if TYPE_CHECKING:  # annotations only: doctor without a profile builds no plan, and the plan records cost ~10-14 ms to import
    from hostctl.plan.records import Problem

PROVISION = "hostctl provision --only storage"


def _result(problems: list[Problem], observed: str, expected: str | None, source: str) -> CheckResult | None:
    if not problems:
        return None
    worst = next((p for p in problems if p.severity == "error"), problems[0])
    make = failed if worst.severity == "error" else warned
    return make("; ".join(p.message for p in problems), fix=worst.fix or PROVISION, observed=observed,
                expected=expected, source=source)


@check("storage.mounts", "the mounts the plan needs are present")
def mounts(ctx: CheckContext) -> CheckResult:
    if ctx.plan is None:
        return ctx.no_profile("no mounts to check")
    required = ctx.plan.storage.required_mounts
    source = "/proc/self/mountinfo"
    if not required:
        return skipped("the plan needs no drive mounts (its directories live on existing filesystems)")
    if not ctx.facts.mounts:
        return skipped("the facts carry no mount table", source=source)
    by_target = {m.target: m for m in ctx.facts.mounts}
    missing = [t for t in required if t not in by_target]
    observed = "; ".join(f"{t}: {by_target[t].source} ({by_target[t].fs_type})" if t in by_target else f"{t}: not mounted"
                         for t in required)
    if missing:
        return failed(f"not mounted: {', '.join(missing)}: the runtime would write its caches onto the filesystem below",
                      fix=f"mount them (`mount {missing[0]}` when fstab has the line; {PROVISION} writes it)",
                      observed=observed, expected="mounted: " + ", ".join(required), source=source)
    return passed(observed, observed, "mounted: " + ", ".join(required), source)


def _role_codes(role: str) -> tuple[str, ...]:
    return tuple(codes.role_code(role, kind) for kind in codes.ROLE_PROBLEMS)


def _role_check(role: str) -> Check:
    label = role.replace("_", " ")
    mine_codes = _role_codes(role)
    unnamed_code = codes.role_code(role, "unnamed")

    def run(ctx: CheckContext) -> CheckResult:
        if ctx.plan is None:
            return ctx.no_profile(f"no {label} to check")
        target = ctx.plan.storage.role(role)
        mine = ctx.problems(mine_codes)
        if target is None:
            unnamed = [p for p in mine if p.code == unnamed_code]
            if unnamed:
                return failed("; ".join(p.message for p in unnamed), fix=unnamed[0].fix or PROVISION, observed="no directory planned",
                              source=ctx.config.source)
            return skipped(f"the recipe uses no {label}")
        pf = ctx.facts.path(target.host_path)
        source = f"stat/statvfs {target.host_path}; /proc/self/mountinfo"
        if pf is None:
            return skipped(f"{target.host_path} was not probed (the facts describe no such directory)")
        need = ctx.config.recipe.conversion.cache_free_gib * GIB if role in CONVERSION_ROLES else 0
        expected = (f"a directory on {'drive ' + target.drive + ' at ' + target.mount if target.drive else 'a real filesystem'}"
                    + (f", >= {fmt_gib(need)} free while converting" if need else ""))
        if not pf.exists:
            observed = f"{target.host_path} missing"
        else:
            free = f", {fmt_gib(pf.free_bytes)} free of {fmt_gib(pf.total_bytes)}" if pf.free_bytes is not None else ""
            observed = (f"{target.host_path} on {pf.fs_type or 'unknown fs'} ({pf.mount_source or '?'} at "
                        f"{pf.mount_target or '?'}){free}")
        r = _result(mine, observed, expected, source)
        if r is not None:
            return r
        note = ""
        if need and pf.free_bytes is not None and pf.free_bytes < need:
            note = f" (a re-conversion would need {fmt_gib(need)} free)"
        return passed(observed + note, observed, expected, source)

    run.__name__ = f"dir_{role}"
    return check(f"storage.dir.{role}", f"{label} directory on a real filesystem with room", codes=mine_codes)(run)


ROLE_CHECKS = tuple(_role_check(role) for role in ROLES)
RANK_CODES = (codes.RANK_STALE_COPY, codes.RANK_NOT_SPLIT)


@check("storage.rank_stores", "rank stores on distinct filesystems, copies matching", codes=RANK_CODES)
def rank_stores(ctx: CheckContext) -> CheckResult:
    if ctx.plan is None:
        return ctx.no_profile("no rank stores to check")
    stores = ctx.plan.storage.rank_stores
    if not stores:
        return skipped("the profile names no rank stores (storage.rank_stores)")
    source = "the rank store directories' file lists and mounts"
    shared = ctx.plan.storage.role("expert_store")
    reads: dict[int, tuple[str, str | None]] = {}  # rank -> (directory it reads, filesystem source)
    for rs in stores:
        where = rs.host_dir if (rs.shared or rs.files) else (shared.host_path if shared else rs.host_dir)
        pf = ctx.facts.path(where)
        reads[rs.rank] = (where, pf.mount_source if pf else None)
    observed = "; ".join(f"rank {rs.rank}: {rs.status} -> reads {reads[rs.rank][0]} ({reads[rs.rank][1] or '?'})"
                         for rs in stores)
    expected = "each rank reads its own filesystem; copies the same size as the shared store's files"
    problems = ctx.problems(RANK_CODES)
    r = _result(problems, observed, expected, source)
    if r is not None:
        return r
    by_fs: dict[str, list[int]] = {}
    for rank, (_, fs) in reads.items():
        if fs is not None:
            by_fs.setdefault(fs, []).append(rank)
    shared_fs = [ranks for ranks in by_fs.values() if len(ranks) > 1]
    if shared_fs:
        return warned(f"ranks {', '.join(map(str, shared_fs[0]))} read the same filesystem, so they share one drive's "
                      "bandwidth", fix="run `hostctl store split`", observed=observed, expected=expected, source=source)
    if any(fs is None for _, fs in reads.values()):
        return skipped("where some rank store lives is unknown (not probed)", source=source)
    return passed(f"{len(stores)} rank(s) on {len(by_fs)} filesystem(s)", observed, expected, source)


DRIVE_CODES = (codes.STORAGE_DRIVES_INVALID, codes.STORAGE_DRIVE_UNRESOLVED, codes.STORAGE_DRIVE_REFUSED,
               codes.STORAGE_FILE_UNEDITABLE)


@check("storage.drives", "the profile's drives are ones provision can lay out", codes=DRIVE_CODES)
def drives(ctx: CheckContext) -> CheckResult:
    if ctx.plan is None or ctx.config is None:
        return ctx.no_profile("no drives to check")
    named = ctx.config.profile.drives
    if not named:
        return skipped("the profile names no drives")
    source = "the disks in the facts, judged as `hostctl provision --only storage --dry-run` judges them"
    if not ctx.facts.disks.available:
        return skipped(f"disk facts unavailable: {ctx.facts.disks.reason}", source=source)
    observed = ", ".join(f"{d.name} ({d.identity})" for d in named)
    expected = "each drive one disk of its own that provision would lay out, keep or converge"
    r = _result(ctx.problems(DRIVE_CODES), observed, expected, source)
    if r is not None:
        return r
    return passed(f"{len(named)} drive(s) provision would accept", observed, expected, source)


CHECKS = (mounts, *ROLE_CHECKS, rank_stores, drives)
