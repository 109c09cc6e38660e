"""System files hostctl edits (/etc/fstab, /etc/sysctl.d/...): read them under the sysroot,
show an edit as a unified diff for --dry-run, and write them atomically (a crash leaves the
old file or the new one, never half of each), keeping the file's mode and owner."""

from __future__ import annotations

import difflib
from pathlib import Path

from hostctl import paths, safefs
from hostctl.act import hooks


def read_text(host_path: str) -> str | None:
    """The file at this host path (under the sysroot); None when it does not exist."""
    try:
        return paths.system_path(host_path).read_text()
    except FileNotFoundError:
        return None


def diff(host_path: str, old: str | None, new: str) -> str:
    """A unified diff from the current text to the new one, labelled with the host path."""
    lines = difflib.unified_diff(
        (old or "").splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=host_path if old is not None else "/dev/null",
        tofile=host_path,
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines).rstrip("\n")


def write_file(host_path: str, text: str) -> Path:
    """Replace the file at this host path (under the sysroot), keeping its mode and owner."""
    return safefs.write_file(paths.system_path(host_path), text, before_replace=lambda: hooks.write(host_path))
