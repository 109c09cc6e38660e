"""Errors as values a user can act on, and the exit code each one maps to.

Exit codes (README "Exit codes"): 0 ok; 1 a check, gate or step failed; 2 bad input, nothing
changed; 3 refused for safety; 70 an internal error (a bug: sysexits' EX_SOFTWARE); 130 / 143
interrupted by SIGINT / SIGTERM (128 + the signal).
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_BAD_INPUT = 2
EXIT_REFUSED = 3
EXIT_SOFTWARE = 70
EXIT_SIGINT = 130
EXIT_SIGTERM = 143


class HostctlError(Exception):
    """An error the user can act on: what went wrong, and what to do about it."""

    exit_code = EXIT_FAILED

    def __init__(self, message: str, *, fix: str | None = None, details: list[str] | None = None):
        super().__init__(message)
        self.message = message
        self.fix = fix
        self.details = details or []

    def render(self) -> str:
        lines = [f"error: {self.message}"]
        lines += [f"  {d}" for d in self.details]
        if self.fix:
            lines.append(f"fix: {self.fix}")
        return "\n".join(lines)


class InputError(HostctlError):
    """Bad configuration, recipe, snapshot or flags. Nothing was changed."""

    exit_code = EXIT_BAD_INPUT


class NoProfileError(InputError):
    """No host profile was given and none was found where hostctl looks (exit 2, as any bad
    input). Commands that can work without one (doctor, facts) catch this type."""


class MissingFileError(InputError):
    """A file the user named does not exist."""


class FailedError(HostctlError):
    """A check, gate or step failed."""

    exit_code = EXIT_FAILED


class RefusedError(HostctlError):
    """Refused for safety (a destructive guard held, or consent could not be asked)."""

    exit_code = EXIT_REFUSED


class UntrustedPathError(RefusedError):
    """A path someone other than root and the invoking user could swap or has written."""

    code = "untrusted-path"

    def __init__(self, path: object, why: str, *, fix: str | None = None):
        self.path = str(path)
        super().__init__(f"{path}: {why}", fix=fix or (
            "hostctl runs as root and trusts only root and the user who ran sudo: use a folder and files that only "
            "they own and can write (e.g. under your home or /var/lib/hostctl), or fix the owner and mode shown"))
