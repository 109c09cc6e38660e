"""hostctl's block in /etc/fstab: swap and data filesystems by UUID with `nofail`, between
marker lines, so a re-run replaces only hostctl's lines and keeps every line of the user's.

Pure text functions; writing goes through provision.files."""

from __future__ import annotations

import re

from pydantic import ConfigDict

from hostctl import marks
from hostctl.data import Data
from hostctl.errors import FailedError

FSTAB = "/etc/fstab"
BEGIN = "# BEGIN hostctl storage -- managed by `hostctl provision`; lines inside are replaced on every run"
END = "# END hostctl storage"
_BEGIN_PREFIX = "# BEGIN hostctl storage"


def escape(field: str) -> str:
    """fstab fields cannot hold blanks: the kernel's octal escapes (as in /proc/mounts)."""
    return field.replace("\\", "\\134").replace(" ", "\\040").replace("\t", "\\011").replace("\n", "\\012")


class Entry(Data):
    model_config = ConfigDict(frozen=True)

    spec: str  # UUID=...
    file: str  # mount point, or "none" for swap
    vfstype: str
    options: str
    passno: int = 0

    def line(self) -> str:
        return f"{self.spec} {escape(self.file)} {self.vfstype} {self.options} 0 {self.passno}"


def render_block(entries: list[Entry]) -> str:
    return "\n".join([BEGIN, *(e.line() for e in entries), END]) + "\n"


def _block_bounds(text: str) -> tuple[int, int] | None:
    """(first, last) line index of hostctl's block, or None. Refuses a damaged block: replacing
    from a lone BEGIN to the end of the file could delete the user's lines."""
    lines = text.splitlines()
    begins = [i for i, ln in enumerate(lines) if ln.strip().startswith(_BEGIN_PREFIX)]
    ends = [i for i, ln in enumerate(lines) if ln.strip() == END]
    if not begins and not ends:
        return None
    if len(begins) != 1 or len(ends) != 1 or ends[0] < begins[0]:
        raise FailedError(
            f"{FSTAB} has a damaged hostctl block: {len(begins)} BEGIN and {len(ends)} END marker line(s)",
            fix=f"edit {FSTAB} by hand so hostctl's lines sit between exactly one '{_BEGIN_PREFIX} ...' "
                f"line and one '{END}' line (or remove them all), then re-run",
        )
    return begins[0], ends[0]


def current_block(text: str | None) -> list[str]:
    """The lines inside hostctl's block (without the markers)."""
    if not text:
        return []
    bounds = _block_bounds(text)
    if bounds is None:
        return []
    return text.splitlines()[bounds[0] + 1:bounds[1]]


def with_block(text: str | None, entries: list[Entry]) -> str:
    """The file with hostctl's block replaced (or appended); without entries, the block is removed."""
    text = text or ""
    lines = text.splitlines()
    bounds = _block_bounds(text)
    block = render_block(entries).splitlines() if entries else []
    if bounds is not None:
        first, last = bounds
        new = lines[:first] + block + lines[last + 1:]
    else:
        new = lines + block
    return "\n".join(new) + "\n" if new else ""


def user_lines_touching(text: str | None, uuids: set[str], targets: set[str], devices: set[str]) -> list[str]:
    """Lines outside hostctl's block that name one of hostctl's filesystems or mount points:
    mounting the same thing twice at boot is a mistake hostctl reports but never edits."""
    if not text:
        return []
    bounds = _block_bounds(text)
    out = []
    for i, raw in enumerate(text.splitlines()):
        if bounds is not None and bounds[0] <= i <= bounds[1]:
            continue
        fields = raw.split()
        if not fields or fields[0].startswith("#") or len(fields) < 2:
            continue
        spec = fields[0]
        target = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), fields[1])
        kind, _, value = spec.partition("=")
        value = value.strip('"')
        by_uuid = kind.upper() == "UUID" and value in uuids
        # LABEL=hcdata-... or PARTLABEL=hostctl-...: hostctl's marks, under whatever drive name
        by_mark = (kind.upper() == "LABEL" and marks.role_of(None, value) is not None) or \
                  (kind.upper() == "PARTLABEL" and marks.role_of(value, None) is not None)
        if by_uuid or by_mark or spec in devices or target in targets:
            out.append(f"{FSTAB} line {i + 1} ({raw.strip()}) also names one of hostctl's filesystems or mount points: "
                       "remove it, hostctl's block covers it")
    return out
