"""Where hostctl finds its bundled resources (the compose templates, the systemd unit templates,
runtime recipes and hosts, the rendered examples) and where it keeps state that outlives a command."""

from __future__ import annotations

import os
import sys
from pathlib import Path

STATE_DIR = Path("/var/lib/hostctl")
# node_exporter's textfile folder as Debian's prometheus-node-exporter package makes it: where
# `hostctl metrics` and hostctl-metrics.service write hostctl.prom by default.
TEXTFILE_DIR = Path("/var/lib/prometheus/node-exporter")
PROFILE_SEARCH = (Path("hostctl.toml"), Path("/etc/hostctl/hostctl.toml"))
# Tests point this at a temporary directory so files hostctl writes under /etc and /var/lib
# land there; devices, mounts and swap are still the real ones.
SYSROOT_ENV = "HOSTCTL_SYSROOT"


# The hostctl every systemd unit calls: one stable path, not a venv's console script (which moves
# when the venv is rebuilt). install.sh links it to root's venv in /opt/hostctl (the VM guest the
# same way); provision --only system refuses while nothing is there, or while anyone but root could
# change what it runs (hostctl/provision/boot_code.py).
INSTALLED_HOSTCTL = "/usr/local/bin/hostctl"


def hostctl_for_units(explicit: str | None = None) -> str:
    """The hostctl path written into units: the one asked for (--hostctl-bin, a test), else the
    installed path. The one resolver for it: render, up, tune and every provision part use it."""
    return explicit or INSTALLED_HOSTCTL


def searched_profile() -> Path | None:
    """The first host profile in PROFILE_SEARCH that is a file (config.find_profile's search, here
    so that doctor can tell "no profile" without importing the config models)."""
    for candidate in PROFILE_SEARCH:
        try:
            if candidate.is_file():
                return candidate
        except OSError:  # a permission denied on the way
            continue
    return None


def no_profile_error():
    """What finding no host profile raises (config.find_profile, and the commands that learn it
    from searched_profile without importing the config models)."""
    from hostctl.errors import NoProfileError

    return NoProfileError(
        "no host profile found",
        details=[f"looked for {', '.join(str(p) for p in PROFILE_SEARCH)}"],
        fix="pass --config PATH, or start from a bundled example: runtime/hosts/demo-cpu.toml",
    )


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
    """compose.yaml.j2 and runtime.env.j2."""
    return resource_root() / "templates"


def systemd_dir() -> Path:
    """The unit templates (hostctl-*.service.j2): top-level, so a reader finds the units hostctl writes."""
    return resource_root() / "systemd"


def alert_rules_path() -> Path:
    """The Prometheus alerting rules for `hostctl metrics`' series (`hostctl metrics --alert-rules`)."""
    return resource_root() / "prometheus" / "hostctl-alerts.yml"


def template_dirs() -> list[Path]:
    """Where the renderer looks for a template, in order (the names do not overlap)."""
    return [templates_dir(), systemd_dir()]


def template_path(name: str) -> Path:
    """The one file of that template name; FileNotFoundError naming the folders when none has it."""
    for d in template_dirs():
        if (d / name).is_file():
            return d / name
    raise FileNotFoundError(f"no template {name} in {', '.join(map(str, template_dirs()))}")


def recipes_dir() -> Path:
    return resource_root() / "runtime" / "recipes"


def hosts_dir() -> Path:
    return resource_root() / "runtime" / "hosts"


def golden_dir() -> Path:
    return resource_root() / "compose"
