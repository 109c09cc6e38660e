"""`hostctl model pull`: the recipe's checkpoint at its pinned commit, into runtime.model_dir.

Before the first byte: the pin is a commit (a branch alone is refused, exit 2), the hub resolves
it to that same commit, and the bytes still to download fit the free space of the model
directory's filesystem (exit 1 with both numbers when they do not). Then each file is fetched
(resuming what an interrupted run left), and checked against the hub's own metadata: the sha256
of LFS files, the git blob id of the rest. The manifest (manifest.py) is rewritten after every
checked file, so a kill or Ctrl-C loses at most the file in flight; a re-run keeps what was
checked and adopts files already on disk whose hashes match. When every file is in, the manifest
is marked complete and vLLM-MoET's snapshot marker is written.

The recipe's requires.extra_models (resolve.resolve_extras: registry names, into
runtime.models_dir/NAME) are pulled the same way after the model, each with its own manifest;
every model is planned and the space they need together is checked per filesystem before the
first byte of any of them.

plan_pull() is the pure decision; run_pull() does the work.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import TextIO

from pydantic import Field

from hostctl.data import Data
from hostctl import __version__, safefs
from hostctl.config import Config
from hostctl.errors import FailedError, HostctlError, InputError
from hostctl.facts.checkpoint import CheckpointFacts, probe_checkpoint
from hostctl.facts.free_space import free_space
from hostctl.facts.hashing import digests
from hostctl.facts.manifest import MARKER_NAME, Manifest, ManifestFile
from hostctl.model.manifest import now_iso, write_manifest, write_marker
from hostctl.model.progress import Progress
from hostctl.model.resolve import ModelRef, load_ref
from hostctl.bytesizes import fmt_bytes

MODEL_SCHEMA = "hostctl.model/v1"
PULL_LOCK = ".hostctl-pull.lock"


def _bytes(n: int | None) -> str:
    return "unknown" if n is None else f"{fmt_bytes(n)} ({n} bytes)"


class PullPlan(Data):
    repo: str
    commit: str
    model_dir: str
    files: list  # every RemoteFile of the revision
    kept: list[str] = Field(default_factory=list)  # already checked by an earlier pull (manifest)
    todo: list[str] = Field(default_factory=list)  # to download, resume or adopt
    partial: dict[str, int] = Field(default_factory=dict)  # bytes an interrupted download left
    need_bytes: int = 0  # new space the download needs
    free_bytes: int | None = None
    free_at: str = ""
    extra_files: list[str] = Field(default_factory=list)  # on disk, not part of this revision

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def short(self) -> bool:
        return self.free_bytes is not None and self.need_bytes > self.free_bytes


def _matches(entry: ManifestFile | None, f) -> bool:
    if entry is None or entry.size != f.size or entry.sha256 is None or entry.corrupt_since:
        return False
    if f.lfs_sha256:
        return entry.hub_sha256 == f.lfs_sha256
    return entry.hub_blob_id == f.blob_id


def plan_pull(snapshot, cp: CheckpointFacts, partial: dict[str, int], free: tuple[str, int | None]) -> PullPlan:
    """What to fetch and whether it fits. A file counts as kept only when the manifest of this same
    repository and commit recorded it checked, with the size it has on disk now."""
    plan = PullPlan(repo=snapshot.repo, commit=snapshot.commit, model_dir=cp.path, files=snapshot.files,
                    free_at=free[0], free_bytes=free[1])
    m = cp.manifest
    same = m is not None and m.repo == snapshot.repo and m.revision == snapshot.commit
    for f in snapshot.files:
        on_disk = cp.sizes.get(f.name)
        if same and on_disk == f.size and _matches(m.file(f.name), f):
            plan.kept.append(f.name)
            continue
        plan.todo.append(f.name)
        got = partial.get(f.name, 0)
        if got:
            plan.partial[f.name] = got
        # A file already on disk is replaced in place (huggingface_hub removes it first): its
        # space comes back; an interrupted download continues where it stopped.
        plan.need_bytes += max(0, f.size - got - (on_disk or 0))
    if m is not None:
        names = {f.name for f in snapshot.files}
        plan.extra_files = sorted(n for n in (f.name for f in m.files) if n not in names)
    return plan


class PullReport(Data):
    ref: ModelRef
    dry_run: bool
    plan: PullPlan | None = None
    statuses: dict[str, str] = Field(default_factory=dict)  # file -> kept / downloaded / adopted / would download
    downloaded_bytes: int = 0
    marker: str | None = None
    warnings: list[str] = Field(default_factory=list)
    token_source: str | None = None  # where the token came from, in words
    extras: list["PullReport"] = Field(default_factory=list)  # requires.extra_models, in order
    skipped: str | None = None  # why the recipe's own model is not pulled (extra models still are)
    run: dict | None = None  # the executor's parts and actions (hostctl.act.report)

    def to_dict(self) -> dict:
        doc = self._one()
        if self.extras or self.skipped:
            doc["skipped"] = self.skipped
            doc["extra_models"] = [x._one() for x in self.extras]
        if self.run is not None:
            doc.update(self.run)
        return doc

    def _one(self) -> dict:
        p = self.plan
        return {
            "schema": MODEL_SCHEMA, "action": "pull", "ok": True, "dry_run": self.dry_run,
            "model": self.ref.to_dict(),
            "commit": p.commit if p else None, "dir": self.ref.model_dir,
            "total_bytes": p.total_bytes if p else 0, "need_bytes": p.need_bytes if p else 0,
            "free_bytes": p.free_bytes if p else None, "downloaded_bytes": self.downloaded_bytes,
            "files": [{"name": f.name, "size": f.size, "status": self.statuses.get(f.name, "kept")}
                      for f in (p.files if p else [])],
            "marker": self.marker, "token_source": self.token_source, "warnings": self.warnings,
        }

    def text(self) -> str:
        own = (self.skipped + "\n") if self.skipped else self._text()
        return own + "".join(f"extra model {x.ref.model}: " + x._text() for x in self.extras)

    def _text(self) -> str:
        if self.plan is None:
            return self.ref.describe() + "\n"
        p = self.plan
        counts: dict[str, int] = {}
        for s in self.statuses.values():
            counts[s] = counts.get(s, 0) + 1
        head = (f"{p.repo}@{p.commit} -> {p.model_dir}: {len(p.files)} files, {fmt_bytes(p.total_bytes)}"
                + (f" ({', '.join(f'{n} {s}' for s, n in sorted(counts.items()))})" if counts else ""))
        lines = [head]
        if self.dry_run:
            lines.append(f"would download {fmt_bytes(p.need_bytes)}; {fmt_bytes(p.free_bytes or 0)} free at {p.free_at}")
            lines += [f"  {name}" + (f" (resume at {fmt_bytes(p.partial[name])})" if name in p.partial else "")
                      for name in p.todo]
        elif all(self.statuses.get(f.name) == "kept" for f in p.files):
            lines.append("every file was checked by an earlier pull and the manifest is complete: nothing to do")
        elif all(self.statuses.get(f.name) in ("kept", "adopted", "downloaded") for f in p.files):
            lines.append("every file checked against the hub's metadata; manifest written"
                         + (f"; {MARKER_NAME} written" if self.marker else ""))
        else:
            unchecked = [f.name for f in p.files if self.statuses.get(f.name) not in ("kept", "adopted", "downloaded")]
            lines.append(f"{len(unchecked)} file(s) not checked against the hub: {', '.join(unchecked[:5])}")
        lines += [f"warning: {w}" for w in self.warnings]
        return "\n".join(lines) + "\n"


def _expected(f) -> str:
    return f"sha256 {f.lfs_sha256}" if f.lfs_sha256 else f"git blob id {f.blob_id}"


def _check(f, base: int, root: str) -> ManifestFile | None:
    """The manifest entry for a file on disk whose content matches the hub's metadata, else None.
    Opened below the model folder's fd without following a link (refused, exit 3)."""
    d = digests(safefs.open_file_below(base, f.name, shown=root), blob_id=f.lfs_sha256 is None)
    if d.size != f.size:
        return None
    if f.lfs_sha256 and d.sha256 != f.lfs_sha256:
        return None
    if not f.lfs_sha256 and f.blob_id and d.blob_id != f.blob_id:
        return None
    return ManifestFile(name=f.name, size=f.size, lfs=f.lfs_sha256 is not None, hub_sha256=f.lfs_sha256,
                        hub_blob_id=f.blob_id, sha256=d.sha256)


def run_pull(config: Config, *, revision: str | None, dry_run: bool, err: TextIO) -> PullReport:
    from hostctl.model.resolve import load_extras

    ref = load_ref(config, revision)
    extras = load_extras(config)
    report = PullReport(ref=ref, dry_run=dry_run)
    jobs: list[PullReport] = []
    if ref.kind == "image":
        if not extras:
            return report
        report.skipped = ref.describe()
    elif ref.kind == "local" and extras:
        report.skipped = f"{ref.describe()}: nothing to pull (check it with `hostctl model verify`)"
    else:
        _pullable(ref)
        jobs.append(report)
    for x in extras:
        if x.pin_problem:
            raise InputError(f"extra model {x.model}: {x.pin_problem}", fix=x.pin_fix)
        rep = PullReport(ref=x, dry_run=dry_run)
        report.extras.append(rep)
        jobs.append(rep)
    from hostctl.model import hub

    report.token_source = hub.token_source()
    parts = [ModelPart(rep, *_plan(rep), name="model" if rep is report else f"extra-model-{i}", err=err)
             for i, rep in enumerate(jobs)]
    _check_space([rep.plan for rep in jobs])
    from hostctl.act.inline import run_inline

    say = lambda line: err.write(line + "\n")  # noqa: E731
    run = run_inline(parts, command="hostctl model pull", schema=MODEL_SCHEMA, say=say, dry_run=dry_run,
                     profile=config.profile.name)
    report.run = {k: v for k, v in run.document().items() if k in ("parts", "actions")}
    for rep in jobs:
        if dry_run:
            rep.statuses = {n: "would download" for n in rep.plan.todo}
        elif not rep.statuses:  # nothing was fetched: a fresh look found every file checked
            rep.statuses = {n: "kept" for n in rep.plan.kept}
    return report


class ModelPart:
    """One checkpoint as a part of the one executor: read = the hub's file list and the model
    folder (its manifest, sizes, partial downloads, free space); decide = plan_pull: one action
    that fetches and checks what is not yet in (or only finishes the manifest), or settled when a
    fresh look finds every file checked and the manifest complete."""

    record = False

    def __init__(self, rep: PullReport, snapshot, cp: CheckpointFacts, *, name: str, err: TextIO) -> None:
        self.rep, self.name, self.err = rep, name, err  # err: the download progress
        self.first: tuple | None = (snapshot, cp, rep.plan)  # the look run_pull took, space checked

    def read(self, ctx) -> tuple:
        if self.first is not None:
            look, self.first = self.first, None
            return look
        snapshot, cp, plan, _ = _look(self.rep.ref)
        return snapshot, cp, plan

    def decide(self, look: tuple):
        from hostctl.act.actions import Action, Assessment, Settled

        snapshot, cp, plan = look
        d = Assessment(self.name)
        complete = cp.manifest is not None and cp.manifest.complete and cp.manifest.revision == plan.commit
        if not plan.todo and complete:
            d.add(Settled(id=self.name, what=f"{plan.repo}@{plan.commit}: {len(plan.files)} files checked in "
                                             f"{plan.model_dir}"))
            return d
        what = (f"download and check {len(plan.todo)} file(s) of {plan.repo}@{plan.commit[:12]} "
                f"({fmt_bytes(plan.need_bytes)} new) into {plan.model_dir}" if plan.todo
                else f"mark {plan.repo}@{plan.commit[:12]} in {plan.model_dir} complete (every file is checked)")
        d.add(Action(step=f"{self.name}/fetch", describe=what, run=lambda: self._fetch(plan, cp, snapshot),
                     changes=plan.model_dir, why=f"the recipe's model {self.rep.ref.model}"))
        return d

    def _fetch(self, plan: PullPlan, cp: CheckpointFacts, snapshot) -> None:
        from hostctl.act.lock import HostLock

        os.close(safefs.open_dir(plan.model_dir, create=True))
        # One pull per checkpoint directory: two would race on the same files and manifest.
        with HostLock("model pull", Path(plan.model_dir) / PULL_LOCK):
            _fetch(plan, cp, snapshot, self.rep, self.err)

    def plan_text(self, d, round_no: int) -> str:
        return ""

    def done_text(self, first, final, ran, *, dry_run: bool) -> str:
        return "".join(f"would {a.describe}\n" for a in first.actions) if dry_run else ""

    def refusal(self, d, ran: int) -> HostctlError:
        return FailedError(f"{self.name} part refused", details=[r.reason for r in d.refusals])

    def consent(self, d) -> list:
        return []


def _pullable(ref: ModelRef) -> None:
    """InputError when the recipe's own model is not something to pull."""
    if ref.kind == "local":
        raise InputError(f"nothing to pull: the recipe's model {ref.model} is a path, and the profile mounts "
                         f"runtime.model_dir {ref.model_dir} over it",
                         fix="name a registry model or a hub repository with a revision in the recipe, or check "
                             "this checkpoint with `hostctl model verify`")
    if ref.pin_problem:
        raise InputError(ref.pin_problem, fix=ref.pin_fix)
    if not ref.model_dir:
        raise InputError("runtime.model_dir is not set: there is nowhere to put the checkpoint",
                         fix="set runtime.model_dir in the profile to a directory on a drive with room "
                             f"(~{ref.approx_gb or '?'} GB)")


def _look(ref: ModelRef) -> tuple:
    """(snapshot, checkpoint facts, plan, warnings) of one model; nothing written."""
    from hostctl.model import hub

    snapshot = hub.remote_snapshot(ref.repo, ref.revision)
    if snapshot.commit != ref.revision:
        raise FailedError(f"the hub resolved {ref.repo}@{ref.revision} to commit {snapshot.commit or '(none)'}",
                          fix="pin the full 40-hex commit the recipe was proven on")
    if not snapshot.files:
        raise FailedError(f"the hub lists no files for {ref.repo}@{ref.revision}")
    model_dir = ref.model_dir
    _refuse_links(model_dir, [f.name for f in snapshot.files])
    cp = probe_checkpoint(model_dir)
    left = hub.partial_sizes(model_dir) if cp.exists else {}
    partial = {f.name: left.get(f.etag, 0) for f in snapshot.files if f.etag}
    plan = plan_pull(snapshot, cp, partial, free_space(model_dir))
    warnings = []
    if cp.manifest_unsafe:
        warnings.append(f"{cp.manifest_error}: the manifest names a file outside {model_dir}; it was not used "
                        "(every file is checked against the hub again and a new manifest written)")
    if plan.extra_files:
        warnings.append(f"{len(plan.extra_files)} file(s) in {model_dir} are not part of this revision and "
                        f"were left alone: {', '.join(plan.extra_files[:5])}")
    return snapshot, cp, plan, warnings


def _plan(rep: PullReport):
    """(snapshot, checkpoint facts) of one model, its plan and warnings set on the report."""
    snapshot, cp, rep.plan, warnings = _look(rep.ref)
    rep.warnings += warnings
    return snapshot, cp


def _refuse_links(model_dir: str, names: list[str]) -> None:
    """UntrustedPathError (exit 3) before anything is written when a file the pull would write
    (or huggingface_hub's bookkeeping for it) sits behind, or is, a symlink in the model folder:
    root would write where the link leads. The names passed hub.remote_snapshot's checks."""
    from hostctl.model import hub

    try:
        base = safefs.open_dir(model_dir)
    except FileNotFoundError:
        return  # nothing there yet: the pull makes every folder itself
    try:
        for name in names:
            for rel in (name, f"{hub.INCOMPLETE_DIR}/{name}.metadata", f"{hub.INCOMPLETE_DIR}/{name}.lock"):
                parent, _, leaf = rel.rpartition("/")
                try:
                    with safefs.closing_fd(safefs.open_below(base, parent, shown=model_dir)) as dfd:
                        st = os.stat(leaf, dir_fd=dfd, follow_symlinks=False)
                except (FileNotFoundError, NotADirectoryError):
                    continue
                if stat.S_ISLNK(st.st_mode):
                    raise safefs.UntrustedPathError(
                        Path(model_dir) / rel, f"it is a symlink ({safefs.describe(st)}) where the pull writes {name}; "
                                               "hostctl follows none inside the model folder; nothing was downloaded",
                        fix=f"remove the link {Path(model_dir) / rel}, then run the pull again")
    finally:
        os.close(base)


def _device(path: str) -> int | str:
    try:
        return os.stat(path).st_dev
    except OSError:
        return path


def _check_space(plans: list[PullPlan]) -> None:
    """Every model's remaining bytes against its filesystem's free space, models on one filesystem
    added up (FailedError with the numbers, before the first byte of any of them)."""
    groups: dict[int | str, list[PullPlan]] = {}
    for p in plans:
        groups.setdefault(_device(p.free_at), []).append(p)
    for group in groups.values():
        first = group[0]
        need = sum(p.need_bytes for p in group)
        if first.free_bytes is None or need <= first.free_bytes:
            continue
        if len(group) == 1:
            what = f"the download needs {_bytes(need)} more (the revision is {_bytes(first.total_bytes)})"
        else:
            what = (f"the downloads need {_bytes(need)} more together ("
                    + ", ".join(f"{p.repo}: {fmt_bytes(p.need_bytes)}" for p in group) + ")")
        raise FailedError(f"not enough space: {first.free_at} has {_bytes(first.free_bytes)} free; {what}; nothing "
                          "was downloaded", fix="free space there or point runtime.model_dir / runtime.models_dir "
                                                "at a larger drive")


def _fetch(plan: PullPlan, cp: CheckpointFacts, snapshot, report: PullReport, err: TextIO) -> None:
    model_dir = plan.model_dir
    m = cp.manifest if (cp.manifest and cp.manifest.repo == plan.repo and cp.manifest.revision == plan.commit) \
        else Manifest(repo=plan.repo, revision=plan.commit)
    with safefs.opened_dir(model_dir) as base:
        _fetch_into(base, plan, cp, snapshot, m, report, err)


def _fetch_into(base: int, plan: PullPlan, cp: CheckpointFacts, snapshot, m: Manifest, report: PullReport,
                err: TextIO) -> None:
    """_fetch below the model folder's fd: every file checked, replaced or removed by a name
    walked from it with no link followed (the names are the hub's, checked in remote_snapshot)."""
    from hostctl.model import hub

    model_dir = plan.model_dir
    if plan.todo:
        m = m.model_copy(update={"complete": False, "hostctl_version": __version__})
        write_manifest(model_dir, m)
        # The marker vouches for the old contents; it comes back when this pull is complete.
        safefs.unlink_below(base, MARKER_NAME, shown=model_dir)
    by_name = {f.name: f for f in snapshot.files}
    todo_bytes = sum(max(0, by_name[n].size - plan.partial.get(n, 0)) for n in plan.todo)
    progress = Progress(err, "downloading", len(plan.todo), todo_bytes)
    report.statuses = {n: "kept" for n in plan.kept}
    try:
        for name in plan.todo:
            f = by_name[name]
            entry = None
            if cp.sizes.get(name) == f.size and name not in plan.partial:
                progress.start(name, f.size, verb="checking")
                entry = _check(f, base, model_dir)  # already here (an earlier run, or copied in): adopt it if it matches
                progress.finish("matches the hub: kept" if entry else "differs from the hub: downloading it again")
                if entry is not None:
                    report.statuses[name] = "adopted"
            if entry is None:
                # Wrong size or content: gone before the download, or huggingface_hub would hand back
                # this copy when its own metadata says it fetched this commit once.
                safefs.unlink_below(base, name, shown=model_dir)
                # The folders huggingface_hub writes into, made (or checked) here without following
                # a link, so its own mkdir and open find real folders of the model folder's.
                parent = name.rpartition("/")[0]
                for folder in (parent, f"{hub.INCOMPLETE_DIR}/{parent}".rstrip("/")):
                    os.close(safefs.open_below(base, folder, shown=model_dir, create=True))
                progress.start(name, f.size, plan.partial.get(name, 0))

                def counted(n: int) -> None:
                    report.downloaded_bytes += n
                    progress.add(n)

                hub.download(plan.repo, plan.commit, f, model_dir, counted)
                entry = _check(f, base, model_dir)
                if entry is None:
                    safefs.unlink_below(base, name, shown=model_dir)
                    raise FailedError(f"{name} as downloaded does not match the hub's {_expected(f)}; it was removed",
                                      fix="run the pull again; if it fails the same way, the transfer is being altered")
                progress.finish("checked")
                report.statuses[name] = "downloaded"
            m.put(entry)
            write_manifest(model_dir, m)
    except KeyboardInterrupt:
        done = sum(1 for s in report.statuses.values() if s in ("downloaded", "adopted"))
        raise FailedError(f"interrupted: {done} of {len(plan.todo)} file(s) fetched and checked this run",
                          fix="run `hostctl model pull` again: it keeps what was checked and resumes the rest") from None
    when = now_iso()
    # Every file fetched or adopted now was hashed now; kept ones were hashed by an earlier pull, so a
    # full check of the whole checkpoint dates from the oldest of those.
    m = m.model_copy(update={"complete": True, "pulled_at": when if plan.todo else (m.pulled_at or when),
                             "verified_quick_at": when,
                             "verified_full_at": when if not plan.kept else (m.verified_full_at or m.pulled_at),
                             "hostctl_version": __version__})
    write_manifest(model_dir, m)
    marker = write_marker(model_dir, m)
    report.marker = str(marker) if marker else None
    if marker is None:
        report.warnings.append(f"no {MARKER_NAME} written: the checkpoint has no config.json or weight files it covers")
    # Every file is in: what interrupted downloads (of this or an earlier revision) left is garbage now.
    hub.remove_partials(model_dir)
