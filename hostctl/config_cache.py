"""A validated Config remembered by exactly what it was made from, so the read-only commands
import neither pydantic nor PyYAML (`plan`, `doctor --config`), and `status` and `logs`, which
need only the runtime's names, not even the config models.

The profile and recipe models are StrictRecords (hostctl/strict_record.py): pydantic validates
them, and costs ~120 ms to import and ~50-70 ms to build their validators on the 2-CPU machine;
reading a remembered Config back costs ~0.2 ms and imports the plain classes only
(benchmarks/doctor_quick.py). A Config is a pure function of the profile's path and bytes, the
recipe's path and bytes, and the code that validates them, so an entry is found by a hash of all
of those: editing the profile or the recipe, or installing another hostctl or pydantic, misses
the cache and validates afresh (and so reports a bad field, exit 2, as always).

An entry is one JSON file: the runtime's names (hostctl.service.identity), the load's warnings,
the recipe's path and digest, and the Config as a pickle. A pickle runs code when read, so an
entry is read only if this user owns it and its folder, neither is writable by anyone else, and
no directory above them is anyone's but this user's or root's to change (so root under sudo with
another user's HOME keeps no cache there); otherwise it is ignored, never trusted. An entry is
written under exactly the bytes the validation parsed (hostctl.safeload.recording), so a file
edited while it was validated, even back and forth, is never remembered under bytes its Config
was not made from. A profile or recipe that holds a secret value itself
(a token in `env`, an `--api-key` argument), or anything shaped like one (what
hostctl.doctor.redact hides: a token in `tuning`, a password in a URL), is never remembered: the
cache must not become a second copy of it. A cache that cannot be read or written is ignored:
loading then validates, as without a cache.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import json
import os
import stat
import sys
import time
from importlib.util import find_spec
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from hostctl import safefs
from hostctl.paths import user_cache_dir

if TYPE_CHECKING:
    from hostctl.config import Config

CACHE_SCHEMA = "hostctl.config-cache/v2"  # v2: Config.source_text
# hostctl.service.identity.names(): what each of the runtime's names must be.
NAME_TYPES = {"project": str, "api_host": str, "api_port": int, "api_key_env": (str, type(None)), "image": str,
              "project_dir": str}
KEEP = 64  # entries; tests and tuning sweeps load many profiles, a user has a few
MAX_ENTRY_BYTES = 1024 * 1024
STALE_TMP_S = 3600


def cache_dir() -> Path:
    return user_cache_dir() / "config"


def _code_files() -> list[str]:
    """Every module of this hostctl, and the first file of each library whose version decides
    what a profile or recipe validates to: pydantic's, and PyYAML's (which reads the recipe)."""
    root = Path(__file__).resolve().parent
    files = [str(spec.origin) for name in ("pydantic", "pydantic_core", "yaml")
             if (spec := find_spec(name)) and spec.origin]
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        files += [os.path.join(folder, n) for n in sorted(names) if n.endswith(".py")]
    return files


@functools.cache
def _code_stamp() -> bytes:
    """What the validation code is: _code_files() (path, size, mtime; found, not imported) and
    the Python that runs it. An edited or reinstalled module changes it."""
    h = hashlib.sha256(CACHE_SCHEMA.encode())
    h.update(f"{sys.version}\0{Path(__file__).resolve().parent}\0".encode())
    for path in _code_files():
        st = os.stat(path)
        h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.digest()


def _read(path: Path) -> bytes | None:
    """The bytes of the profile or the recipe as load_config would trust them (safefs.read_trusted:
    the owner, the mode, the way to it; a FIFO is not waited on), or None: loading then validates
    and says why it refuses the file."""
    try:
        return safefs.read_trusted(path, max_bytes=MAX_ENTRY_BYTES)
    except (safefs.UntrustedPathError, safefs.TooLargeError, OSError, ValueError):
        return None


def _private(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


@contextmanager
def _opened_folder(create: bool = False) -> Iterator[int | None]:
    """An fd of the cache folder, or None: the way to it walked by safefs with only this user and
    root trusted (not the user who ran sudo: under sudo with that user's HOME, root keeps no
    pickles in a folder they could swap), and the folder itself this user's and private (made so,
    with `create`). Every entry is then opened under this fd, so no link is followed and the
    prune deletes only in this folder."""
    try:
        fd = safefs.open_dir(cache_dir(), create=create, mode=0o700, uids=frozenset({0, os.geteuid()}))
    except (safefs.UntrustedPathError, OSError, ValueError):
        yield None
        return
    try:
        yield fd if _private(os.fstat(fd)) else None
    finally:
        os.close(fd)


def _read_entry(folder: int, name: str) -> bytes | None:
    """An entry's bytes: no link, a regular file, this user's alone; else None."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=folder)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or not _private(st):
            return None
        with os.fdopen(fd, "rb", closefd=False) as fh:
            data = fh.read(MAX_ENTRY_BYTES + 1)
    except OSError:
        return None
    finally:
        os.close(fd)
    return data if len(data) <= MAX_ENTRY_BYTES else None


def _key(profile: Path, profile_bytes: bytes) -> str:
    from hostctl import paths

    h = hashlib.sha256(_code_stamp())
    # The path as given too: Config.source keeps it, and a relative recipe is found from it; a
    # recipe named by its bundled name is found in recipes_dir(); project_dir's default names
    # the state directory.
    h.update(f"{profile}\0{profile.resolve()}\0{paths.recipes_dir()}\0{paths.STATE_DIR}\0".encode())
    h.update(hashlib.sha256(profile_bytes).digest())
    return h.hexdigest()[:40]


def _digest(path: str | Path) -> str | None:
    """The sha256 of the file's bytes (what an entry records of its recipe), or None."""
    data = _read(Path(path))
    return None if data is None else hashlib.sha256(data).hexdigest()


def _entry(profile: Path) -> dict | None:
    """The trusted entry for exactly this profile and its recipe, or None."""
    data = _read(profile)
    if data is None:
        return None
    with _opened_folder() as folder:
        blob = None if folder is None else _read_entry(folder, f"{_key(profile, data)}.json")
    if blob is None:
        return None
    try:
        doc = json.loads(blob)
        ok = doc["schema"] == CACHE_SCHEMA and _digest(doc["recipe_path"]) == doc["recipe_sha256"]
    except (ValueError, KeyError, TypeError, RecursionError):  # RecursionError: JSON nested past Python's stack
        return None
    return doc if ok else None


def remembered(profile: Path) -> Config | None:
    """The Config made from exactly this profile and its recipe, or None."""
    import pickle

    doc = _entry(profile)
    if doc is None:
        return None
    try:
        config = pickle.loads(base64.b64decode(doc["config"]))
    except Exception:  # an entry from another layout of the classes, or cut short: validate afresh
        return None
    from hostctl.config import Config

    return config if isinstance(config, Config) else None


def remembered_names(profile: Path) -> tuple[dict, list[str]] | None:
    """The runtime's names (hostctl.service.identity.names) and the load's warnings, read without
    pydantic or the config models, or None (then load the Config)."""
    doc = _entry(profile)
    if doc is None:
        return None
    names, warnings = doc.get("names"), doc.get("warnings")
    if not isinstance(names, dict) or not isinstance(warnings, list) or not all(isinstance(w, str) for w in warnings):
        return None
    if any(not isinstance(names.get(k), t) for k, t in NAME_TYPES.items()):
        return None  # another layout of the names: load the Config
    return names, warnings


def _holds_secret(data: bytes) -> bool:
    """Whether the file holds anything shaped like a secret (what hostctl.doctor.redact hides: a
    token in tuning or warmup, a password in a URL, an hf_ value under a plain env name), beyond
    the values secrets.from_config knows by name. None of the bundled files does."""
    from hostctl.doctor import redact

    return redact.count(data.decode("utf-8", "replace")) > 0


def remember(profile: Path, recipe: Path, config: Config, profile_bytes: bytes | None,
             recipe_bytes: bytes | None) -> None:
    """Record `config`, made from exactly `profile_bytes` and `recipe_bytes` (what the validation
    parsed: hostctl.safeload.recording), under those bytes. A file edited meanwhile, even back
    and forth, cannot put this Config under bytes it was not made from: a later load reads the
    file again, and other bytes miss the entry."""
    from hostctl import secrets

    if profile_bytes is None or recipe_bytes is None or secrets.from_config(config, environ={}):
        return
    if _holds_secret(profile_bytes) or _holds_secret(recipe_bytes):
        return
    with _opened_folder(create=True) as folder:
        if folder is not None:
            _store(folder, profile, recipe, config, profile_bytes, recipe_bytes)


def _store(folder: int, profile: Path, recipe: Path, config: Config, profile_bytes: bytes, recipe_bytes: bytes) -> None:
    import pickle

    from hostctl.service import identity

    try:
        doc = {"schema": CACHE_SCHEMA, "recipe_path": str(recipe), "recipe_sha256": hashlib.sha256(recipe_bytes).hexdigest(),
               "names": identity.names(config), "warnings": list(config.warnings),
               "config": base64.b64encode(pickle.dumps(config, protocol=pickle.HIGHEST_PROTOCOL)).decode()}
        blob = json.dumps(doc).encode()
        if len(blob) > MAX_ENTRY_BYTES:
            return  # _entry would never read it back (a recipe with long smoke prompts)
        _write(folder, f"{_key(profile, profile_bytes)}.json", blob)
        _prune(folder)
    except (OSError, pickle.PicklingError):
        pass  # a read-only or full home: the next load validates again


def _write(folder: int, name: str, blob: bytes) -> None:
    """Whole or not at all (a rename under the folder's fd), without the fsyncs of safefs.write_file:
    an entry lost in a crash is validated again, and a miss in a test run must not wait on the disk."""
    with safefs.staged_temp(folder, name) as (fd, tmp):
        try:
            with os.fdopen(fd, "wb", closefd=False) as fh:
                fh.write(blob)
        finally:
            os.close(fd)
        safefs.commit_temp(folder, tmp, name, durable=False)


def _prune(folder: int) -> None:
    def mtime(name: str) -> int:
        try:
            return os.stat(name, dir_fd=folder, follow_symlinks=False).st_mtime_ns
        except FileNotFoundError:
            return 0

    names = os.listdir(folder)
    entries = sorted((n for n in names if n.endswith(".json") and not n.startswith(".")), key=mtime, reverse=True)
    # and what a writer killed between its write and its rename left (_write's temporaries); an
    # hour old, so another process's write in progress is never taken from under it
    stale = time.time_ns() - STALE_TMP_S * 10**9
    temps = [n for n in names if n.startswith(".") and safefs.TEMP_MARK in n and mtime(n) < stale]
    for old in entries[KEEP:] + temps:
        try:
            os.unlink(old, dir_fd=folder)
        except OSError:
            pass


def load(profile: Path, validate: Callable[[], tuple[Config, Path]]) -> Config:
    """The remembered Config for `profile`, else `validate()` (which returns the Config and the
    recipe it read) and remember it under the bytes that validation parsed."""
    hit = remembered(profile)
    if hit is not None:
        return hit
    from hostctl.safeload import recording  # PyYAML with it (~25 ms): only to validate

    with recording() as reads:
        config, recipe = validate()
    remember(profile, recipe, config, reads.get(str(profile)), reads.get(str(recipe)))
    return config
