"""The Compose v2 plugin's version, remembered by the plugin binary's identity (path, device,
inode, size, mtime_ns) in one small file under paths.user_cache_dir(): the plugin answers
`version --short` in ~45-75 ms on the 2-CPU machine (a Go binary starting up), most of what the
facts probes wait on (benchmarks/results/doctor_quick-2vcpu-shared.txt, round 3), and its answer
changes only when the binary is replaced. Reinstalling or upgrading the plugin changes the
identity, so the next probe asks it again. A cache that cannot be read or written is ignored:
the probe then asks the plugin, as without a cache.
"""

from __future__ import annotations

import json
import os

from hostctl.paths import user_cache_dir

CACHE_SCHEMA = "hostctl.compose-version-cache/v1"
CACHE_NAME = "compose-version.json"


def identity(plugin: str) -> dict | None:
    try:
        st = os.stat(plugin)
    except OSError:
        return None
    return {"plugin": os.path.abspath(plugin), "dev": st.st_dev, "ino": st.st_ino, "size": st.st_size,
            "mtime_ns": st.st_mtime_ns}


def remembered(plugin: str) -> str | None:
    """The version recorded for exactly this binary, or None (no cache, another binary, unreadable)."""
    ident = identity(plugin)
    if ident is None:
        return None
    from hostctl.errors import InputError, UntrustedPathError
    from hostctl.safeload import MAX_CONFIG_BYTES, load_json

    try:
        data = load_json(user_cache_dir() / CACHE_NAME, "compose version cache", limit=MAX_CONFIG_BYTES)
    except (InputError, UntrustedPathError):
        return None
    if not isinstance(data, dict) or data.get("schema") != CACHE_SCHEMA:
        return None
    version = data.get("version")
    if any(data.get(k) != v for k, v in ident.items()) or not isinstance(version, str) or not version:
        return None
    return version


def remember(plugin: str, version: str, before: dict | None) -> None:
    """Record `version` for `plugin`, if the binary is still the one that answered (`before`: its
    identity taken before asking it, so a plugin replaced meanwhile is not recorded)."""
    ident = identity(plugin)
    if ident is None or ident != before:
        return
    try:
        from hostctl.safefs import write_file  # only on a miss: tempfile and its imports cost ~4 ms

        write_file(user_cache_dir() / CACHE_NAME, json.dumps({"schema": CACHE_SCHEMA, **ident, "version": version}) + "\n")
    except OSError:
        pass  # a read-only or full home: the next probe asks the plugin again
