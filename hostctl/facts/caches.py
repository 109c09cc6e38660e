"""Cache facts: what the cache directories on the profile's drives hold, read from the files
themselves (names, sizes, blocks allocated, times, and the runtime's small metadata files). No
judgement here: decide.py turns these into generations, completeness and use.

Sizes are blocks allocated (what removing a file frees); packs are sparse files whose apparent
size counts rows never written.

Also what `hostctl store split` and `cache verify` read: the shared expert store's folder and
the rank folders it copies into (names, sizes, room, whether a copy is already there) and, for
verify, where a copy first differs from its original.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Literal

from pydantic import Field

from hostctl.facts import cache_layout as layout
from hostctl.data import Data
from hostctl.safefs import TEMP_MARK
from hostctl.safepaths import relative_name_problem

RootKind = Literal["planes", "store", "rank_store", "compile"]
CHUNK = 16 * 1024 * 1024  # the compare's read size
REMOVING_WHAT = "left by an interrupted `hostctl cache prune`: the next prune finishes removing it"


class Root(Data):
    kind: RootKind
    path: str
    drive: str | None = None
    exists: bool = False
    planned: bool = False  # the current plan binds this directory


class Usage(Data):
    allocated: int = 0
    apparent: int = 0
    files: int = 0
    mtime: float = 0.0


class PlanesRank(Data):
    root: str
    key_dir: str  # <root>/v2/<key>: what removing this rank deletes
    rank_dir: str  # tp<W>-rank<R>
    world: int
    rank: int
    meta: dict | None = None
    meta_error: str | None = None
    layers: dict[int, dict[str, int]] = Field(default_factory=dict)  # layer -> part -> size
    tmp: list[str] = Field(default_factory=list)
    other: list[str] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)


class PackFile(Data):
    path: str
    size: int
    allocated: int
    mtime: float


class PackRank(Data):
    store: str  # the directory
    copy_of: str | None = None  # a rank store copy: the shared store directory it was copied from
    tag: str
    key: str
    rank: int
    world: int
    pp: int | None = None
    pp_world: int | None = None
    files: dict[str, PackFile] = Field(default_factory=dict)  # ext -> file
    sidecar: dict | None = None
    sidecar_error: str | None = None
    tmp: list[str] = Field(default_factory=list)


class CompileRank(Data):
    name: str  # rank_<i>_<j>
    done: list[str] = Field(default_factory=list)  # prefixes with vllm_compile_cache.py
    pending: list[str] = Field(default_factory=list)  # prefixes without


class CompileHash(Data):
    root: str
    hash: str
    dir: str
    ranks: list[CompileRank] = Field(default_factory=list)
    usage: Usage = Field(default_factory=Usage)


class Other(Data):
    """Something in a cache directory that is no generation hostctl recognises: listed, never pruned."""

    path: str
    what: str
    usage: Usage = Field(default_factory=Usage)


class CacheFacts(Data):
    roots: list[Root] = Field(default_factory=list)
    planes: list[PlanesRank] = Field(default_factory=list)
    packs: list[PackRank] = Field(default_factory=list)
    compile: list[CompileHash] = Field(default_factory=list)
    other: list[Other] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)


def usage(path: str) -> Usage:
    """Blocks allocated, apparent bytes, file count and newest modification under a path."""
    u = Usage()
    try:
        st = os.lstat(path)
    except OSError:
        return u
    u.mtime = st.st_mtime
    if not os.path.isdir(path) or os.path.islink(path):
        return Usage(allocated=st.st_blocks * 512, apparent=st.st_size, files=1, mtime=st.st_mtime)
    stack = [path]
    while stack:
        d = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            try:
                est = e.stat(follow_symlinks=False)
            except OSError:
                continue
            u.mtime = max(u.mtime, est.st_mtime)
            if e.is_dir(follow_symlinks=False):
                stack.append(e.path)
            else:
                u.allocated += est.st_blocks * 512
                u.apparent += est.st_size
                u.files += 1
    return u


def _listing(folder: str, out: CacheFacts) -> list[str]:
    """The names in a cache folder that hostctl will use, sorted. One that is not a plain name
    (safepaths.relative_name_problem: a control character that would rewrite the terminal when
    listed, a backslash, an over-long name) is an error line, shown quoted, and never listed as a
    generation or removed."""
    names = []
    for name in sorted(os.listdir(folder)):
        problem = relative_name_problem(name)
        if problem:
            out.errors.append(f"{folder}: skipped a name hostctl will not use: {problem}")
        else:
            names.append(name)
    return names


def _json(path: str) -> tuple[dict | None, str | None]:
    from hostctl.errors import InputError, MissingFileError, UntrustedPathError
    from hostctl.safeload import load_json

    try:
        data = load_json(Path(path), "cache metadata")
    except MissingFileError:
        return None, "missing"
    except (InputError, UntrustedPathError) as exc:
        return None, f"unreadable: {exc}"
    return (data, None) if isinstance(data, dict) else (None, "not a JSON object")


def _scan_planes(root: Root, out: CacheFacts) -> None:
    base = os.path.join(root.path, layout.PLANES_VERSION_DIR)
    for name in _listing(root.path, out):
        if name != layout.PLANES_VERSION_DIR:
            p = os.path.join(root.path, name)
            out.other.append(Other(path=p, what="not the runtime's planes layout (v2/<key>/tp<W>-rank<R>)",
                                   usage=usage(p)))
    if not os.path.isdir(base):
        return
    for key in _listing(base, out):
        key_dir = os.path.join(base, key)
        if key.startswith(layout.REMOVING_PREFIX):
            out.other.append(Other(path=key_dir, what=REMOVING_WHAT, usage=usage(key_dir)))
            continue
        rank_dirs = [n for n in _listing(key_dir, out) if layout.PLANES_RANK_RE.match(n)] \
            if os.path.isdir(key_dir) else []
        if not rank_dirs:
            out.other.append(Other(path=key_dir, what="no tp<W>-rank<R> directory inside", usage=usage(key_dir)))
            continue
        for rd in rank_dirs:
            m = layout.PLANES_RANK_RE.match(rd)
            rank = PlanesRank(root=root.path, key_dir=key_dir, rank_dir=rd, world=int(m["world"]),
                              rank=int(m["rank"]), usage=usage(key_dir))
            rank.meta, rank.meta_error = _json(os.path.join(key_dir, rd, "meta.json"))
            for fn in _listing(os.path.join(key_dir, rd), out):
                lm = layout.PLANES_LAYER_RE.match(fn)
                if layout.is_tmp(fn):
                    rank.tmp.append(fn)
                elif lm:
                    try:
                        size = os.stat(os.path.join(key_dir, rd, fn)).st_size
                    except OSError:
                        continue
                    rank.layers.setdefault(int(lm["layer"]), {})[lm["part"]] = size
                elif fn != "meta.json":
                    rank.other.append(fn)
            out.planes.append(rank)


def _scan_store(root: Root, out: CacheFacts, copy_of: str | None) -> None:
    ranks: dict[str, PackRank] = {}
    names = _listing(root.path, out)
    rest = []
    for name in names:
        m = layout.PACK_RE.match(name)
        if m is None:
            rest.append(name)
            continue
        path = os.path.join(root.path, name)
        stem = name[: -(len(m["ext"]) + 1)]
        r = ranks.get(stem)
        if r is None:
            r = ranks[stem] = PackRank(store=root.path, copy_of=copy_of, tag=m["tag"], key=m["key"],
                                       rank=int(m["rank"]), world=int(m["world"]),
                                       pp=int(m["pp"]) if m["pp"] else None,
                                       pp_world=int(m["pp_world"]) if m["pp_world"] else None)
        try:
            st = os.stat(path)
        except OSError:
            continue
        r.files[m["ext"]] = PackFile(path=path, size=st.st_size, allocated=st.st_blocks * 512, mtime=st.st_mtime)
        if m["ext"] == "json":
            r.sidecar, r.sidecar_error = _json(path)
    for name in rest:
        path = os.path.join(root.path, name)
        if name.startswith(layout.REMOVING_PREFIX):
            out.other.append(Other(path=path, what=REMOVING_WHAT, usage=usage(path)))
            continue
        copying = name.startswith(".") and TEMP_MARK in name  # store split's temporary: .<name>.hostctl-<hex>
        partial = layout.is_tmp(name) or copying
        target = name[1:].split(TEMP_MARK)[0] if copying else name.split(".tmp.")[0]
        owner = next((r for stem, r in ranks.items() if target.startswith(stem + ".")), None)
        if owner is not None and partial:
            owner.tmp.append(name)
            continue
        out.other.append(Other(path=path, what="a file being written (or left by an interrupted write)" if partial
                               else "not a pack file of the runtime's layout", usage=usage(path)))
    out.packs.extend(ranks.values())


def _scan_compile(root: Root, out: CacheFacts) -> None:
    base = os.path.join(root.path, *layout.COMPILE_SUBDIR)
    for name in _listing(root.path, out):
        p = os.path.join(root.path, name)
        if name == layout.COMPILE_SUBDIR[0]:
            for sub in _listing(p, out) if os.path.isdir(p) else []:
                if sub != layout.COMPILE_SUBDIR[1]:
                    sp = os.path.join(p, sub)
                    out.other.append(Other(path=sp, what="vLLM's other caches (not keyed by generation)", usage=usage(sp)))
            continue
        out.other.append(Other(path=p, what="a kernel cache keyed per kernel (Triton, FlashInfer, ...), not by "
                               "generation" if os.path.isdir(p) else "a file", usage=usage(p)))
    if not os.path.isdir(base):
        return
    for h in _listing(base, out):
        d = os.path.join(base, h)
        if h.startswith(layout.REMOVING_PREFIX):
            out.other.append(Other(path=d, what=REMOVING_WHAT, usage=usage(d)))
            continue
        if not os.path.isdir(d):
            continue
        ch = CompileHash(root=root.path, hash=h, dir=d, usage=usage(d))
        for rn in _listing(d, out):
            if not layout.COMPILE_RANK_RE.match(rn) or not os.path.isdir(os.path.join(d, rn)):
                continue
            cr = CompileRank(name=rn)
            for prefix in _listing(os.path.join(d, rn), out):
                pd = os.path.join(d, rn, prefix)
                if os.path.isdir(pd):
                    (cr.done if os.path.isfile(os.path.join(pd, layout.COMPILE_DONE)) else cr.pending).append(prefix)
            ch.ranks.append(cr)
        out.compile.append(ch)


def scan(roots: list[Root]) -> CacheFacts:
    """Read every cache directory; one that cannot be read is an error line, not a crash."""
    out = CacheFacts(roots=roots)
    shared = next((r.path for r in roots if r.kind == "store" and r.planned), None)
    for root in roots:
        root.exists = os.path.isdir(root.path)
        if not root.exists:
            continue
        try:
            if root.kind == "planes":
                _scan_planes(root, out)
            elif root.kind == "store":
                _scan_store(root, out, None)
            elif root.kind == "rank_store":
                _scan_store(root, out, shared)
            else:
                _scan_compile(root, out)
        except OSError as exc:
            out.errors.append(f"{root.path}: {exc.strerror or exc}")
    return out


def folder_names(path: str | Path) -> list[str] | None:
    """The sorted names in a folder, or None when it is not one (or cannot be read)."""
    try:
        return sorted(os.listdir(path)) if os.path.isdir(path) else None
    except OSError:
        return None


class FolderRoom(Data):
    dev: int  # the filesystem it is on
    free: int  # bytes an unprivileged writer may still use


def folder_room(path: str | Path) -> FolderRoom | None:
    """The filesystem a folder is on and its room; None when path is not a folder (or cannot be read)."""
    try:
        st, vfs = os.stat(path), os.statvfs(path)
    except OSError:
        return None
    return FolderRoom(dev=st.st_dev, free=vfs.f_bavail * vfs.f_frsize) if stat.S_ISDIR(st.st_mode) else None


def file_sizes(folder: Path, names: list[str]) -> dict[str, int]:
    return {n: os.stat(folder / n).st_size for n in names}


def same_copy(src: Path, dst: Path) -> bool:
    """Whether dst is a copy of src as a copy is judged without reading it: a regular file (a link
    in the rank folder is never "the copy") of the same size and modification time."""
    try:
        s, d = src.stat(), dst.lstat()
    except FileNotFoundError:
        return False
    return stat.S_ISREG(d.st_mode) and s.st_size == d.st_size and s.st_mtime_ns == d.st_mtime_ns


def rank_store_dirs(mount: str, prefix: str) -> list[str]:
    """The names under a drive's mount point that start with prefix (the rank stores `hostctl store
    split` made there, also those the current plan no longer names); a name that is not a plain
    folder name is left out."""
    try:
        names = sorted(os.listdir(mount))
    except OSError:
        return []
    return [n for n in names if n.startswith(prefix) and relative_name_problem(n) is None]


def first_difference(a: str, b: str, progress=None) -> int | None:
    """The offset of the first differing byte of two files (or of the shorter's end), None if equal."""
    offset = 0
    with open(a, "rb", buffering=0) as fa, open(b, "rb", buffering=0) as fb:
        for f in (fa, fb):
            try:
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_SEQUENTIAL)
            except OSError:
                pass
        while True:
            x, y = fa.read(CHUNK), fb.read(CHUNK)
            if x != y:
                return offset + next((i for i, (p, q) in enumerate(zip(x, y)) if p != q), min(len(x), len(y)))
            if not x:
                return None
            offset += len(x)
            if progress is not None:
                progress(len(x))


class RunningRuntime(Data):
    name: str
    profile: str
    ours: bool  # this profile's runtime (its profile label, or its Compose project)


def running_runtimes(profile: str, project: str) -> tuple[list[RunningRuntime], str | None]:
    """hostctl's runtime containers that run now (from the engine facts), or why that is unknown."""
    from hostctl.facts.engine import RUNTIME_LABEL, probe_engine

    engine = probe_engine()
    if not engine.available:
        return [], engine.reason or "the Docker engine does not answer"
    return [RunningRuntime(name=c.name, profile=c.labels.get(RUNTIME_LABEL, ""),
                           ours=c.labels.get(RUNTIME_LABEL) == profile
                           or c.labels.get("com.docker.compose.project") == project)
            for c in engine.containers
            if c.state in ("running", "restarting", "paused") and c.labels.get(RUNTIME_LABEL)], None
