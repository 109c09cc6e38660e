"""`hostctl init`'s decisions: propose(facts, recipes, options) -> Proposal. Pure: it reads a
HostFacts and the recipes it is given, and builds the profile a careful user would write for this
host, every value with its reason:

- the recipe: the one asked for, or the one whose `requires` (gpus, vram_gb, host_ram_gb) fit
  this host best and whose plan has no error here; none, with the reason, when nothing fits;
- the drives: named with --drives, or proposed (to be confirmed) from the disks that are not the
  system disk and that the storage planner would lay out without refusing (blank, or hostctl's
  own layout, which is kept as it is);
- swap sizes from the recipe's first-conversion need (plan/memory.py: MemTotal + SwapTotal), the
  storage roles from its cache needs, the memory reserve, the phase, GPU power limits (left at
  the default unless asked, each GPU's range shown), and the API on 127.0.0.1.
"""

from __future__ import annotations

import copy
import math
import posixpath
import re
from typing import Any

from hostctl.config import Config, HostProfile, Recipe, parse_profile
from hostctl.errors import InputError
from hostctl.facts.disks import resolve_identity
from hostctl.facts.records import HostFacts
from hostctl.plan import build_plan
from hostctl.plan.memory import MIN_CONTAINER_RAM
from hostctl.plan.power import TOLERANCE_W
from hostctl.plan.storage import DEFAULT_COMPILE_CACHE, ROLE_DIRS
from hostctl.plan.requests import tensor_parallel
from hostctl.profile_init import drives as drv
from hostctl.profile_init.recipes import rank, recipe_fit
from hostctl.profile_init.records import (
    Choice,
    DriveChoice,
    GpuRange,
    InitOptions,
    Proposal,
    RecipeOption,
    RecipeSource,
    SkippedDisk,
    SwapArithmetic,
)
from hostctl.bytesizes import GIB, MIB, fmt_bytes, fmt_gib

API_HOST = "127.0.0.1"
API_PORT = 8000
# Physical RAM kept outside the container: an eighth of MemTotal, within these bounds. The bundled
# desktop (runtime/hosts/pro6000x2-desktop.toml: 45 GiB, with a GUI) keeps 11 GiB; a headless
# server needs less than a desktop.
RESERVE_SHARE = 1 / 8
RESERVE_MIN, RESERVE_MAX = 4 * GIB, 16 * GIB
PLAIN_ROOT = "/var/lib/hostctl"  # role directories when there is no data drive (beside the compile cache)
MODELS_ROOT = "/srv/models"


# ---------------------------------------------------------------- small choices


PROFILE_NAME_MAX = 64  # config's profile name pattern


def profile_name(hostname: str) -> str:
    """A profile name from a hostname or a box id: lower case, other characters as '-', at most 64
    characters (a box id may have 128)."""
    name = re.sub(r"[^a-z0-9._-]+", "-", hostname.lower()).lstrip("._-")
    return (name or "host")[:PROFILE_NAME_MAX]


def size_text(n: int) -> str | int:
    """A size as a profile writes it: whole GiB, else whole MiB (swap sizes are whole MiB)."""
    if n == 0:
        return 0
    if n % GIB == 0:
        return f"{n // GIB}GiB"
    return f"{math.ceil(n / MIB)}MiB"


def host_reserve(facts: HostFacts) -> tuple[int, str]:
    ram = facts.memory.mem_total_bytes
    share = math.ceil(ram * RESERVE_SHARE / GIB) * GIB
    reserve = min(max(share, RESERVE_MIN), RESERVE_MAX)
    why = (f"1/8 of MemTotal {fmt_gib(ram)}, rounded up to whole GiB, kept within {fmt_gib(RESERVE_MIN)}-"
           f"{fmt_gib(RESERVE_MAX)}: physical RAM outside the container for the kernel, drivers and page cache, "
           "so a runaway load is killed in its cgroup first; raise it on a desktop with a GUI (the bundled "
           "pro6000x2-desktop profile keeps 11 GiB of 45 GiB)")
    room = (ram // GIB) * GIB - MIN_CONTAINER_RAM
    if reserve > room:
        reserve = max(room, GIB)
        why = (f"MemTotal {fmt_gib(ram)} is small: the reserve is what is left after the {fmt_gib(MIN_CONTAINER_RAM)} "
               "the container needs at least")
    return reserve, why


def _gpu_ranges(facts: HostFacts) -> list[GpuRange]:
    return [GpuRange(index=g.index, name=g.name, uuid=g.uuid, min_w=g.power.min_w, max_w=g.power.max_w,
                     default_w=g.power.default_w, limit_w=g.power.limit_w)
            for g in sorted(facts.gpus.devices, key=lambda g: g.index)] if facts.gpus.available else []


def _check_power(asked: float, gpus: list[GpuRange], facts: HostFacts) -> None:
    if asked <= 0:
        raise InputError(f"--power-limit: expected a positive number of watts, got {asked:g}")
    if not gpus:
        raise InputError(f"--power-limit {asked:g}: no GPU can be read here ({facts.gpus.reason}), so the limit "
                         "cannot be checked against a GPU's range; nothing was written",
                         fix="run `hostctl init` on the host with its driver loaded, or leave the limit out")
    for g in gpus:
        if g.min_w is not None and g.max_w is not None and not (g.min_w - TOLERANCE_W <= asked <= g.max_w + TOLERANCE_W):
            raise InputError(f"--power-limit {asked:g}: outside GPU {g.index} ({g.name})'s range "
                             f"{g.min_w:g}-{g.max_w:g} W; nothing was written",
                             fix=f"choose a limit between {max(x.min_w or 0 for x in gpus):g} and "
                             f"{min(x.max_w or asked for x in gpus):g} W")


def _power_reason(asked: float | None, gpus: list[GpuRange], facts: HostFacts) -> str:
    if not gpus:
        return f"no GPU can be read here ({facts.gpus.reason}): no power limit"
    if asked is None:
        return "left at each GPU's default: the profile sets none, so hostctl changes nothing (set gpu.power_limit_w " \
               "within every range listed to cap them)"
    return "asked with --power-limit; within every GPU's range"


# ---------------------------------------------------------------- drives


def _named(options: InitOptions, facts: HostFacts, judged: dict[str, drv.Candidate]) -> list[drv.Candidate]:
    chosen: list[drv.Candidate] = []
    for ident in options.drives or ():
        matches = resolve_identity(ident.kind, ident.value, facts.disks).disks
        if not matches:
            known = "; ".join(f"{d.path} ({drv.stable_identity(d, facts.disks.devices)})" for d in facts.disks.devices)
            raise InputError(f"--drives {ident}: no disk on this host has that identity; nothing was written",
                             details=[f"disks: {known or 'none'}" + ("" if facts.disks.available
                                                                      else f" ({facts.disks.reason})")],
                             fix="name a disk by an identity `hostctl facts` lists (serial:, wwn:, by-id:, path:)")
        if len(matches) > 1:
            raise InputError(f"--drives {ident}: matches {len(matches)} disks ({', '.join(d.path for d in matches)}); "
                             "nothing was written", fix="name it by a unique identity (wwn: or by-id:)")
        c = judged[matches[0].path]
        if c.problem:
            raise InputError(f"--drives {ident}: {matches[0].path} would be refused: {c.problem}; nothing was written",
                             fix="choose another drive (`hostctl facts` lists them): init names only drives that "
                             "`hostctl provision` would lay out without --erase")
        if any(x.disk.path == c.disk.path for x in chosen):
            raise InputError(f"--drives {ident}: names {c.disk.path} a second time; nothing was written")
        c.named = True
        if ident != c.identity:
            c.notes.append(f"named on the command line as {ident}; written as {c.identity}, which "
                           + ("does not move between boots" if c.identity.kind != "path" else "names it here"))
        chosen.append(c)
    names = [c.existing.name for c in chosen if c.existing is not None]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise InputError(f"--drives: two of the named disks carry hostctl's layout for drive {dup!r}; a profile "
                         "names each drive once; nothing was written", fix="name one of them")
    return chosen


def _proposed(facts: HostFacts, judged: dict[str, drv.Candidate], skipped: list[SkippedDisk]) -> list[drv.Candidate]:
    chosen: list[drv.Candidate] = []
    names: set[str] = set()
    for disk in facts.disks.devices:
        c = judged[disk.path]
        reason = c.problem
        if reason is None and disk.removable:
            reason = "removable (a USB or card drive, perhaps someone's backup): name it with --drives to use it"
        if reason is None and c.existing is not None and c.existing.name in names:
            reason = f"carries hostctl's layout for drive {c.existing.name!r}, which another disk here also does"
        if reason is not None:
            skipped.append(SkippedDisk(disk=disk.path, identity=str(c.identity), size_bytes=disk.size_bytes,
                                       reason=reason))
            continue
        if c.existing is not None:
            names.add(c.existing.name)
        chosen.append(c)
    # Swap at one priority is striped over every drive, so one spinning disk slows all of it: use
    # spinning disks only when there is nothing faster.
    fast = [c for c in chosen if not c.disk.rotational]
    if fast and len(fast) < len(chosen):
        for c in chosen:
            if c.disk.rotational:
                skipped.append(SkippedDisk(disk=c.disk.path, identity=str(c.identity), size_bytes=c.disk.size_bytes,
                                           reason="a spinning disk, and faster drives are proposed: swap striped over "
                                           "both would run at its speed; name it with --drives to use it anyway"))
        chosen = fast
    for c in chosen:
        if c.disk.rotational:
            c.notes.append("a spinning disk (the kernel says rotational): swap and cache reads there are much "
                           "slower than on NVMe; it is proposed because no faster drive is free")
    return chosen


def _drive_choice(c: drv.Candidate, facts: HostFacts) -> DriveChoice:
    d = c.drive()
    v = drv.storage_verdict(d, facts)
    notes = list(c.notes)
    if c.identity.kind == "path":
        notes.append("no serial, wwn or /dev/disk/by-id name is known for it (no udev here?): named by its kernel "
                     "path, which can change between boots; prefer serial:, wwn: or by-id: where the host has them")
    if c.existing is not None:
        e = c.existing
        notes.append(f"already carries hostctl's layout for drive {e.name!r}: kept as it is (swap "
                     f"{fmt_bytes(e.swap_bytes)}, {e.filesystem}"
                     + (f", mounted at {e.mountpoint}" if e.mountpoint else "") + "); nothing is formatted again")
    return DriveChoice(name=d.name, identity=str(d.identity), disk=c.disk.path, model=c.disk.model,
                       size_bytes=c.disk.size_bytes, named=c.named, found=v.found or "?", verdict=v.status,
                       swap_bytes=d.swap, swap_priority=d.swap_priority, filesystem=d.filesystem, mountpoint=d.mount,
                       notes=notes)


def _swap_text(s: dict) -> list[str]:
    need, mem, kept, missing = s["need_bytes"], s["mem_total_bytes"], s["kept_bytes"], s["missing_bytes"]
    if not need:
        return ["the recipe declares no first-conversion need (conversion.host_ram_swap_gib): no swap partition"]
    lines = [f"the recipe's first conversion needs MemTotal + SwapTotal >= {fmt_gib(need)} (plan: conversion RAM+swap)"]
    sub = f"{fmt_gib(need)} - MemTotal {mem / GIB:.2f} GiB"
    if kept:
        sub += f" - {fmt_gib(kept)} of swap already in hostctl's layout on the drives"
    lines.append(f"{sub} = {max(need - mem - kept, 0) / GIB:.2f} GiB still needed" if need - mem - kept > 0
                 else f"{sub}: nothing more needed")
    if missing and s["new_drives"]:
        per = s["per_drive_bytes"]
        lines.append(f"{missing / GIB:.2f} GiB over {s['new_drives']} new drive(s) = {missing / s['new_drives'] / MIB:.1f} "
                     f"MiB each, rounded up to whole MiB: {per // MIB} MiB ({fmt_bytes(per)}) per drive, all at "
                     f"priority {drv.DEFAULT_PRIORITY} so the kernel stripes over them")
    if s["other_swap_bytes"]:
        lines.append(f"the host's other swap ({fmt_bytes(s['other_swap_bytes'])}, not on these drives) is not counted"
                     + ("" if s["shortfall_bytes"] else ": the need is met without it"))
    if s["shortfall_bytes"]:
        lines.append(f"SHORT by {fmt_gib(s['shortfall_bytes'])}: "
                     + ("no data drive to put swap on" if not s["new_drives"] else "the drives cannot hold it all")
                     + "; add swap or a drive (--drives), or the first conversion may be OOM-killed")
    return lines


# ---------------------------------------------------------------- storage roles


def _roles(recipe: Recipe, names: list[str], tp: int) -> tuple[dict[str, Any], list[Choice]]:
    needed = recipe.needed_roles()  # a vLLM-MoET recipe names its planes cache only by {planes_cache}
    storage: dict[str, Any] = {}
    choices: list[Choice] = []
    if names:
        first, second = names[0], names[1] if len(names) > 1 else names[0]
        if "planes_cache" in needed:
            storage["planes_cache"] = first
            choices.append(Choice(key="storage.planes_cache", value=first,
                                  reason=f"the recipe needs a planes cache: on drive {first} "
                                  f"({'/'.join(['<mount>', ROLE_DIRS['planes_cache']])})"))
        if "expert_store" in needed:
            storage["expert_store"] = second
            why = ("the recipe needs an expert store: on drive " + second
                   + (", not the planes cache's drive, so the first conversion writes to both drives at once"
                      if second != first else ""))
            choices.append(Choice(key="storage.expert_store", value=second, reason=why))
            if tp > 1 and len(names) > 1:
                ranks = [names[r % len(names)] for r in range(tp)]
                storage["rank_stores"] = ranks
                choices.append(Choice(key="storage.rank_stores", value=ranks, reason=(
                    f"TP={tp}: rank r reads its store from drive rank_stores[r], so the ranks load from different "
                    f"drives (`hostctl store split` copies each rank's files; the shared store stays on {second})")))
        storage["compile_cache"] = first
        choices.append(Choice(key="storage.compile_cache", value=first,
                              reason=f"on drive {first}, so tuned kernels survive restarts on fast storage"))
    else:
        for role in ("planes_cache", "expert_store"):
            if role in needed:
                path = f"{PLAIN_ROOT}/{ROLE_DIRS[role]}"
                storage[role] = path
                choices.append(Choice(key=f"storage.{role}", value=path, reason=(
                    f"the recipe needs a {role.replace('_', ' ')} and no data drive is in the profile: a directory "
                    "on the root filesystem (`hostctl provision --only storage` creates it)")))
        storage["compile_cache"] = DEFAULT_COMPILE_CACHE
        choices.append(Choice(key="storage.compile_cache", value=DEFAULT_COMPILE_CACHE,
                              reason="hostctl's state directory, so tuned kernels survive restarts"))
    return storage, choices


# ---------------------------------------------------------------- one profile for one recipe


class _Draft:
    """The profile init would write for one recipe, and the plan's errors on it here."""

    def __init__(self, source: RecipeSource, facts: HostFacts, options: InitOptions,
                 chosen: list[drv.Candidate], reserved: set[str]):
        recipe = source.recipe
        self.source = source
        chosen = copy.deepcopy(chosen)  # names and swap shares differ per recipe
        self.choices: list[Choice] = []
        self.warnings: list[str] = []

        drv.allocate_names(chosen, facts, reserved)
        need = int(recipe.conversion.host_ram_swap_gib * GIB)
        on_drives = {p.path for c in chosen for p in c.disk.partitions}
        other = sum(s.size_bytes for s in facts.memory.swaps if s.path not in on_drives)
        swap = drv.share_swap(chosen, need, facts.memory.mem_total_bytes, other)
        self.swap = SwapArithmetic(**swap, text=_swap_text(swap))
        if self.swap.shortfall_bytes:
            self.warnings.append(self.swap.text[-1])
        self.drives = [_drive_choice(c, facts) for c in chosen]
        unusable = [d for d in self.drives if d.verdict not in drv.USABLE]
        if unusable:  # the size of its swap share made the planner refuse it: a bug in the arithmetic
            raise AssertionError(f"init chose drives the storage planner refuses: {[d.disk for d in unusable]}")
        names = [d.name for d in self.drives]

        storage, role_choices = _roles(recipe, names, tensor_parallel(recipe))
        self.choices += role_choices
        self._cache_space(recipe, storage)
        reserve, reserve_why = host_reserve(facts)
        self.choices.append(Choice(key="memory.host_reserve", value=size_text(reserve), reason=reserve_why))
        self.phase, phase_why = self._phase(recipe, chosen)
        self.choices.append(Choice(key="phase", value=self.phase, reason=phase_why))

        runtime: dict[str, Any] = {"api_host": API_HOST, "api_port": API_PORT}
        self.choices.append(Choice(key="runtime.api_host", value=API_HOST, reason=(
            "loopback only: nothing outside this machine reaches the API; exposing it needs api_host and "
            "api_key_env (the profile refuses an exposed address without a key)")))
        self.model_dir = None
        if recipe.model.startswith("/") and options.model_dir:
            self.warnings.append(f"--model-dir ignored: recipe {recipe.id} names its model by a path inside the "
                                 f"image ({recipe.model})")
        if not recipe.model.startswith("/"):
            self.model_dir = options.model_dir or posixpath.join(MODELS_ROOT, posixpath.basename(recipe.model.rstrip("/")))
            runtime["model_dir"] = self.model_dir
            pf = facts.path(self.model_dir)
            state = ("exists on this host" if pf is not None and pf.exists else
                     "does not exist yet: put the checkpoint there" if pf is not None else "not checked")
            origin = "--model-dir" if options.model_dir else f"the default place for {recipe.model}"
            self.choices.append(Choice(key="runtime.model_dir", value=self.model_dir,
                                       reason=f"the checkpoint's directory, mounted read-only ({origin}; {state})"))

        gpu: dict[str, Any] = {}
        if options.power_limit_w is not None:
            gpu["power_limit_w"] = int(options.power_limit_w) if float(options.power_limit_w).is_integer() \
                else options.power_limit_w

        name = profile_name(facts.hostname)
        self.data: dict[str, Any] = {
            "name": name,
            "description": self._description(facts),
            "recipe": source.ref,
            "phase": self.phase,
            "memory": {"host_reserve": size_text(reserve)},
        }
        self.data["gpu"] = gpu
        self.data["storage"] = storage
        self.data["runtime"] = runtime
        if chosen:
            self.data["drives"] = [
                {"name": d.name, "identity": d.identity, "swap": size_text(d.swap_bytes),
                 "swap_priority": d.swap_priority, "filesystem": d.filesystem, "mountpoint": d.mountpoint}
                for d in self.drives]
        self.profile: HostProfile = parse_profile(self.data, "the profile hostctl init proposes")
        self.warnings += [f"drives[{i}].identity {d.identity}: kernel device names can change between boots; "
                          "prefer serial:, wwn: or by-id:" for i, d in enumerate(self.profile.drives)
                          if d.identity.kind == "path"]

    def _cache_space(self, recipe: Recipe, storage: dict[str, Any]) -> None:
        """The first conversion's free-space need against the data filesystems that will hold it."""
        need = int(recipe.conversion.cache_free_gib * GIB)
        on = {storage[r] for r in ("planes_cache", "expert_store") if r in storage}
        drives = [d for d in self.drives if d.name in on]
        if not need or not on:
            return
        if not drives:
            why = (f"the first conversion needs {fmt_gib(need)} free for planes and packs on the root filesystem "
                   "(plan and `hostctl up` check it while converting)")
            room = None
        else:
            room = sum(d.size_bytes - d.swap_bytes for d in drives)
            why = (f"the first conversion needs {fmt_gib(need)} free for planes and packs; the data filesystems of "
                   f"{', '.join(d.name for d in drives)} hold about {fmt_bytes(room)} (drive size less swap)")
            if room < need:
                why += "; SHORT: use a larger drive or add one (--drives)"
                self.warnings.append(f"cache space: {why}")
        self.choices.append(Choice(key="cache space", value=room, reason=why))

    @staticmethod
    def _description(facts: HostFacts) -> str:
        gpus = facts.gpus.devices if facts.gpus.available else []
        what = f"{len(gpus)}x {gpus[0].name}" if gpus and len({g.name for g in gpus}) == 1 else \
            (f"{len(gpus)} GPUs" if gpus else "no GPU")
        return f"{what}, {fmt_gib(facts.memory.mem_total_bytes)} RAM (written by hostctl init)"

    @staticmethod
    def _phase(recipe: Recipe, chosen: list[drv.Candidate]) -> tuple[str, str]:
        conv = recipe.conversion
        if not (conv.host_ram_swap_gib or conv.cache_free_gib):
            return "serving", "the recipe declares no first conversion: the runtime serves from its first start"
        if chosen and all(c.existing is not None for c in chosen):
            return "serving", ("the drives already carry hostctl's layout, so the caches may be built; set "
                               "phase = \"converting\" if the first conversion has not finished (swappiness 100, "
                               "stricter RAM+swap and free-space checks)")
        return "converting", (f"the first start builds the planes and packs ({fmt_gib(conv.host_ram_swap_gib * GIB)} "
                              f"RAM+swap, {fmt_gib(conv.cache_free_gib * GIB)} free cache space): swappiness 100 and "
                              "the stricter checks; set phase = \"serving\" once the caches are complete")

    def config(self, phase: str | None = None) -> Config:
        profile = self.profile if phase is None else self.profile.model_copy(update={"phase": phase})
        return Config(profile=profile, recipe=self.source.recipe, source="hostctl init")

    def plan_errors(self, facts: HostFacts, phase: str | None = None, *, fixes: bool = False) -> list[str]:
        plan = build_plan(self.config(phase), facts)
        return [f"[{p.area}] {p.message}" + (f" (fix: {p.fix})" if fixes and p.fix else "") for p in plan.errors]


# ---------------------------------------------------------------- the whole proposal


def propose(facts: HostFacts, recipes: list[RecipeSource], options: InitOptions = InitOptions()) -> Proposal:
    """Every choice of a new host profile for this host, with its reason. Raises InputError for
    --drives or --power-limit values that cannot be used (nothing is written then)."""
    gpus = _gpu_ranges(facts)
    if options.power_limit_w is not None:
        _check_power(options.power_limit_w, gpus, facts)
    if options.model_dir is not None and not options.model_dir.startswith("/"):
        raise InputError(f"--model-dir {options.model_dir}: expected an absolute path")

    judged = {d.path: drv.judge(d, facts) for d in facts.disks.devices}
    skipped: list[SkippedDisk] = []
    if options.drives is not None:
        chosen = _named(options, facts, judged)
        for d in facts.disks.devices:
            if d.path not in {c.disk.path for c in chosen}:
                c = judged[d.path]
                skipped.append(SkippedDisk(disk=d.path, identity=str(c.identity), size_bytes=d.size_bytes,
                                           reason=c.problem or "not named with --drives"))
    else:
        chosen = _proposed(facts, judged, skipped)
    # Names that hostctl layouts elsewhere on the host use stay free, so no two drives ever share one.
    reserved = {c.existing.name for c in judged.values() if c.existing is not None}

    options_list: list[RecipeOption] = []
    fitting: list[RecipeSource] = []
    for source in sorted(recipes, key=lambda s: rank(s.recipe)):
        fits, why = recipe_fit(source.recipe, facts)
        options_list.append(RecipeOption(ref=source.ref, id=source.recipe.id, fits=fits, reason=why))
        if fits:
            fitting.append(source)

    draft: _Draft | None = None
    if options.recipe is not None:
        source = next((s for s in recipes if s.ref == options.recipe), None)
        if source is None:
            raise InputError(f"--recipe {options.recipe}: not among the recipes given "
                             f"({', '.join(s.ref for s in recipes)})")
        option = next(o for o in options_list if o.ref == source.ref)
        draft = _Draft(source, facts, options, chosen, reserved)
        reason = "named with --recipe" + ("; its requires fit: " + option.reason if option.fits
                                          else "; it does NOT fit this host: " + option.reason)
        if not option.fits:
            draft.warnings.append(f"recipe {source.ref} does not fit this host: {option.reason}")
    else:
        # Among the recipes that fit, the first whose plan here has no error once its caches exist
        # (the serving phase): a recipe the plan rejects on this host (say, mapped host layers on a
        # GPU with no known NUMA node) is no choice.
        first_draft: _Draft | None = None
        for source in fitting:
            candidate = _Draft(source, facts, options, chosen, reserved)
            option = next(o for o in options_list if o.ref == source.ref)
            option.plan_errors = candidate.plan_errors(facts, phase="serving")
            first_draft = first_draft or candidate
            if not option.plan_errors:
                draft = candidate
                break
        fits_no = [o for o in options_list if not o.fits]
        if draft is not None:
            option = next(o for o in options_list if o.ref == draft.source.ref)
            passed = [o for o in options_list if o.fits and o.plan_errors]
            reason = f"its requires fit best: {option.reason}"
            if passed:
                reason += "; preferred over " + ", ".join(f"{o.ref} (fits, but the plan here says: {o.plan_errors[0]})"
                                                          for o in passed)
        elif first_draft is not None:
            draft = first_draft
            option = next(o for o in options_list if o.ref == draft.source.ref)
            reason = (f"its requires fit best: {option.reason}; but the plan here has errors with every recipe "
                      f"that fits: {option.plan_errors[0]}")
            draft.warnings.append(f"recipe {draft.source.ref}: the plan on this host has errors: "
                                  + "; ".join(option.plan_errors))
        else:
            reason = "no recipe fits this host: " + "; ".join(f"{o.ref} {o.reason}" for o in fits_no) \
                if fits_no else "no recipe to choose from"
            return Proposal(host=facts.hostname, facts_collected_at=facts.collected_at, recipe=None,
                            recipe_reason=reason, recipes=options_list, skipped_disks=skipped, gpus=gpus,
                            gpus_reason=None if gpus else facts.gpus.reason)

    choices = [Choice(key="name", value=draft.data["name"], reason=f"this host's name ({facts.hostname})"),
               Choice(key="recipe", value=draft.source.ref, reason=reason)]
    choices += draft.choices
    if chosen:
        how = ("named with --drives" if options.drives is not None else
               "proposed: not the system disk, and the storage planner would lay them out without --erase; "
               "confirm each")
        choices.append(Choice(key="drives", value=[d.name for d in draft.drives], reason=how))
    else:
        why = ("--drives none" if options.drives is not None else
               "no disk here is free for hostctl: " + ("; ".join(f"{s.disk}: {s.reason}" for s in skipped)
                                                       if skipped else (facts.disks.reason or "no disks listed")))
        choices.append(Choice(key="drives", value=[], reason=why))
    choices.append(Choice(key="swap", value={d.name: d.swap_bytes for d in draft.drives}, reason="; ".join(draft.swap.text)))
    choices.append(Choice(key="gpu.power_limit_w", value=draft.data.get("gpu", {}).get("power_limit_w"),
                          reason=_power_reason(options.power_limit_w, gpus, facts)))
    return Proposal(
        host=facts.hostname, facts_collected_at=facts.collected_at, recipe=draft.source.ref, recipe_reason=reason,
        recipes=options_list, profile=draft.data, choices=choices, drives=draft.drives, skipped_disks=skipped,
        swap=draft.swap, gpus=gpus, gpus_reason=None if gpus else facts.gpus.reason,
        plan_errors=draft.plan_errors(facts, fixes=True), warnings=draft.warnings,
    )


def path_requests(proposal: Proposal, recipes: list[RecipeSource]) -> list[tuple[str, bool]]:
    """Directories whose facts the proposal (and `hostctl plan` on it) reads: the role directories
    and the model directory. Live, init probes them and proposes again."""
    from hostctl.plan import path_requests as plan_requests

    if proposal.recipe is None:
        return []
    recipe = next(s.recipe for s in recipes if s.ref == proposal.recipe)
    profile = parse_profile(proposal.profile, "the proposed profile")
    return plan_requests(Config(profile=profile, recipe=recipe, source="hostctl init"))
