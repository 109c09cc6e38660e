"""Docker Compose v2 as a command: the one place hostctl calls `docker compose`.

Compose, run as root, reads every file of the project folder (compose.yaml, env files, a `.env`
it finds by itself): a folder that someone other than root and the invoking user owns or can
write into is refused before Compose reads it (safefs, exit 3).
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ConfigDict

from hostctl.data import Data
from hostctl import runner, safefs


class ComposeCheck(Data):
    model_config = ConfigDict(frozen=True)

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
    safefs.check_dir(project_dir, private=True)
    res = runner.run(["docker", "compose", "--project-directory", str(project_dir),
                      "-f", str(project_dir / "compose.yaml"), "config", "--quiet"], timeout=30)
    return ComposeCheck(checked=True, ok=res.ok, output=(res.stderr or res.stdout).strip())


def _trusted_project(project_dir: Path) -> bool:
    try:
        safefs.check_dir(project_dir, private=True)
    except (safefs.UntrustedPathError, OSError):
        return False
    return True


def _base(project_dir: Path | None, project: str) -> list[str]:
    """`down` works by project name alone, so a folder it may not trust is simply not read."""
    argv = ["docker", "compose", "--project-name", project]
    if project_dir is not None and _trusted_project(project_dir) and (project_dir / "compose.yaml").is_file():
        argv += ["--project-directory", str(project_dir), "-f", str(project_dir / "compose.yaml")]
    return argv


def compose_up(project_dir: Path, project: str, *, timeout: float = 600, new_session: bool = False) -> runner.Result:
    """Create and start the runtime detached; readiness is hostctl's job, not Compose's.
    new_session: a Ctrl-C at the terminal reaches hostctl only (hostctl.interrupt decides)."""
    safefs.check_dir(project_dir, private=True)  # refused, not skipped: up must not run another's project
    return runner.run(_base(project_dir, project) + ["up", "--detach", "--no-build", "--pull", "never",
                                                     "--remove-orphans"], timeout=timeout, new_session=new_session)


def compose_down(project_dir: Path | None, project: str, *, stop_timeout_s: int = 30,
                 timeout: float = 300, new_session: bool = False) -> runner.Result:
    """Stop (SIGTERM, then SIGKILL after stop_timeout_s) and remove the project's containers.
    Volumes are binds to the caches: never removed. Works without the rendered file (by
    project name), so it is idempotent."""
    return runner.run(_base(project_dir, project) + ["down", "--remove-orphans", "--timeout", str(stop_timeout_s)],
                      timeout=timeout, new_session=new_session)
