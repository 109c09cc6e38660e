"""hostctl's pydantic runs without third-party plugins, and without looking for any.

PYDANTIC_DISABLE_PLUGINS=__all__ makes pydantic's plugin loader answer "no plugins", but the
loader's module still imports importlib.metadata (and with it email, zipfile, csv: ~15-25 ms on
the 2-CPU machine, benchmarks/results/doctor_quick-2vcpu-shared.txt) the first time a validator
is built, which every command with a typed option does through typer. So where the variable says
so (hostctl sets it unless the user set it otherwise), a module that gives pydantic's own answer
for that setting, no plugins, is what importing the loader yields (an import hook: nothing is
imported or added to sys.modules until pydantic asks, so `--help` still imports no pydantic).

This is tied to a private pydantic module (`pydantic.plugin._loader`, pydantic pinned in
pyproject.toml); tests/unit/test_noplugins.py fails should an upgrade stop asking it the same way.
"""

from __future__ import annotations

import os
import sys
from importlib.machinery import ModuleSpec

LOADER = "pydantic.plugin._loader"
DISABLED = ("__all__", "1", "true")  # the values pydantic's loader reads as "every plugin off"


def _no_plugins() -> tuple[()]:
    return ()


class _StandIn:
    """A meta path finder and loader for LOADER alone (importlib's protocol, without importlib.abc)."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> ModuleSpec | None:
        return ModuleSpec(name, self, origin="hostctl.noplugins") if name == LOADER else None

    def create_module(self, spec: ModuleSpec) -> None:
        return None  # the default module object

    def exec_module(self, module: object) -> None:
        module.PYDANTIC_ENTRY_POINT_GROUP = "pydantic"  # type: ignore[attr-defined]
        module.get_plugins = _no_plugins  # type: ignore[attr-defined]


def disable() -> None:
    # No third-party pydantic plugin observes or alters hostctl's validation (typer disables them
    # for its own parsing too).
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    if os.environ["PYDANTIC_DISABLE_PLUGINS"] not in DISABLED or LOADER in sys.modules:
        return  # some plugins wanted, or pydantic already loaded its own loader: leave it be
    if not any(isinstance(f, _StandIn) for f in sys.meta_path):
        sys.meta_path.insert(0, _StandIn())
