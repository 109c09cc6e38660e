"""The runtime as the profile alone names it: the Compose project, the container, the endpoint,
the API key's variable, the served name, the hang bound, the image and the rendered project's
directory.

`down`, `status`, `logs` and `smoke` need nothing else, so they read no facts: learning a
container's name needs no probe of GPUs, drives or memory. These are the values the plan's
RuntimeSpec carries (hostctl/plan/runtime.py copies them from the profile and recipe);
tests/unit/test_cli_thin.py keeps the two equal for every bundled example.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import ConfigDict

from hostctl.data import Data
from hostctl import paths

if TYPE_CHECKING:
    from hostctl.config import Config

# The Compose service (templates/compose.yaml.j2 names the container <project>-<service>).
SERVICE = "runtime"
# A listener on every address is reached on loopback: hostctl talks to its API only there.
ANY_ADDRESS = ("0.0.0.0", "::")


def api_address(host: str, port: int) -> tuple[str, int]:
    """Where hostctl reaches an API the runtime binds on host:port."""
    return ("127.0.0.1" if host in ANY_ADDRESS else host), port


def endpoint_url(host: str, port: int) -> str:
    host, port = api_address(host, port)
    return f"http://{'[' + host + ']' if ':' in host else host}:{port}"


def container_name(project: str, service: str = SERVICE) -> str:
    return f"{project}-{service}"


class RuntimeIdentity(Data):
    model_config = ConfigDict(frozen=True)

    project: str
    container: str
    endpoint: str
    api_key_env: str | None
    served_name: str
    hang_timeout_s: int  # the recipe's: how long the engine may show no progress (hostctl.service.liveness)
    image: str  # "" when neither the profile nor the recipe names one (the plan reports that error)
    project_dir: Path  # under the sysroot, as `up` renders it


def of_config(config: Config) -> RuntimeIdentity:
    rt = config.profile.runtime
    return RuntimeIdentity(project=rt.project, container=container_name(rt.project),
                           endpoint=endpoint_url(rt.api_host, rt.api_port), api_key_env=rt.api_key_env,
                           served_name=config.recipe.served_name, hang_timeout_s=config.recipe.hang_timeout_s,
                           image=rt.image or config.recipe.image or "", project_dir=paths.system_path(rt.project_dir))
