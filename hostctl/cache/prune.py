"""`hostctl cache prune` as a part of the one executor (hostctl.act): read the caches (act.view)
and, for a real run, whether the runtime runs; decide purely one removal per generation the
current plan does not use (decide.plan_prune: never one it uses, never one hostctl cannot tell);
the executor prints that, asks consent as provision does (`--yes`, or `prune` typed at a
terminal; no terminal: refused, exit 3), removes, and reads again until nothing is left to prune.

Guards: nothing while this profile's runtime container runs (the engine facts: its
io.hostctl.profile label or its Compose project), or when the engine cannot say; looked at again
right before the first removal (consent can take a while); the up/down host lock is held, so an
`up` cannot start meanwhile; every path removed lies inside a scanned cache directory. A
generation is renamed `.hostctl-removing.<name>` before it is deleted, so an interrupted prune
leaves nothing the runtime could mistake for a cache, and the next prune finishes it.
"""

from __future__ import annotations

import os
import shutil
import stat
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

from hostctl import safefs
from hostctl.act import consent
from hostctl.act.actions import Action, Assessment, Note, Refusal, Settled, Skipped
from hostctl.act.executor import Context, Executor
from hostctl.act.lock import HostLock
from hostctl.act.report import Report
from hostctl.bytesizes import fmt_bytes
from hostctl.facts import cache_layout as layout
from hostctl.cache.act import CacheView, view
from hostctl.cache.decide import PrunePlan, plan_prune
from hostctl.facts.caches import Root, RunningRuntime, running_runtimes
from hostctl.config import Config
from hostctl.errors import FailedError, HostctlError, RefusedError

COMMAND = "hostctl cache prune"
SCHEMA = "hostctl.cache-prune/v1"
PART = "cache"


# ---------------------------------------------------------------- removing, safely


def _root_of(path: str, roots: list[Root]) -> Root | None:
    """The scanned cache root `path` lies in, lexically (the walk then refuses any link below it)."""
    p = os.path.abspath(path)
    return next((r for r in roots if p.startswith(os.path.abspath(r.path).rstrip(os.sep) + os.sep)), None)


def _remove(paths_: list[str], roots: list[Root]) -> None:
    """Rename each path to its REMOVING name, then delete it, all under the fd of its folder opened
    by safefs.open_under: the cache folders are the invoking user's, and a link they put in place
    of a folder on the way (even after the scan looked) must not make root rename or delete what
    the link points to. shutil.rmtree with dir_fd walks without following links."""
    where = {}
    for p in paths_:
        root = _root_of(p, roots)
        if root is None:
            raise FailedError(f"refusing to remove {p}: it is not inside a cache directory hostctl scanned")
        where[p] = root
    # A pack's sidecar goes first: without it the runtime rebuilds instead of trusting what is left.
    # Every name is renamed before any is deleted, so an interrupted prune leaves only REMOVING names.
    order = sorted(paths_, key=lambda p: (not p.endswith(".json") or p.endswith(".heat.json"), p))
    renamed = []
    for p in order:
        head, tail = os.path.split(os.path.abspath(p))
        root = os.path.abspath(where[p].path)
        with _folder(root, head) as dfd:
            if dfd is None or not _exists(dfd, tail):
                continue
            target = tail if tail.startswith(layout.REMOVING_PREFIX) else layout.REMOVING_PREFIX + tail
            if target != tail:
                os.rename(tail, target, src_dir_fd=dfd, dst_dir_fd=dfd)
            renamed.append((root, head, target))
    for root, head, target in renamed:
        with _folder(root, head) as dfd:
            if dfd is None:
                continue
            try:
                st = os.stat(target, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.S_ISDIR(st.st_mode):
                shutil.rmtree(target, dir_fd=dfd)
            else:
                os.unlink(target, dir_fd=dfd)


def _exists(dfd: int, name: str) -> bool:
    try:
        os.stat(name, dir_fd=dfd, follow_symlinks=False)
        return True
    except FileNotFoundError:
        return False


@contextmanager
def _folder(root: str, head: str) -> Iterator[int | None]:
    try:
        dfd = safefs.open_under(root, os.path.relpath(head, root))
    except FileNotFoundError:
        yield None
        return
    try:
        yield dfd
    finally:
        os.close(dfd)


# ---------------------------------------------------------------- the part


class Snapshot:
    """One look: the caches, and (a real run with something to remove) the runtimes that run now,
    or why the engine cannot say."""

    def __init__(self, cache: CacheView, running: list[RunningRuntime] | None, unknown: str | None) -> None:
        self.cache, self.running, self.unknown = cache, running, unknown


def _running_refusal(running: list[RunningRuntime] | None, unknown: str | None) -> str | None:
    if unknown is not None:
        return f"cannot tell whether the runtime runs ({unknown}); nothing was removed"
    ours = [r for r in running or [] if r.ours]
    if ours:
        names = ", ".join(f"{r.name} (profile {r.profile})" for r in ours)
        return f"the runtime is running ({names}): it may be reading or writing these caches; nothing was removed"
    return None


def _removal(step: str, what: str, paths_: list[str], roots: list[Root], size: int, why: str,
             guard: Any) -> Action:
    def _run() -> None:
        guard()
        _remove(paths_, roots)

    return Action(step=step, describe=f"remove {what}: frees {fmt_bytes(size)}", run=_run, destructive=True,
                  changes=", ".join(paths_), why=why, consent="yes")


def decide(snap: Snapshot, guard: Any = lambda: None) -> Assessment:
    """Pure: a removal per unused generation and per leftover of an interrupted prune; the
    generations kept (used: settled; use unknown: skipped); a refusal while the runtime runs."""
    v = snap.cache
    plan = plan_prune(v.gens, v.facts.other)
    d = Assessment(PART, detail=plan)
    roots = v.facts.roots
    for g in plan.remove:
        d.add(_removal(f"{PART}/{g.id}", f"{g.id} ({g.root})", g.paths, roots, g.size_bytes, g.use_reason, guard))
    for o in plan.leftovers:
        d.add(_removal(f"{PART}/{o.path}", o.path, [o.path], roots, o.usage.allocated,
                       "an interrupted prune's leftover", guard))
    for g in plan.keep:
        if g.use == "used":
            d.add(Settled(id=f"{PART}/{g.id}", what=f"keep {g.id}: used ({g.use_reason})"))
        else:
            d.add(Skipped(id=f"{PART}/{g.id}", reason=f"kept: its use is unknown ({g.use_reason})"))
    if d.actions:
        d.add(Note(id=f"{PART}/freed", severity="info",
                   message=f"removing {len(d.actions)} generation(s) frees {fmt_bytes(plan.freed_bytes)}",
                   data={"freed_bytes": plan.freed_bytes,
                         "size_bytes": {g.id: g.size_bytes for g in plan.remove}
                         | {o.path: o.usage.allocated for o in plan.leftovers}}))
        why = _running_refusal(snap.running, snap.unknown)
        if why is not None:
            d.add(Refusal(id=f"{PART}/{'engine' if snap.unknown is not None else 'runtime'}", reason=why))
        for r in snap.running or []:
            if not r.ours:
                d.add(Note(id=f"{PART}/other-runtime",
                           message=f"{r.name} (profile {r.profile}) runs too; it is another profile's runtime"))
    for e in v.facts.errors:
        d.add(Note(id=f"{PART}/scan", message=e))
    return d


class PrunePart:
    name = PART
    record = False  # nothing to record: the next prune reads the caches again

    def __init__(self, config: Config) -> None:
        self.config = config
        self.guarded = False

    def _guard(self) -> None:
        """Right before the first removal: consent can take a while, the runtime may have started."""
        if self.guarded:
            return
        running, unknown = running_runtimes(self.config.profile.name, self.config.profile.runtime.project)
        why = _running_refusal(running, unknown)
        if why is not None:
            raise RefusedError(why, fix=_fix(unknown is not None))
        self.guarded = True

    def read(self, ctx: Context) -> Snapshot:
        v = view(self.config)
        running, unknown = None, None
        if not ctx.dry_run and (any(g.use == "unused" for g in v.gens) or plan_prune([], v.facts.other).leftovers):
            running, unknown = running_runtimes(self.config.profile.name, self.config.profile.runtime.project)
        return Snapshot(v, running, unknown)

    def decide(self, snapshot: Snapshot) -> Assessment:
        return decide(snapshot, self._guard)

    def plan_text(self, d: Assessment, round_no: int) -> str:
        plan: PrunePlan = d.detail
        lines = [f"would remove {a.describe.removeprefix('remove ')} ({a.why})" for a in d.actions]
        if round_no == 1:
            lines += [f"keep {g.id}: {g.use} ({g.use_reason})" for g in plan.keep]
            lines += [f"note: {n.message}" for n in d.warnings if n.severity == "warn"]
            lines.append(f"would free {fmt_bytes(plan.freed_bytes)} in all" if d.actions else
                         "nothing to prune: every generation is used by the plan or cannot be told apart")
        return "".join(line + "\n" for line in lines)

    def done_text(self, first: Assessment, final: Assessment, ran: list[Action], *, dry_run: bool) -> str:
        if dry_run:
            return f"dry run: {len(first.actions)} removal(s) shown, nothing was changed\n" if first.actions else ""
        if not ran:
            return ""
        lines = [f"removed {a.describe.removeprefix('remove ')}" for a in ran]
        freed = first.detail.freed_bytes
        lines.append(f"freed {fmt_bytes(freed)} in all; verified: a fresh look finds nothing more to prune")
        return "".join(line + "\n" for line in lines)

    def refusal(self, d: Assessment, ran: int) -> HostctlError:
        r = d.refusals[0]
        return RefusedError(r.reason, fix=_fix(r.id == f"{PART}/engine"))

    def consent(self, d: Assessment) -> list[consent.Request]:
        plan: PrunePlan = d.detail
        return [consent.Request(drive="cache", identity="cache prune", answer="prune",
                                what=f"removes {len(d.actions)} cache generation(s), {fmt_bytes(plan.freed_bytes)} "
                                     "(listed above)",
                                review=f"{COMMAND} --dry-run")]


def _fix(engine_unknown: bool) -> str:
    return ("start the Docker engine so hostctl can see its containers, then prune again" if engine_unknown
            else "`hostctl down` first, then prune")


def prune(config: Config, *, dry_run: bool = False, yes: bool = False, stdin: TextIO | None = None,
          out: TextIO | None = None, err: TextIO | None = None) -> Report:
    """The prune part alone through the one executor; the report's error is what it stopped at."""
    executor = Executor(command=COMMAND, lock=lambda: HostLock("cache prune"), dry_run=dry_run, yes=yes,
                        stdin=stdin or sys.stdin, out=out, err=err)
    return executor.run([PrunePart(config)], Report(schema_tag=SCHEMA, dry_run=dry_run, profile=config.profile.name))
