"""Where hostctl finds its bundled resources (templates, runtime recipes and hosts, systemd units)
and where it keeps state that outlives a command."""

from __future__ import annotations

import os
import sys
from pathlib import Path

STATE_DIR = Path("/var/lib/hostctl")
PROFILE_SEARCH = (Path("hostctl.toml"), Path("/etc/hostctl/hostctl.toml"))
# Tests point this at a temporary directory so files hostctl writes under /etc and /var/lib
# land there; devices, mounts and swap are still the real ones.
SYSROOT_ENV = "HOSTCTL_SYSROOT"


# The hostctl every systemd unit calls: one stable path, not a venv's console script (which moves
# when the venv is rebuilt). provision --only system refuses while nothing is there and says how to
# link it (README "Provisioning storage" and the VM guest link /usr/local/bin/hostctl the same way).
INSTALLED_HOSTCTL = "/usr/local/bin/hostctl"


def hostctl_for_units(explicit: str | None = None) -> str:
    """The hostctl path written into units: the one asked for (--hostctl-bin, a test), else the
    installed path. The one resolver for it: render, up, tune and every provision part use it."""
    return explicit or INSTALLED_HOSTCTL


def sysroot() -> Path:
    return Path(os.environ.get(SYSROOT_ENV) or "/")


def system_path(path: str | Path) -> Path:
    """An absolute host path (/etc/fstab, /var/lib/hostctl/...) under the current sysroot."""
    return sysroot() / str(path).lstrip("/")


def state_dir() -> Path:
    return system_path(STATE_DIR)


def resource_root() -> Path:
    """The checkout (editable install) or the data prefix a wheel installed into."""
    checkout = Path(__file__).resolve().parent.parent
    if (checkout / "templates").is_dir():
        return checkout
    installed = Path(sys.prefix) / "share" / "hostctl"
    if (installed / "templates").is_dir():
        return installed
    raise RuntimeError(f"hostctl resources not found in {checkout} or {installed}: reinstall hostctl")


def templates_dir() -> Path:
    return resource_root() / "templates"


def recipes_dir() -> Path:
    return resource_root() / "runtime" / "recipes"


def hosts_dir() -> Path:
    return resource_root() / "runtime" / "hosts"


def golden_dir() -> Path:
    return resource_root() / "compose"
