"""Checkpoint facts: what a checkpoint directory holds, read without hashing anything (a stat per
file and three small JSON files). The quick verify, `up`'s preflight and doctor's model.checkpoint
check judge these; only the full verify reads file contents (full_hashes, through hashing.py).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from pydantic import Field, ValidationError

from hostctl.facts.manifest import (INDEX_NAME, MANIFEST_NAME, MARKER_NAME, SMALL_FILE_MAX, TOO_LARGE_FIX, UNSAFE_NAME,
                                    Manifest, UnsafeIndexName, weight_files)
from hostctl.data import Data
from hostctl.errors import InputError
from hostctl.safefs import TooLargeError, UntrustedPathError, closing_fd, open_below, open_file_below, read_below
from hostctl.safeload import parse_json


class CheckpointFacts(Data):
    path: str
    exists: bool
    config_json: bool = False
    index_present: bool = False
    index_error: str | None = None
    shards: list[str] | None = None  # what the index names (or the top-level weight files without one)
    sizes: dict[str, int] = Field(default_factory=dict)  # name -> size of every file looked at that exists
    manifest: Manifest | None = None
    manifest_error: str | None = None
    manifest_unsafe: bool = False  # the manifest names a file outside the folder: refused, not used
    marker: dict | None = None
    marker_error: str | None = None
    refused: list[str] = Field(default_factory=list)  # paths not read: a link, or a folder others can swap


def _read_json(base: int, root: Path, name: str, facts: CheckpointFacts) -> tuple[object | None, str | None]:
    try:
        # a checkpoint's own JSON: from a hub or a copy, so bounded like any outside file
        return parse_json(read_below(base, name, shown=root, max_bytes=SMALL_FILE_MAX, owners=False).decode("utf-8"), name), None
    except FileNotFoundError:
        return None, None
    except UntrustedPathError as exc:
        facts.refused.append(exc.message)
        return None, f"{name}: not read ({exc.message})"
    except InputError as exc:
        return None, exc.message
    except (OSError, ValueError) as exc:
        return None, f"{name}: {exc.__class__.__name__}: {exc}"


def _size(base: int, root: Path, name: str, facts: CheckpointFacts) -> int | None:
    """The size of the regular file `name` below the folder, walked without following any link
    (a link in a checkpoint is refused, not followed: root would stat and hash what it points to)."""
    parent, _, leaf = name.rpartition("/")
    try:
        with closing_fd(open_below(base, parent, shown=root, owners=False)) as dfd:
            st = os.stat(leaf, dir_fd=dfd, follow_symlinks=False)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except UntrustedPathError as exc:
        facts.refused.append(exc.message)
        return None
    if stat.S_ISLNK(st.st_mode):
        facts.refused.append(f"{root / name}: it is a symlink; hostctl follows none inside the checkpoint folder")
        return None
    return st.st_size if stat.S_ISREG(st.st_mode) else None


def probe_checkpoint(path: str) -> CheckpointFacts:
    """What the folder holds. Every name read from it (the index's shards, the manifest's files)
    is a plain relative path (safepaths.relative_name_problem) and is looked up without following
    a link; what breaks that rule is reported (index_error, manifest_unsafe, refused), never read."""
    root = Path(path)
    try:
        # The folder the profile names, as main read it (a link to it followed); below it, reads
        # follow no link, so whoever owns the files (the user, at boot when only root is trusted)
        # can make root read nothing but the files themselves.
        base = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return CheckpointFacts(path=path, exists=False)
    try:
        return _probe(base, root, path)
    finally:
        os.close(base)


def _probe(base: int, root: Path, path: str) -> CheckpointFacts:
    facts = CheckpointFacts(path=path, exists=True)
    facts.config_json = _size(base, root, "config.json", facts) is not None
    try:
        listing = sorted(os.listdir(base))
    except OSError:
        listing = []
    raw = None
    try:
        raw = read_below(base, INDEX_NAME, shown=root, max_bytes=SMALL_FILE_MAX, owners=False)
        facts.index_present = True
    except FileNotFoundError:
        pass
    except UntrustedPathError as exc:
        facts.index_present = True
        facts.refused.append(exc.message)
        facts.index_error = f"{INDEX_NAME}: not read ({exc.message})"
    except TooLargeError as exc:
        facts.index_present = True
        facts.index_error = f"{exc}; {TOO_LARGE_FIX}"
    except (OSError, ValueError) as exc:
        facts.index_present = True
        facts.index_error = f"{INDEX_NAME}: {getattr(exc, 'strerror', None) or exc}"
    try:
        if raw is not None:
            facts.shards = weight_files(raw, listing)
            if facts.shards is None:
                facts.index_error = f"{INDEX_NAME} has no readable weight_map"
        elif not facts.index_present:
            facts.shards = weight_files(None, listing)
    except UnsafeIndexName as exc:
        facts.index_error = f"{exc}; no file it names was looked at"

    data, facts.manifest_error = _read_json(base, root, MANIFEST_NAME, facts)
    if data is not None:
        try:
            facts.manifest = Manifest.model_validate(data)
        except ValidationError as exc:
            first = exc.errors()[0]
            facts.manifest_unsafe = any(e["type"] == UNSAFE_NAME for e in exc.errors())
            facts.manifest_error = f"{MANIFEST_NAME}: {'.'.join(map(str, first['loc']))}: {first['msg']}"
    data, facts.marker_error = _read_json(base, root, MARKER_NAME, facts)
    if isinstance(data, dict):
        facts.marker = data

    names = set(facts.shards or []) | {"config.json"}
    if facts.manifest is not None:
        names |= {f.name for f in facts.manifest.files}
    for name in sorted(names):
        size = _size(base, root, name, facts)
        if size is not None:
            facts.sizes[name] = size
    return facts


def full_hashes(cp: CheckpointFacts, progress: Callable[[str, int], None] | None = None,
                start: Callable[[str, int], None] | None = None, jobs: int | None = None) -> dict[str, str]:
    """The content sha256 of every file that the manifest lists with a hash and that has the
    expected size (a file of the wrong size is already known to be wrong), several at once."""
    from concurrent.futures import ThreadPoolExecutor

    from hostctl.facts.hashing import digests, hash_jobs

    m = cp.manifest
    if m is None:
        return {}
    todo = sorted((f for f in m.files if f.sha256 is not None and cp.sizes.get(f.name) == f.size),
                  key=lambda f: -f.size)  # largest first: the last one to finish is a small one

    root = Path(cp.path)

    def one(f) -> tuple[str, str]:
        if start is not None:
            start(f.name, f.size)
        cb = (lambda n, name=f.name: progress(name, n)) if progress is not None else None
        # opened as the probe looked it up: no link followed below the folder
        return f.name, digests(open_file_below(base, f.name, shown=root, owners=False), cb).sha256

    workers = jobs or hash_jobs()
    with closing_fd(os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)) as base:
        if workers == 1 or len(todo) <= 1:
            return dict(one(f) for f in todo)
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="hostctl-hash") as pool:
            return dict(pool.map(one, todo))
