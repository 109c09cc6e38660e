"""System files hostctl edits (/etc/fstab, /etc/sysctl.d/...): read them under the sysroot,
show an edit as a unified diff for --dry-run, and write them atomically (a crash leaves the
old file or the new one, never half of each), keeping the file's mode and owner."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path

from hostctl import paths, safefs
from hostctl.act import hooks
from hostctl.errors import RefusedError


def read_text(host_path: str) -> str | None:
    """The file at this host path (under the sysroot); None when it does not exist."""
    try:
        return paths.system_path(host_path).read_text()
    except FileNotFoundError:
        return None


def refuse_links(links: Mapping[str, str | None]) -> None:
    """Refused when a file hostctl installs whole (the profile, a unit) is a symlink now: writing
    renames a regular file over the link, and the link was someone's choice, never hostctl's (a
    masked unit is a link to /dev/null; configuration management links its own copy).
    `links`: host path -> what its symlink says (None: not a link)."""
    found = sorted((path, to) for path, to in links.items() if to is not None)
    if not found:
        return
    masked = [Path(path).name for path, to in found if to == "/dev/null"]
    raise RefusedError(
        f"{'a file' if len(found) == 1 else f'{len(found)} files'} hostctl installs "
        f"{'is a symlink' if len(found) == 1 else 'are symlinks'}: writing hostctl's own file would replace "
        f"{'the' if len(found) == 1 else 'each'} link, and with it the choice of whoever made it",
        details=[f"{path} -> {to}" + (" (the unit is masked)" if to == "/dev/null" else "") for path, to in found],
        fix=(f"`systemctl unmask {' '.join(masked)}` if hostctl may install {'it' if len(masked) == 1 else 'them'} "
             "now; " if masked else "")
        + "remove a link you no longer want (`rm` the path shown: the file it points to stays), then run provision "
          "again; nothing was changed",
    )


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
