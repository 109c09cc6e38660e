"""Which provision parts converged on this host, kept in /var/lib/hostctl/provisioned.json so
that `hostctl verify` knows what was provisioned here (a part never provisioned is "not
provisioned", not a failure). A part is recorded when, after a real run, a fresh look at the host
decides zero actions for it (`converged_at` is the first time it did with this profile and this
hostctl: a re-run that changes nothing writes nothing). Read back by hostctl/facts/state.py."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

from hostctl import __version__, paths
from hostctl.safefs import write_file
from hostctl.config import Config
from hostctl.facts.state import PROVISIONED_FILE

SCHEMA = "hostctl.provisioned/v1"


def profile_digest(config: Config) -> str | None:
    """The digest of the profile text as validated (not re-read by path: see Config.source_text)."""
    return hashlib.sha256(config.source_text.encode()).hexdigest() if config.source_text else None


def record_converged(part: str, config: Config, state_dir: Path | None = None) -> Path:
    path = (state_dir or paths.state_dir()) / PROVISIONED_FILE
    from hostctl.errors import InputError, UntrustedPathError
    from hostctl.safeload import MAX_CONFIG_BYTES, load_json

    try:
        doc = load_json(path, "provision record", limit=MAX_CONFIG_BYTES)
        parts = dict(doc.get("parts", {})) if isinstance(doc, dict) else {}
    except (InputError, UntrustedPathError, TypeError, ValueError):  # parts not a mapping: start the record again
        parts = {}
    entry = {"profile": config.profile.name, "profile_sha256": profile_digest(config), "hostctl": __version__}
    old = parts.get(part)
    if isinstance(old, dict) and all(old.get(k) == v for k, v in entry.items()) and old.get("converged_at"):
        return path  # converged before with this profile: a re-run leaves the record (and its mtime) as it is
    parts[part] = {"converged_at": datetime.now(timezone.utc).isoformat(timespec="seconds"), **entry}
    return write_file(path, json.dumps({"schema": SCHEMA, "parts": parts}, indent=2, sort_keys=True) + "\n")
