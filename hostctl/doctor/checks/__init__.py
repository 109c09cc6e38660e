"""Doctor checks, one module per area: each module exports its checks in `CHECKS` (report order
within the area), and MODULES lists the areas in report order. A check's area is the name of
the module that exports it; nothing registers itself into a global list."""

from __future__ import annotations

from types import ModuleType

from hostctl.doctor.checks import docker, gpu, logs, memory, model, service, storage, system
from hostctl.doctor.registry import Check

MODULES: tuple[ModuleType, ...] = (gpu, memory, storage, model, docker, service, system, logs)


def area_of(module: ModuleType) -> str:
    return module.__name__.rsplit(".", 1)[-1]


AREAS: tuple[str, ...] = tuple(area_of(m) for m in MODULES)


def _collect() -> tuple[Check, ...]:
    out: list[Check] = []
    seen: set[str] = set()
    for module in MODULES:
        for c in module.CHECKS:
            if c.id in seen:
                raise ValueError(f"duplicate doctor check id {c.id!r} (in {module.__name__})")
            seen.add(c.id)
            out.append(c.in_area(area_of(module)))
    return tuple(out)


_ALL = _collect()


def all_checks() -> list[Check]:
    """Every check, in report order (by area as MODULES lists them, then as each module's CHECKS)."""
    return list(_ALL)
