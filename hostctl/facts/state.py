"""State facts: what earlier hostctl runs left in the state directory (/var/lib/hostctl): the
functional P2P verdict and the qualify verdict with what each was measured under, the provision parts that converged on
this host (provisioned.json, written by hostctl/provision/converged.py), what the last `up` or
`down` left (service.json, written by hostctl/service/saved.py) and the supervisor's endings
(restarts.json, written by hostctl/service/restarts.py)."""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from hostctl import paths
from hostctl.facts.records import (LastUp, P2PVerdict, ProvisionedPart, QualifyVerdict, ServiceRecord, StateFacts,
                                 SupervisedEnding)

P2P_FILE = "p2p.json"
QUALIFY_FILE = "qualify.json"  # written by hostctl.service.saved.save_qualify
PROVISIONED_FILE = "provisioned.json"
SERVICE_FILE = "service.json"  # hostctl.service.saved.SERVICE_FILE
RESTARTS_FILE = "restarts.json"  # hostctl.service.restarts.HISTORY_FILE


def probe_state(state_dir: Path | None = None) -> tuple[StateFacts, list[str]]:
    """(state, notes); a file that cannot be read is ignored with a note, never fatal."""
    state_dir = state_dir or paths.state_dir()
    notes: list[str] = []
    state = StateFacts()
    state.p2p = _load(state_dir / P2P_FILE, notes, lambda d: P2PVerdict.model_validate(d, strict=True))
    state.qualify = _load(state_dir / QUALIFY_FILE, notes, lambda d: QualifyVerdict.model_validate(d, strict=True))
    provisioned = _load(state_dir / PROVISIONED_FILE, notes,
                        lambda d: {k: ProvisionedPart.model_validate(v, strict=True)
                                   for k, v in dict(d.get("parts", {})).items()})
    state.provisioned = provisioned or {}
    state.service = _load(state_dir / SERVICE_FILE, notes, _service)
    state.supervised = _load(state_dir / RESTARTS_FILE, notes,
                             lambda d: [SupervisedEnding.model_validate(e, strict=True) for e in d["entries"]]) or []
    return state, notes


def _service(doc: dict) -> ServiceRecord:
    last = LastUp.model_validate(doc, strict=True)
    return ServiceRecord(state=last.state, container=last.container, at=last.at)


def _load(path: Path, notes: list[str], parse):
    from hostctl.errors import InputError, MissingFileError, UntrustedPathError
    from hostctl.safeload import MAX_CONFIG_BYTES, load_json

    try:
        data = load_json(path, "state file", limit=MAX_CONFIG_BYTES)
    except MissingFileError:
        return None
    except (InputError, UntrustedPathError) as exc:
        notes.append(f"ignored {path}: {exc}")
        return None
    try:
        return parse(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        notes.append(f"ignored {path}: {where}: {first['msg']}")
    except (KeyError, TypeError, AttributeError, ValueError) as exc:
        notes.append(f"ignored {path}: {exc.__class__.__name__}: {exc}")
    return None
