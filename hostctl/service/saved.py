"""Service state that outlives a command, in state_dir(): the last `up` (endpoint, when it
became ready, the KV capacity the runtime reported, or why it failed), the last smoke
result, and the qualify verdict (the context ladder's result with the service fingerprint it
was measured under; facts read it back for doctor). `hostctl status` reads them; nothing
else depends on them being present."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from hostctl import paths
from hostctl.data import Data
from hostctl.facts.records import LastUp, QualifyVerdict
from hostctl.safefs import write_file

if TYPE_CHECKING:
    from hostctl.service.smoke_report import SmokeReport

SERVICE_FILE = "service.json"
SMOKE_FILE = "last-smoke.json"
QUALIFY_FILE = "qualify.json"  # read back by hostctl.facts.state

R = TypeVar("R", bound=Data)


def _write(name: str, doc: dict) -> Path:
    return write_file(paths.state_dir() / name, json.dumps(doc, indent=2) + "\n")


def _read(name: str) -> dict | None:
    from hostctl.errors import InputError, UntrustedPathError
    from hostctl.safeload import MAX_CONFIG_BYTES, load_json

    try:  # a damaged or planted state file is no state: the caller acts as if none was saved
        return load_json(paths.state_dir() / name, "state file", limit=MAX_CONFIG_BYTES)
    except (InputError, UntrustedPathError):
        return None


def _load_record(name: str, record: type[R]) -> R | None:
    """The file as its record; None when there is none, or the file is damaged or not hostctl's."""
    from pydantic import ValidationError

    doc = _read(name)
    try:
        return record.model_validate(doc, strict=True) if doc is not None else None
    except ValidationError:
        return None


def save_service(last: LastUp) -> Path:
    return write_file(paths.state_dir() / SERVICE_FILE, last.model_dump_json(indent=2, exclude_none=True) + "\n")


def load_service() -> LastUp | None:
    """The last up's record (None: none, or not one)."""
    return _load_record(SERVICE_FILE, LastUp)


def save_smoke(report: SmokeReport) -> Path:
    return _write(SMOKE_FILE, report.to_dict())


def load_smoke() -> SmokeReport | None:
    """The last smoke run (up's gate or `hostctl smoke`); None when there is none, or the file is
    damaged or not hostctl's."""
    from pydantic import ValidationError

    from hostctl.service.smoke_report import SMOKE_SCHEMA, SmokeReport

    doc = _read(SMOKE_FILE)
    if not isinstance(doc, dict) or doc.get("schema") != SMOKE_SCHEMA:
        return None
    try:  # `ok` is written for readers of the file; the report derives it from its results
        return SmokeReport.model_validate({k: v for k, v in doc.items() if k not in ("schema", "ok")}, strict=True)
    except ValidationError:
        return None


def save_qualify(verdict: QualifyVerdict) -> Path:
    return write_file(paths.state_dir() / QUALIFY_FILE, verdict.model_dump_json(indent=2) + "\n")


def load_qualify() -> QualifyVerdict | None:
    """The stored qualify verdict (None: none, or not one); the facts read the same file as the
    same record (hostctl.facts.state)."""
    return _load_record(QUALIFY_FILE, QualifyVerdict)
