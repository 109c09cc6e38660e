"""The service fingerprint: what identifies one configuration of the running service, so a result
measured under it (a bench result, the qualify verdict, a verified cache) can be told apart from one
measured under another.

It is a hash over three parts and nothing else:
  - the rendered compose.yaml (image reference, command line, caps, mounts, labels),
  - the *names* in runtime.env (never the values: a secret must not change the hash or leak
    through it; a changed value of a recipe knob already shows in the recipe's id or the command),
  - the image id the engine resolves the image reference to (a rebuilt image with the same tag
    is another service).

Computing it is pure (`of_files`, `of_plan`); where the image id comes from is the caller's
business (facts for doctor, the running container for bench).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ConfigDict

from hostctl.data import Data

if TYPE_CHECKING:  # `status` fingerprints the running project without the plan's schema
    from hostctl.plan.records import Plan

FINGERPRINT_VERSION = 1
_ENV_LINE = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=")


class ServiceFingerprint(Data):
    model_config = ConfigDict(frozen=True)

    compose_sha256: str
    env_names: tuple[str, ...]
    image_id: str | None  # None: the engine did not know the image (the hash says so too)

    @property
    def digest(self) -> str:
        body = {"v": FINGERPRINT_VERSION, "compose_sha256": self.compose_sha256,
                "env_names": list(self.env_names), "image_id": self.image_id}
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).hexdigest()

    def to_dict(self) -> dict:
        return {"digest": self.digest, "compose_sha256": self.compose_sha256, "env_names": list(self.env_names),
                "image_id": self.image_id}

    @classmethod
    def from_dict(cls, doc: dict) -> "ServiceFingerprint":
        return cls(compose_sha256=str(doc.get("compose_sha256") or ""),
                   env_names=tuple(doc.get("env_names") or ()), image_id=doc.get("image_id"))


def env_names(env_text: str) -> tuple[str, ...]:
    """The variable names an env file sets, sorted (comments and blank lines ignored)."""
    names = {m.group(1) for line in env_text.splitlines() if (m := _ENV_LINE.match(line))}
    return tuple(sorted(names))


def of_files(compose_text: str, env_text: str, image_id: str | None) -> ServiceFingerprint:
    return ServiceFingerprint(compose_sha256=hashlib.sha256(compose_text.encode()).hexdigest(),
                              env_names=env_names(env_text), image_id=image_id)


def of_plan(plan: Plan, image_id: str | None) -> ServiceFingerprint:
    """The fingerprint `up` would give this plan (compose.yaml does not depend on the unit paths)."""
    from hostctl.service.render import render_files

    files = render_files(plan)
    return of_files(files["compose.yaml"], files["runtime.env"], image_id)


def of_project(project_dir: Path, image_id: str | None) -> ServiceFingerprint | None:
    """The fingerprint of the project `up` rendered and started (None when it is not there)."""
    try:
        compose = (project_dir / "compose.yaml").read_text()
        env = (project_dir / "runtime.env").read_text()
    except OSError:
        return None
    return of_files(compose, env, image_id)


def differences(stored: ServiceFingerprint, current: ServiceFingerprint) -> list[str]:
    """What changed between a stored fingerprint and the current one, in words (empty: the same).
    An image id that is unknown on either side is reported as unknown, not as equal."""
    out = []
    if stored.compose_sha256 != current.compose_sha256:
        out.append("the rendered compose.yaml differs (recipe, profile, plan or hostctl version changed)")
    if stored.env_names != current.env_names:
        added = sorted(set(current.env_names) - set(stored.env_names))
        removed = sorted(set(stored.env_names) - set(current.env_names))
        parts = ([f"added {', '.join(added)}"] if added else []) + ([f"removed {', '.join(removed)}"] if removed else [])
        out.append("runtime.env sets other variables (" + "; ".join(parts) + ")")
    if stored.image_id is None or current.image_id is None:
        if stored.image_id != current.image_id:
            out.append("the image id is unknown on one side (" + (f"stored {_short(stored.image_id)}, "
                       f"now {_short(current.image_id)}") + ")")
    elif stored.image_id != current.image_id:
        out.append(f"the image is another build (stored {_short(stored.image_id)}, now {_short(current.image_id)})")
    return out


def _short(image_id: str | None) -> str:
    if not image_id:
        return "unknown"
    return image_id.removeprefix("sha256:")[:12]
