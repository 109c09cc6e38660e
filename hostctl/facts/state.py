"""State facts: what earlier hostctl runs left in the state directory (/var/lib/hostctl),
such as the functional P2P verdict and what it was measured under."""

from __future__ import annotations

import json
from pathlib import Path

from pydantic import ValidationError

from hostctl.facts.model import P2PVerdict, StateFacts
from hostctl import paths

P2P_FILE = "p2p.json"


def probe_state(state_dir: Path | None = None) -> tuple[StateFacts, list[str]]:
    """(state, notes); a file that cannot be read is ignored with a note, never fatal."""
    state_dir = state_dir or paths.state_dir()
    notes: list[str] = []
    state = StateFacts()
    path = state_dir / P2P_FILE
    try:
        text = path.read_text()
    except FileNotFoundError:
        return state, notes
    except OSError as exc:
        return state, [f"ignored {path}: {exc.strerror or exc}"]
    try:
        state.p2p = P2PVerdict.model_validate(json.loads(text))
    except json.JSONDecodeError as exc:
        notes.append(f"ignored {path}: not valid JSON ({exc.msg} at line {exc.lineno})")
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        notes.append(f"ignored {path}: {where}: {first['msg']}")
    return state, notes
