"""The restart history of a supervised runtime (`hostctl up --foreground`, README "Supervision"):
each time the supervisor ended on a death or a hang it records when, the cause (a failure
catalogue id, hostctl/failures.py), the runtime's exit code and the log lines that matched; the
next supervised start marks that entry restarted. `status` summarises it
("restarted 2 times in the last hour: container-oom at ..."). Kept in state_dir()/restarts.json,
the last KEEP entries, each a facts.records.SupervisedEnding (the facts read the same file as the
same record); summary() is pure, for tests on recorded data.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

from hostctl import paths
from hostctl.facts.records import SupervisedEnding
from hostctl.safefs import write_file

HISTORY_FILE = "restarts.json"
SCHEMA = "hostctl.restarts/v1"
KEEP = 50
WINDOW_S = 3600


def _now() -> datetime:
    return datetime.now(timezone.utc)


def iso(t: datetime) -> str:
    return t.isoformat(timespec="milliseconds")


def load() -> list[SupervisedEnding]:
    """The recorded endings, oldest first; an entry that does not validate is left out (a damaged
    or foreign file is no history)."""
    from pydantic import ValidationError

    from hostctl.errors import InputError, UntrustedPathError
    from hostctl.safeload import MAX_CONFIG_BYTES, load_json

    try:
        doc = load_json(paths.state_dir() / HISTORY_FILE, "restart history", limit=MAX_CONFIG_BYTES)
    except (InputError, UntrustedPathError):
        return []
    entries = doc.get("entries") if isinstance(doc, dict) and doc.get("schema") == SCHEMA else None
    out = []
    for e in entries if isinstance(entries, list) else ():
        try:
            out.append(SupervisedEnding.model_validate(e, strict=True))
        except ValidationError:
            continue
    return out


def _save(entries: list[SupervisedEnding]) -> None:
    write_file(paths.state_dir() / HISTORY_FILE,
               json.dumps({"schema": SCHEMA, "entries": [e.model_dump(mode="json") for e in entries[-KEEP:]]},
                          indent=2) + "\n")


def record_end(entry: SupervisedEnding) -> None:
    """The supervisor ended on a death or hang."""
    _save(load() + [entry])


def mark_restart(at: datetime | None = None) -> SupervisedEnding | None:
    """A supervised start began: the last ending not yet followed by a start was restarted now."""
    entries = load()
    if not entries or entries[-1].restart_at:
        return None
    entries[-1] = entries[-1].model_copy(update={"restart_at": iso(at or _now())})
    _save(entries)
    return entries[-1]


def mark_ready(at: datetime | None = None) -> None:
    """The restarted runtime passed the gate again."""
    entries = load()
    if entries and entries[-1].restart_at and not entries[-1].ready_again_at:
        entries[-1] = entries[-1].model_copy(update={"ready_again_at": iso(at or _now())})
        _save(entries)


def _parse(text) -> datetime | None:
    try:
        t = datetime.fromisoformat(str(text))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def summary(entries: list[SupervisedEnding], now: datetime, window_s: int = WINDOW_S) -> dict | None:
    """What `status` shows: restarts in the window, each with its cause, and the last ending
    (which, when it was not followed by a restart, is why the runtime is down: the start limit
    stopped the loop, or the service was not restarted)."""
    if not entries:
        return None
    since = now - timedelta(seconds=window_s)
    recent = [e for e in entries if e.restart_at and (t := _parse(e.restart_at)) is not None and t >= since]
    last = entries[-1]
    doc = {"restarts_in_window": len(recent), "window_s": window_s,
           "restarts": [{"at": e.ended_at, "cause": e.cause, "exit_code": e.exit_code} for e in recent],
           "last": last.model_dump(mode="json")}
    window = "the last hour" if window_s == 3600 else f"the last {window_s} s"
    times = "time" if len(recent) == 1 else "times"
    text = f"restarted {len(recent)} {times} in {window}"
    if recent:
        text += ": " + ", ".join(f"{e.cause} at {e.ended_at}" for e in recent)
    if not last.restart_at:
        text += (f"; last ended: {last.cause} at {last.ended_at} (exit code {last.exit_code}), "
                 "not restarted since")
    doc["text"] = text
    return doc


def status_part(now: datetime | None = None) -> dict | None:
    return summary(load(), now or _now())
