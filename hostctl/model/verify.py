"""Is the checkpoint on this host the one the recipe pins, whole and intact? Offline.

quick: config.json is there; every shard the safetensors index names is there; every file the
manifest lists has the manifest's size; the manifest's revision is the pinned one and its pull
finished. full: additionally every file's content sha256 is recomputed (facts/hashing.py) and compared
with the manifest's, which the pull checked against the hub's own metadata.

judge() is pure (CheckpointFacts + the hashes read so far -> a CheckpointVerdict); the reading is
facts.checkpoint's (probe_checkpoint, and full_hashes for the full level). A checkpoint hostctl did not pull has no manifest: presence is still checked, sizes and
hashes cannot be, and the verdict says so (a warning: `hostctl model pull` adopts it, hashing
every file against the hub's metadata and keeping what matches).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field

from hostctl.data import Data
from hostctl.facts.checkpoint import CheckpointFacts
from hostctl.facts.manifest import MANIFEST_NAME, Manifest
from hostctl.model.resolve import ModelRef

Level = Literal["quick", "full"]
FileStatus = Literal["ok", "missing", "wrong_size", "corrupt", "unchecked"]


class FileCheck(Data):
    name: str
    status: FileStatus
    expected_size: int | None = None
    found_size: int | None = None
    expected_sha256: str | None = None
    found_sha256: str | None = None

    def line(self) -> str:
        if self.status == "missing":
            return f"{self.name}: missing"
        if self.status == "wrong_size":
            return f"{self.name}: {self.found_size} bytes, the manifest says {self.expected_size}"
        if self.status == "corrupt" and self.found_sha256 is None:
            return f"{self.name}: corrupt (its content differed from the manifest's sha256 at the last full verify)"
        if self.status == "corrupt":
            return f"{self.name}: corrupt: sha256 {self.found_sha256}, expected {self.expected_sha256}"
        return f"{self.name}: {self.status}"


class CheckpointVerdict(Data):
    level: Level
    path: str
    ok: bool
    revision: str | None  # what the manifest says the checkpoint is
    pinned: str | None  # what the recipe/profile pins
    files: list[FileCheck] = Field(default_factory=list)
    problems: list[str] = Field(default_factory=list)  # each fails the verify
    warnings: list[str] = Field(default_factory=list)
    fix: str | None = None

    @property
    def bad_files(self) -> list[FileCheck]:
        return [f for f in self.files if f.status in ("missing", "wrong_size", "corrupt")]

    def to_dict(self) -> dict:
        d = self.model_dump()
        d["files_checked"] = len(self.files)
        return d


def judge(ref: ModelRef, cp: CheckpointFacts, level: Level, hashes: dict[str, str] | None = None) -> CheckpointVerdict:
    """The verdict on a checkpoint's facts (and, at the full level, the content hashes read)."""
    m = cp.manifest
    v = CheckpointVerdict(level=level, path=cp.path, ok=False, revision=m.revision if m else None, pinned=ref.revision)
    if not cp.exists:
        v.problems.append(f"{cp.path} does not exist")
        v.fix = "hostctl model pull" if ref.pullable else "put the checkpoint there or correct runtime.model_dir"
        return v
    if not cp.config_json:
        v.problems.append("config.json is missing")
    if cp.index_error:
        v.problems.append(cp.index_error)
    v.problems += [f"refused: {r}" for r in cp.refused]
    if cp.manifest_unsafe:
        v.problems.append(f"{cp.manifest_error}: the manifest names a file outside the checkpoint folder, so it was "
                          "not used")
        v.fix = (f"remove {Path(cp.path) / MANIFEST_NAME} and run `hostctl model pull` (it checks every file "
                 "against the hub again and writes a new manifest)")
    expected: dict[str, tuple[int | None, str | None]] = {}
    known_corrupt = {f.name for f in m.files if f.corrupt_since} if m is not None else set()
    if m is not None:
        for f in m.files:
            expected[f.name] = (f.size, f.sha256)
    for name in cp.shards or []:
        expected.setdefault(name, (None, None))
    for name in sorted(expected):
        size, sha = expected[name]
        found = cp.sizes.get(name)
        check = FileCheck(name=name, status="ok", expected_size=size, found_size=found, expected_sha256=sha)
        if found is None:
            check.status = "missing"
        elif size is not None and found != size:
            check.status = "wrong_size"
        elif level == "quick" and name in known_corrupt:
            check.status = "corrupt"  # found by the last full verify (its date is in the manifest)
        elif level == "full":
            got = (hashes or {}).get(name)
            check.found_sha256 = got
            if sha is None or got is None:
                check.status = "unchecked"
            elif got != sha:
                check.status = "corrupt"
        v.files.append(check)
    bad = v.bad_files
    if bad:
        shown = ", ".join(f.name for f in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        kinds = sorted({f.status.replace("_", " ") for f in bad})
        v.problems.append(f"{len(bad)} file(s) {' / '.join(kinds)}: {shown}")
    if not (cp.shards or []) and cp.config_json:
        v.problems.append("no weight files: neither an index nor *.safetensors / *.bin files")

    if m is None and cp.manifest_unsafe:
        pass  # a problem already (above), not a warning
    elif m is None:
        why = cp.manifest_error or f"no {MANIFEST_NAME}: this checkpoint was not pulled by hostctl"
        v.warnings.append(f"{why}; its sizes and hashes cannot be checked offline"
                          + (", nor its revision" if ref.revision else ""))
    else:
        if ref.repo and m.repo != ref.repo:
            v.problems.append(f"the checkpoint is {m.repo}, the recipe names {ref.repo}")
        if ref.revision and m.revision != ref.revision:
            v.problems.append(f"the checkpoint is revision {m.revision}, {ref.revision_source} pins {ref.revision}")
        if not m.complete:
            v.problems.append("the last pull did not finish (the manifest is marked incomplete)")
    if ref.pin_problem:
        v.warnings.append(ref.pin_problem)
    if level == "full":
        unchecked = [f.name for f in v.files if f.status == "unchecked"]
        if unchecked and m is not None:
            v.warnings.append(f"{len(unchecked)} file(s) have no recorded sha256 to compare with: {', '.join(unchecked[:5])}")

    v.ok = not v.problems
    if not v.ok and v.fix is None:
        v.fix = ("hostctl model pull (downloads what is missing or wrong, resuming, and checks it)"
                 if ref.pullable else "restore the files named above")
    elif v.ok and m is None and ref.pullable:
        v.fix = "hostctl model pull adopts it: every file is hashed against the hub's metadata, matching ones are kept"
    return v


def recorded(manifest: Manifest, level: Level, when: str, verdict: CheckpointVerdict | None = None) -> Manifest:
    """The manifest after a verify: its date when it passed; after a full verify, each file whose
    content differs marked corrupt (so the quick verify, `up`'s preflight and the next pull know,
    and the pull fetches it again) and each one that matches cleared."""
    update: dict = {}
    if verdict is None or verdict.ok:
        update["verified_quick_at"] = when
        if level == "full":
            update["verified_full_at"] = when
    if level == "full" and verdict is not None:
        status = {f.name: f.status for f in verdict.files}
        update["files"] = [f.model_copy(update={"corrupt_since": (f.corrupt_since or when) if status.get(f.name) == "corrupt"
                                                 else (None if status.get(f.name) == "ok" else f.corrupt_since)})
                           for f in manifest.files]
    return manifest.model_copy(update=update)


def run_verify(ref: ModelRef, level: Level, err=None) -> CheckpointVerdict:
    """Read the checkpoint (and at the full level every hash, with progress on `err`), judge it,
    and on a pass record the date in the manifest (doctor shows the last full verify)."""
    from hostctl.facts.checkpoint import full_hashes, probe_checkpoint
    from hostctl.model.manifest import now_iso, write_manifest
    from hostctl.model.progress import Progress

    cp = probe_checkpoint(ref.model_dir or "")
    hashes = None
    if level == "full" and cp.manifest is not None:
        todo = [f for f in cp.manifest.files if f.sha256 and cp.sizes.get(f.name) == f.size]
        progress = Progress(err, "hashing", len(todo), sum(f.size for f in todo)) if err is not None else None
        hashes = full_hashes(cp, (lambda name, n: progress.add(n)) if progress else None,
                             (lambda name, size: progress.start(name, size)) if progress else None)
        if progress is not None and todo:
            progress.finish(f"{len(hashes)} file(s) hashed", name="all")
    verdict = judge(ref, cp, level, hashes)
    if cp.manifest is not None and (verdict.ok or level == "full"):
        try:
            write_manifest(cp.path, recorded(cp.manifest, level, now_iso(), verdict))
        except OSError as exc:
            verdict.warnings.append(f"the manifest was not updated: {exc.strerror or exc}")
    return verdict


def verdict_text(ref: ModelRef, v: CheckpointVerdict) -> str:
    lines = [f"{ref.describe()}: {v.level} verify {'passed' if v.ok else 'FAILED'}"
             + f" ({len(v.files)} files checked)"]
    if v.revision:
        lines.append(f"  revision {v.revision}" + ("" if v.pinned in (None, v.revision) else f" (pinned: {v.pinned})"))
    lines += [f"  problem: {p}" for p in v.problems]
    lines += [f"  {f.line()}" for f in v.bad_files]
    lines += [f"  warning: {w}" for w in v.warnings]
    if v.fix:
        lines.append(f"  fix: {v.fix}")
    return "\n".join(lines) + "\n"
