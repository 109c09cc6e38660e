"""hostctl.noplugins: with every pydantic plugin off, pydantic's plugin loader is not imported
(nor importlib.metadata, which it imports), and pydantic still asks the stand-in the way hostctl
expects; with plugins wanted, pydantic's own loader runs."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import pydantic.plugin._schema_validator as schema_validator

from hostctl import paths

DEMO = str(paths.hosts_dir() / "demo-cpu.toml")
WRAPPER = """
import json, sys
from hostctl.cli import main
main(sys.argv[1:])
loader = sys.modules.get("pydantic.plugin._loader")
print(json.dumps({"metadata": "importlib.metadata" in sys.modules,
                  "loader": getattr(loader, "__file__", None) if loader else "absent",
                  "get_plugins": list(loader.get_plugins()) if loader else None}), file=sys.stderr)
"""


def test_pydantic_asks_the_loader_module_for_get_plugins():
    # The stand-in works only while pydantic imports get_plugins from that module when it builds a
    # validator (pydantic 2.13.4); an upgrade that changes this fails here, not silently.
    source = inspect.getsource(schema_validator.create_schema_validator)
    assert "from ._loader import get_plugins" in source and "get_plugins()" in source


def _run(env_value: str | None, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    env["XDG_CACHE_HOME"] = str(tmp_path / "cache")  # an empty config cache: the profile is validated
    env["DOCKER_HOST"] = f"unix://{tmp_path}/no-engine.sock"  # the docker SDK's urllib3 imports importlib.metadata itself
    if env_value is not None:
        env["PYDANTIC_DISABLE_PLUGINS"] = env_value
    done = subprocess.run([sys.executable, "-c", WRAPPER, "plan", "--json", "--config", DEMO], capture_output=True,
                          text=True, env=env, cwd=tmp_path, timeout=120)
    assert json.loads(done.stdout)["schema"] == "hostctl.plan/v1", done.stderr  # validation ran: a whole plan
    return json.loads(done.stderr.strip().splitlines()[-1])


def test_plugins_off_by_default_without_importlib_metadata(tmp_path):
    seen = _run(None, tmp_path)
    assert seen == {"metadata": False, "loader": None, "get_plugins": []}  # the stand-in has no __file__


def test_plugins_wanted_use_pydantics_own_loader(tmp_path):
    seen = _run("some_plugin_name", tmp_path)  # off: only that one; pydantic scans for the rest
    assert seen["metadata"] is True and seen["loader"].endswith("pydantic/plugin/_loader.py")
