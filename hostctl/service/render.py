"""Render a Plan into files: compose.yaml, runtime.env and the systemd units.

Rendering is a pure function of the plan (plus the hostctl binary and profile paths the
units call); writing is separate and replaces each file atomically, so a failed render
never leaves a half-written project behind.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import jinja2

from hostctl import __version__, paths
from hostctl.atomic import write_atomic
from hostctl.plan.model import Plan

INSTALLED_HOSTCTL = "/usr/local/bin/hostctl"
INSTALLED_PROFILE = "/etc/hostctl/hostctl.toml"
FILES = {
    "compose.yaml": "compose.yaml.j2",
    "runtime.env": "runtime.env.j2",
    "hostctl-runtime.service": "hostctl-runtime.service.j2",
    "hostctl-power.service": "hostctl-power.service.j2",
}
_PLAIN_ENV = re.compile(r"^[A-Za-z0-9_./:,=+@%-]*$")


def _env_quote(value: str) -> str:
    # Compose interpolates $ and strips # comments in unquoted values; single quotes are literal.
    if _PLAIN_ENV.match(value) and not value.startswith('"'):
        return value
    if "'" in value:
        raise ValueError(f"environment value {value!r} contains a single quote, which an env file cannot carry")
    return f"'{value}'"


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(paths.templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["env_quote"] = _env_quote
    # A JSON string is a valid YAML double-quoted scalar: safe quoting for any argv or path.
    env.filters["q"] = lambda value: json.dumps(value, ensure_ascii=False)
    return env


def _compose_escape(plan: Plan) -> Plan:
    """Compose interpolates `$` in the file: a literal dollar in argv or paths must be doubled."""
    rt = plan.runtime.model_copy(deep=True)
    rt.command = [a.replace("$", "$$") for a in rt.command]
    for v in rt.volumes:
        v.source = v.source.replace("$", "$$")
    return plan.model_copy(update={"runtime": rt})


def render_files(plan: Plan, *, hostctl_bin: str = INSTALLED_HOSTCTL, config_path: str = INSTALLED_PROFILE) -> dict[str, str]:
    env = _environment()
    escaped = _compose_escape(plan)
    groups: dict[str, list[tuple[str, str]]] = {}
    for key, value in plan.runtime.env.items():
        groups.setdefault(plan.runtime.env_sources.get(key, "plan"), []).append((key, value))
    limits = sorted({f"{s.desired_w:g} W" for s in plan.power.gpus if s.desired_w is not None})
    context = {
        "version": __version__,
        "plan": plan,
        "rt": plan.runtime,
        "env_groups": list(groups.items()),
        "health_host": "127.0.0.1" if plan.runtime.api_host in ("0.0.0.0", "::") else plan.runtime.api_host,
        "hostctl_bin": hostctl_bin,
        "config_path": config_path,
        "power_summary": ", ".join(limits) if limits else "none set",
    }
    out = {}
    for name, template in FILES.items():
        ctx = dict(context, rt=escaped.runtime) if name == "compose.yaml" else context
        out[name] = env.get_template(template).render(**ctx)
    return out


def write_files(files: dict[str, str], out_dir: Path) -> list[Path]:
    return [write_atomic(out_dir / name, text, mode=0o644) for name, text in files.items()]
