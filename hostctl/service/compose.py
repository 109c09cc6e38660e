"""Docker Compose v2 as a command: the one place hostctl calls `docker compose`."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from hostctl import runner


@dataclass(frozen=True)
class ComposeCheck:
    checked: bool  # False when Compose v2 is not installed
    ok: bool
    output: str


def compose_available() -> runner.Result:
    return runner.run(["docker", "compose", "version", "--short"], timeout=15)


def compose_check(project_dir: Path) -> ComposeCheck:
    """Validate a rendered project with `docker compose config` (no engine needed)."""
    probe = compose_available()
    if not probe.ok:
        return ComposeCheck(checked=False, ok=False, output=f"docker compose is not available ({probe.why()})")
    res = runner.run(["docker", "compose", "--project-directory", str(project_dir),
                      "-f", str(project_dir / "compose.yaml"), "config", "--quiet"], timeout=30)
    return ComposeCheck(checked=True, ok=res.ok, output=(res.stderr or res.stdout).strip())
