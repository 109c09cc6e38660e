"""Cache decisions, pure: which files make one generation, whether it is complete by the
runtime's own rules, whether the current plan uses it, and what a prune removes.

"Used by the current plan" compares what hostctl can derive with the runtime's own key:
- planes and packs: the checkpoint identity (identity.py: the runtime's `ckpt_id`, computed from
  the checkpoint on this host) and the tensor-parallel size. The other key fields
  (quantizer_abi, zero_mode, fp4_split) come from the runtime image and its settings, which
  hostctl cannot read without starting it: every generation that matches on checkpoint and TP
  counts as used, so a prune never guesses between them;
- a pack the runtime said it opened at the last ready `up` of this profile, recipe and image counts
  as used whatever hostctl computes (a check on that computation, which has not been compared
  with a running runtime);
- the compile cache: vLLM's hash cannot be computed; the runtime names its directory in its log,
  and `up` records that when the service became ready (usage.py). A hash named by the last ready
  `up` of this profile, recipe and image is used, the others are not; with no such record every
  compile generation is "unknown".
"unknown" is never pruned: hostctl removes only what it knows the plan does not use.
"""

from __future__ import annotations

import json
from typing import Literal

from pydantic import Field

from hostctl.data import Data
from hostctl.facts import cache_layout as layout
from hostctl.facts.caches import CacheFacts, CompileHash, Other, PackRank, PlanesRank

Use = Literal["used", "unused", "unknown"]
Kind = Literal["planes", "pack", "compile"]


class PlanKey(Data):
    """What the current plan would key its caches by, as far as hostctl can tell."""

    world: int
    roots: dict[str, str]  # planned role -> host directory: planes_cache, expert_store, compile_cache
    ckpt_id: str | None
    ckpt_reason: str
    compile_hashes: list[str] | None = None  # from the last ready `up` of this profile, recipe and image
    compile_reason: str = "no `hostctl up` of this profile, recipe and image has recorded its compile cache yet"
    packs_opened: list[str] = Field(default_factory=list)  # pack files the runtime named at that `up`
    conversion_layers: int | None = None
    checkpoint: str | None = None  # what the checkpoint is, in words (its manifest's repo@revision)


class Generation(Data):
    kind: Kind
    id: str
    root: str
    paths: list[str]  # what removing it deletes: directories (planes, compile) or files (packs)
    key: dict
    world: int | None
    ranks: list[int]
    size_bytes: int  # blocks allocated: what removing it frees
    apparent_bytes: int
    files: int
    last_written: float
    complete: bool = True
    problems: list[str] = Field(default_factory=list)  # why it is incomplete
    use: Use = "unknown"
    use_reason: str = ""
    last_used: str | None = None  # recorded by `up` (usage.py)
    copies: list[tuple[str, str]] = Field(default_factory=list)  # (rank store copy, its source in the shared store)

    def to_dict(self) -> dict:
        d = self.model_dump()
        d["copies"] = [{"copy": c, "source": s} for c, s in self.copies]
        return d


# ---------------------------------------------------------------- planes


def _planes_generations(ranks: list[PlanesRank], key: PlanKey) -> list[Generation]:
    groups: dict[tuple[str, str], list[PlanesRank]] = {}
    for r in ranks:
        if r.meta is None:
            gk = f"unreadable:{r.key_dir}"
        else:
            gk = json.dumps(layout.planes_generation_key(r.meta), sort_keys=True)
        groups.setdefault((r.root, gk), []).append(r)
    out = []
    for (root, gk), members in sorted(groups.items()):
        members.sort(key=lambda r: r.rank)
        meta = members[0].meta or {}
        gen_key = layout.planes_generation_key(meta) if members[0].meta is not None else {}
        world = meta.get("world") if isinstance(meta.get("world"), int) else members[0].world
        g = Generation(
            kind="planes", id="planes:" + (layout.short_digest(gen_key)[:12] if gen_key else
                                           members[0].key_dir.rsplit("/", 1)[-1]),
            root=root, paths=sorted({r.key_dir for r in members}), key=gen_key, world=world,
            ranks=[r.rank for r in members],
            size_bytes=sum(r.usage.allocated for r in {r.key_dir: r for r in members}.values()),
            apparent_bytes=sum(r.usage.apparent for r in {r.key_dir: r for r in members}.values()),
            files=sum(r.usage.files for r in {r.key_dir: r for r in members}.values()),
            last_written=max(r.usage.mtime for r in members))
        _planes_complete(g, members, key)
        _planes_use(g, members, key)
        out.append(g)
    return out


def _planes_complete(g: Generation, members: list[PlanesRank], key: PlanKey) -> None:
    p = g.problems
    present = {r.rank for r in members}
    if g.world:
        missing = [r for r in range(g.world) if r not in present]
        if missing:
            p.append(f"rank(s) {missing} of TP={g.world} missing")
    fp4 = any(part in layout.PLANES_PARTS_FP4 for r in members for parts in r.layers.values() for part in parts)
    needed = layout.PLANES_PARTS_2BIT + (layout.PLANES_PARTS_FP4 if fp4 else ())
    reference: set[int] | None = None
    for r in members:
        tag = f"rank {r.rank}"
        if r.meta is None:
            p.append(f"{tag}: meta.json {r.meta_error}")
            continue
        if layout.short_digest(r.meta) != r.key_dir.rsplit("/", 1)[-1]:
            p.append(f"{tag}: meta.json does not hash to its directory's name (edited, or not the runtime's)")
        if r.meta.get("rank") != r.rank or r.meta.get("world") != r.world:
            p.append(f"{tag}: meta.json says rank {r.meta.get('rank')} of {r.meta.get('world')}, its directory "
                     f"{r.rank_dir}")
        if r.tmp:
            p.append(f"{tag}: {len(r.tmp)} file(s) still being written, or left by an interrupted write")
        if not r.layers:
            p.append(f"{tag}: no layers written")
            continue
        for layer, parts in sorted(r.layers.items()):
            lacking = [x for x in needed if x not in parts]
            if lacking:
                p.append(f"{tag}: layer {layer} lacks {', '.join(lacking)}")
        for part in needed:
            sizes = {parts[part] for parts in r.layers.values() if part in parts}
            if len(sizes) > 1:
                p.append(f"{tag}: {part} sizes differ between layers ({', '.join(map(str, sorted(sizes)))} bytes)")
        layers = set(r.layers)
        if reference is None:
            reference = layers
        elif layers != reference:
            p.append(f"{tag}: layers {sorted(layers ^ reference)} differ from rank {members[0].rank}'s")
        if key.conversion_layers and len(layers) < key.conversion_layers:
            p.append(f"{tag}: {len(layers)} of {key.conversion_layers} layers (the recipe's conversion.layers)")
    g.complete = not p


def _ckpt_use(g: Generation, ckpt_id: object, key: PlanKey, role: str, label: str) -> None:
    if role not in key.roots:
        g.use, g.use_reason = "unused", f"the current recipe uses no {label}"
    elif g.root != key.roots[role]:
        g.use, g.use_reason = "unused", f"not in the {label} directory the plan binds ({key.roots[role]})"
    elif g.world != key.world:
        g.use, g.use_reason = "unused", f"built for TP={g.world}; the plan runs TP={key.world}"
    elif ckpt_id is None:
        g.use, g.use_reason = "unknown", "its checkpoint identity cannot be read"
    elif key.ckpt_id is None:
        g.use, g.use_reason = "unknown", f"the plan's checkpoint identity is unknown: {key.ckpt_reason}"
    elif ckpt_id == key.ckpt_id:
        g.use, g.use_reason = "used", (f"built from this checkpoint at TP={key.world} (the image's own key fields, "
                                       "quantizer_abi and zero_mode, are not compared)")
    else:
        g.use, g.use_reason = "unused", "built from another checkpoint (another revision, or these files before " \
                                        "they were replaced)"


def _planes_use(g: Generation, members: list[PlanesRank], key: PlanKey) -> None:
    _ckpt_use(g, g.key.get("ckpt_id") if g.key else None, key, "planes_cache", "planes cache")


# ---------------------------------------------------------------- packs


def _pack_generations(ranks: list[PackRank], key: PlanKey) -> list[Generation]:
    groups: dict[tuple, list[PackRank]] = {}
    for r in ranks:
        groups.setdefault((r.tag, r.key, r.world, r.pp_world), []).append(r)
    out = []
    for (tag, k, world, pp_world), members in sorted(groups.items(), key=lambda kv: str(kv[0])):
        originals = sorted((r for r in members if r.copy_of is None), key=lambda r: (r.rank, r.pp or 0))
        copies = [r for r in members if r.copy_of is not None]
        sidecar = next((r.sidecar for r in originals + copies if r.sidecar is not None), None) or {}
        files = [f for r in members for f in r.files.values()]
        tmp = [f"{r.store}/{t}" for r in members for t in r.tmp]
        root = originals[0].store if originals else copies[0].copy_of or copies[0].store
        g = Generation(
            kind="pack", id=f"pack:{tag}.v2.{k}.tp{world}" + (f".pp{pp_world}" if pp_world else ""), root=root,
            paths=sorted({f.path for f in files} | set(tmp)),
            key={kk: v for kk, v in sorted(sidecar.items()) if kk != "layers"}, world=world,
            ranks=sorted({r.rank for r in members}), size_bytes=sum(f.allocated for f in files),
            apparent_bytes=sum(f.size for f in files), files=len(files) + len(tmp),
            last_written=max((f.mtime for f in files), default=0.0))
        for c in copies:
            for f in c.files.values():
                g.copies.append((f.path, f"{c.copy_of}/{f.path.rsplit('/', 1)[-1]}" if c.copy_of else ""))
        _pack_complete(g, originals, copies, k)
        _ckpt_use(g, sidecar.get("ckpt_id"), key, "expert_store", "expert store")
        opened = {f.path.rsplit("/", 1)[-1] for r in originals for f in r.files.values()} & set(key.packs_opened)
        if opened and g.use != "used" and g.root == key.roots.get("expert_store"):
            # The runtime's own word beats hostctl's reckoning of the key: never prune what it opened.
            g.use, g.use_reason = "used", "the runtime opened it at the last ready `hostctl up` (its log says so)"
        if g.use == "unknown" and "ckpt_id" in sidecar and sidecar["ckpt_id"] is None:
            g.use, g.use_reason = "unused", "written without a checkpoint identity: the runtime never reuses such a pack"
        out.append(g)
    return out


def _pack_complete(g: Generation, originals: list[PackRank], copies: list[PackRank], k: str) -> None:
    p = g.problems
    ranks = {(r.rank, r.pp or 0) for r in originals}
    pp_world = originals[0].pp_world if originals else None
    for rank in range(g.world or 0):
        for pp in range(pp_world or 1):
            if (rank, pp) not in ranks:
                p.append(f"rank {rank}" + (f" pp {pp}" if pp_world else "") + " has no pack in the shared store")
    by_name = {f.path.rsplit("/", 1)[-1]: f for r in originals for f in r.files.values()}
    for r in originals + copies:
        tag = f"rank {r.rank}" + (f" (copy in {r.store})" if r.copy_of else "")
        if "pack" not in r.files or "json" not in r.files:
            p.append(f"{tag}: {'no .pack' if 'pack' not in r.files else 'no .json sidecar'}")
            continue
        if r.tmp:
            p.append(f"{tag}: {len(r.tmp)} file(s) still being written, or left by an interrupted write")
        sc = r.sidecar
        if sc is None:
            p.append(f"{tag}: sidecar {r.sidecar_error}")
            continue
        if sc.get("version") != layout.PACK_VERSION or sc.get("tag") != r.tag:
            p.append(f"{tag}: sidecar says version {sc.get('version')} tag {sc.get('tag')!r}")
        expected_key = layout.pack_key(sc)
        if expected_key is None:
            p.append(f"{tag}: written without a checkpoint identity (the runtime never reuses it)")
        elif expected_key != k:
            p.append(f"{tag}: the sidecar does not hash to the file's key {k} (edited, or not the runtime's)")
        try:
            n_layers, experts, stride = int(sc["n_layers"]), int(sc["E"]), int(sc["stride"])
            want = n_layers * experts * stride
            layers = sorted({int(x) for x in sc.get("layers", [])})
        except (KeyError, TypeError, ValueError):
            p.append(f"{tag}: the sidecar lacks n_layers, E, stride or layers")
            continue
        if r.files["pack"].size != want:
            p.append(f"{tag}: the pack is {r.files['pack'].size} bytes; n_layers x E x stride is {want}")
        if layers != list(range(n_layers)):
            p.append(f"{tag}: {len(layers)} of {n_layers} layers written")
        if r.copy_of is not None:
            for ext, f in r.files.items():
                src = by_name.get(f.path.rsplit("/", 1)[-1])
                if ext != "lock" and src is not None and src.size != f.size:
                    p.append(f"{tag}: {f.path} is {f.size} bytes, its source {src.size}: a stale copy "
                             "(`hostctl store split` again)")
    g.complete = not p


# ---------------------------------------------------------------- compile cache


def _compile_generations(hashes: list[CompileHash], key: PlanKey) -> list[Generation]:
    out = []
    for h in hashes:
        ranks = sorted({int(r.name.split("_")[1]) for r in h.ranks})
        g = Generation(kind="compile", id=f"compile:{h.hash}", root=h.root, paths=[h.dir], key={"hash": h.hash},
                       world=(max(ranks) + 1) if ranks else None, ranks=ranks, size_bytes=h.usage.allocated,
                       apparent_bytes=h.usage.apparent, files=h.usage.files, last_written=h.usage.mtime)
        if not h.ranks:
            g.problems.append("no rank_<i>_<j> directory")
        for r in h.ranks:
            if not r.done:
                g.problems.append(f"{r.name}: no {layout.COMPILE_DONE} (compilation did not finish)")
            for prefix in r.pending:
                g.problems.append(f"{r.name}/{prefix}: no {layout.COMPILE_DONE} (compilation did not finish)")
        g.complete = not g.problems
        if "compile_cache" not in key.roots:
            g.use, g.use_reason = "unused", "the plan binds no compile cache"
        elif h.root != key.roots["compile_cache"]:
            g.use, g.use_reason = "unused", f"not in the compile cache the plan binds ({key.roots['compile_cache']})"
        elif key.compile_hashes is None:
            g.use, g.use_reason = "unknown", key.compile_reason
        elif h.hash in key.compile_hashes:
            g.use, g.use_reason = "used", "the runtime named it in its log at the last ready `hostctl up`"
        else:
            g.use, g.use_reason = "unused", "the last ready `hostctl up` of this plan used another compile cache"
        out.append(g)
    return out


def generations(facts: CacheFacts, key: PlanKey, used_at: dict[str, str] | None = None) -> list[Generation]:
    gens = (_planes_generations(facts.planes, key) + _pack_generations(facts.packs, key)
            + _compile_generations(facts.compile, key))
    for g in gens:
        g.last_used = (used_at or {}).get(g.id)
    return gens


# ---------------------------------------------------------------- prune


class PrunePlan(Data):
    remove: list[Generation]
    keep: list[Generation]
    leftovers: list[Other]  # generations an interrupted prune was removing: finished now

    @property
    def freed_bytes(self) -> int:
        return sum(g.size_bytes for g in self.remove) + sum(o.usage.allocated for o in self.leftovers)


def plan_prune(gens: list[Generation], others: list[Other]) -> PrunePlan:
    """Remove what the plan does not use; keep what it uses and whatever hostctl cannot tell."""
    leftovers = [o for o in others if o.path.rsplit("/", 1)[-1].startswith(layout.REMOVING_PREFIX)]
    return PrunePlan(remove=[g for g in gens if g.use == "unused"], keep=[g for g in gens if g.use != "unused"],
                     leftovers=leftovers)
