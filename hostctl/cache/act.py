"""`hostctl cache list|verify`: read the cache directories of the profile's drives, judge them
(decide.py), list and verify them; after `up`, record which generations the ready service used
(usage.py holds that record). Removing what the plan does not use is prune.py's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from datetime import datetime, timezone
from typing import TextIO

from pydantic import Field

from hostctl.data import Data
from hostctl import safefs
from hostctl.cache.decide import Generation, PlanKey, generations
from hostctl.facts.caches import CacheFacts, Root, first_difference, rank_store_dirs, scan
from hostctl.config import Config
from hostctl.bytesizes import fmt_bytes

CACHE_SCHEMA = "hostctl.cache/v1"


# ---------------------------------------------------------------- where the caches are


def cache_roots(config: Config, storage) -> list[Root]:
    """The directories the plan binds, and the runtime's cache directories on every profile drive
    (older generations may sit on a drive the plan no longer uses)."""
    from hostctl.plan.storage import ROLE_DIRS

    kinds = {"planes_cache": "planes", "expert_store": "store", "compile_cache": "compile"}
    roots: list[Root] = []
    seen: set[str] = set()

    def add(kind, path, drive=None, planned=False):
        path = os.path.normpath(path)
        if path in seen:
            return
        seen.add(path)
        roots.append(Root(kind=kind, path=path, drive=drive, planned=planned))

    for t in storage.roles:
        add(kinds[t.role], t.host_path, t.drive, True)
    for rs in storage.rank_stores:
        if not rs.shared:
            add("rank_store", rs.host_dir, rs.drive, True)
    for role, kind in kinds.items():
        target = getattr(config.profile.storage, role)
        if target and target.startswith("/"):
            add(kind, target)
    for d in config.profile.drives:
        for role, kind in kinds.items():
            add(kind, f"{d.mount}/{ROLE_DIRS[role]}", d.name)
        for n in rank_store_dirs(d.mount, ROLE_DIRS["expert_store"] + "-rank"):
            add("rank_store", f"{d.mount}/{n}", d.name)
    return roots


def plan_key_for(config: Config, usage_doc: dict | None = None) -> tuple[PlanKey, list[Root]]:
    """The current plan's cache key (reads the storage facts, the checkpoint's stats and the usage
    record) and the directories to scan."""
    from hostctl.cache import usage
    from hostctl.facts.checkpoint_identity import runtime_ckpt_id, runtime_inputs
    from hostctl.facts import collect_storage
    from hostctl.plan import path_requests
    from hostctl.plan.storage import plan_storage
    from hostctl.plan.requests import tensor_parallel
    from hostctl.plan.runtime import MODEL_IN_CONTAINER

    world = tensor_parallel(config.recipe)
    storage = plan_storage(config, collect_storage(path_requests(config)), world)
    rt = config.profile.runtime
    label = None
    if rt.model_dir:
        from hostctl.facts.checkpoint import probe_checkpoint

        override, revision = runtime_inputs(config.recipe.env, config.recipe.serve_args)
        ckpt_id, why = runtime_ckpt_id(rt.model_dir, MODEL_IN_CONTAINER, revision=revision, override=override)
        m = probe_checkpoint(rt.model_dir).manifest
        label = f"{rt.model_dir} ({m.repo}@{m.revision})" if m else f"{rt.model_dir} (no hostctl manifest)"
    else:
        override, _ = runtime_inputs(config.recipe.env, config.recipe.serve_args)
        ckpt_id, why = (runtime_ckpt_id("", MODEL_IN_CONTAINER, override=override) if override else
                        (None, f"the checkpoint ({config.recipe.model}) is inside the runtime image"))
    key = PlanKey(world=world, roots={t.role: os.path.normpath(t.host_path) for t in storage.roles},
                  ckpt_id=ckpt_id, ckpt_reason=why, conversion_layers=config.recipe.conversion.layers,
                  checkpoint=label)
    image = rt.image or config.recipe.image or ""
    last = usage.last_up_for(usage.load() if usage_doc is None else usage_doc, config.profile.name,
                             config.recipe.id, image)
    if last is not None:
        key.compile_hashes = list(last.get("compile_hashes") or [])
        key.packs_opened = list(last.get("packs_opened") or [])
        key.compile_reason = f"recorded by `hostctl up` at {last.get('at')}"
    return key, cache_roots(config, storage)


def record_ready(config, plan, log_lines: Iterable[str]) -> None:
    """Called by `up` once the service is ready: remember what it used."""
    from hostctl import paths
    from hostctl.cache import usage

    lines = list(log_lines)
    now = datetime.now(timezone.utc).isoformat(timespec="seconds")
    doc = usage.load() or {"schema": usage.USAGE_SCHEMA}
    doc["last_up"] = {"profile": config.profile.name, "recipe": config.recipe.id, "image": plan.runtime.image,
                      "at": now, "compile_hashes": usage.compile_hashes(lines), "packs_opened": usage.packs_opened(lines)}
    key, roots = plan_key_for(config, doc)
    used = doc.setdefault("used_at", {})
    for g in generations(scan(roots), key):
        if g.use == "used":
            used[g.id] = now
    safefs.write_file(paths.state_dir() / usage.USAGE_FILE, json.dumps(doc, indent=2) + "\n")


class CacheView(Data):
    key: PlanKey
    facts: CacheFacts
    gens: list[Generation]

    def doc(self, action: str, **extra) -> dict:
        return {"schema": CACHE_SCHEMA, "action": action,
                "plan": {"world": self.key.world, "roots": self.key.roots, "checkpoint": self.key.checkpoint,
                         "ckpt_id": self.key.ckpt_id,
                         "ckpt_reason": self.key.ckpt_reason, "compile_hashes": self.key.compile_hashes,
                         "compile_reason": self.key.compile_reason},
                "roots": [r.model_dump() for r in self.facts.roots],
                "generations": [g.to_dict() for g in self.gens],
                "other": [o.model_dump() for o in self.facts.other], "errors": self.facts.errors, **extra}


def view(config: Config) -> CacheView:
    from hostctl.cache import usage

    key, roots = plan_key_for(config)
    facts = scan(roots)
    return CacheView(key=key, facts=facts, gens=generations(facts, key, usage.load().get("used_at") or {}))


def _when(ts: float | str | None) -> str:
    if not ts:
        return "-"
    if isinstance(ts, str):
        return ts.replace("+00:00", "Z")
    return datetime.fromtimestamp(ts, timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def _gen_line(g: Generation) -> str:
    state = "complete" if g.complete else "INCOMPLETE"
    used = {"used": "USED by the plan", "unused": "not used", "unknown": "use unknown"}[g.use]
    last = f"last used {_when(g.last_used)}" if g.last_used else f"last written {_when(g.last_written)}"
    key = "  ".join(f"{k}={str(v)[:12] + '...' if k == 'ckpt_id' and v else v}" for k, v in g.key.items())
    return (f"  {g.id}  TP={g.world or '?'}  {fmt_bytes(g.size_bytes)}  {state}  {used} ({g.use_reason})  {last}\n"
            f"      key: {key or 'unreadable'}\n"
            f"      in {g.root}" + (f", {len(g.copies)} rank-store copies" if g.copies else ""))


def list_text(v: CacheView) -> str:
    lines = [f"caches for TP={v.key.world}; checkpoint {v.key.checkpoint or '-'}, identity "
             + (v.key.ckpt_id[:16] + "..." if v.key.ckpt_id else f"unknown ({v.key.ckpt_reason})")]
    for kind, label in (("planes", "planes cache"), ("pack", "expert-store packs"), ("compile", "compile cache")):
        gens = [g for g in v.gens if g.kind == kind]
        lines.append(f"{label}: {len(gens)} generation(s), {fmt_bytes(sum(g.size_bytes for g in gens))}")
        for g in gens:
            lines.append(_gen_line(g))
            lines += [f"      incomplete: {p}" for p in g.problems[:5]]
            if len(g.problems) > 5:
                lines.append(f"      ... and {len(g.problems) - 5} more")
    for o in v.facts.other:
        lines.append(f"other: {o.path}  {fmt_bytes(o.usage.allocated)}  ({o.what})")
    missing = [r.path for r in v.facts.roots if r.planned and not r.exists]
    if missing:
        lines.append("not there yet: " + ", ".join(missing))
    lines += [f"error: {e}" for e in v.facts.errors]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- verify


class CacheVerifyReport(Data):
    view: CacheView
    copy_results: dict[str, list[str]] = Field(default_factory=dict)  # gen id -> problems with its copies

    def failing(self) -> list[Generation]:
        return [g for g in self.view.gens if g.use == "used" and (not g.complete or self.copy_results.get(g.id))]

    def text(self) -> str:
        lines = []
        for g in self.view.gens:
            bad = g.problems + self.copy_results.get(g.id, [])
            checked = f", {len(g.copies)} rank-store copies byte-identical" if g.copies and g.id in self.copy_results \
                and not self.copy_results[g.id] else ""
            lines.append(f"{g.id} ({'used by the plan' if g.use == 'used' else g.use}): "
                         + ("complete" + checked if not bad else "INCOMPLETE"))
            lines += [f"  {p}" for p in bad]
        if not self.view.gens:
            lines.append("no cache generations on this host yet")
        failing = self.failing()
        lines.append(f"{len(failing)} generation(s) the plan uses are incomplete or differ from their sources"
                     if failing else "every generation the plan uses is complete")
        return "\n".join(lines) + "\n"


def verify(config: Config, err: TextIO) -> CacheVerifyReport:
    from hostctl.model.progress import Progress

    v = view(config)
    report = CacheVerifyReport(view=v)
    for g in v.gens:
        if g.kind != "pack" or not g.copies or g.use == "unused":
            continue
        pairs = [(c, s) for c, s in g.copies if not c.endswith(".lock") and os.path.isfile(s)]
        progress = Progress(err, "comparing", len(pairs), sum(os.path.getsize(c) for c, _ in pairs))
        problems = report.copy_results.setdefault(g.id, [])
        for copy, source in pairs:
            progress.start(copy, os.path.getsize(copy))
            at = first_difference(copy, source, progress.add)
            progress.finish("identical" if at is None else f"differs at byte {at}")
            if at is not None:
                problems.append(f"{copy} differs from {source} at byte {at} (`hostctl store split` copies it again "
                                "after it is removed)")
    return report


def dump(doc: dict) -> str:
    return json.dumps(doc, indent=2) + "\n"

