"""State facts: what earlier hostctl runs left in the state directory (/var/lib/hostctl),
such as the functional P2P verdict and the qualify verdict, each with what it was measured under."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import BaseModel, ValidationError

from hostctl import paths
from hostctl.facts.model import P2PVerdict, QualifyVerdict, StateFacts

P2P_FILE = "p2p.json"
QUALIFY_FILE = "qualify.json"  # written by hostctl.service.state.save_qualify


def _load(path: Path, model: type[BaseModel], notes: list[str]):
    """The file as `model`, or None (absent, or unreadable with a note); never fatal."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        notes.append(f"ignored {path}: {exc.strerror or exc}")
        return None
    try:
        return model.model_validate(json.loads(text))
    except json.JSONDecodeError as exc:
        notes.append(f"ignored {path}: not valid JSON ({exc.msg} at line {exc.lineno})")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        notes.append(f"ignored {path}: {where}: {first['msg']}")
    return None


def probe_state(state_dir: Path | None = None) -> tuple[StateFacts, list[str]]:
    """(state, notes); a file that cannot be read is ignored with a note, never fatal."""
    state_dir = state_dir or paths.state_dir()
    notes: list[str] = []
    state = StateFacts(p2p=_load(state_dir / P2P_FILE, P2PVerdict, notes),
                       qualify=_load(state_dir / QUALIFY_FILE, QualifyVerdict, notes))
    return state, notes
