"""The one way hostctl runs external commands: argv lists (never a shell string), a timeout,
captured output, and a result value instead of an exception for a non-zero exit."""

from __future__ import annotations

import shutil
import subprocess

from pydantic import ConfigDict

from hostctl.data import Data


class Result(Data):
    # Built at import, not on first use: the facts probes run commands from a thread pool, and a
    # deferred validator would be built by whichever threads get there first, at once.
    model_config = ConfigDict(frozen=True, defer_build=False)

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    missing: bool = False  # the program is not installed
    timed_out: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.missing and not self.timed_out

    def why(self) -> str:
        """One line saying why this command did not succeed."""
        if self.missing:
            return f"{self.argv[0]} is not installed"
        if self.timed_out:
            return f"{' '.join(self.argv)} timed out"
        tail = (self.stderr.strip() or self.stdout.strip()).splitlines()[-1:] or [""]
        return f"{' '.join(self.argv)} exited {self.returncode}: {tail[0]}"


def run(argv: list[str], *, timeout: float = 30.0, input_text: str | None = None, env: dict | None = None,
        new_session: bool = False, cwd: str | None = None) -> Result:
    """new_session: the child gets its own session, so a Ctrl-C at the terminal reaches only
    hostctl, which then decides what to stop (hostctl.interrupt); the child is still killed when
    hostctl abandons the wait. cwd: where the child runs (default: hostctl's own cwd)."""
    if not argv:
        raise ValueError("empty command")
    if shutil.which(argv[0]) is None:
        return Result(argv=tuple(argv), returncode=127, stdout="", stderr=f"{argv[0]}: not found", missing=True)
    try:
        proc = subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, input=input_text, env=env, check=False,
            start_new_session=new_session, cwd=cwd,
        )
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return Result(argv=tuple(argv), returncode=124, stdout=out, stderr=err, timed_out=True)
    return Result(argv=tuple(argv), returncode=proc.returncode, stdout=proc.stdout, stderr=proc.stderr)
