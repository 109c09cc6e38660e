"""hostctl's marks on a drive: how a partition is recognised as hostctl's own, under any drive
name and whatever /var/lib/hostctl holds.

Ownership lives on the drive itself, so it survives a reinstalled OS or a lost state directory:
- the GPT partition name `hostctl-swap-<drive>` / `hostctl-data-<drive>`, and
- the filesystem label `hcswap-<drive>` / `hcdata-<drive>`.
Either mark makes a partition hostctl's. A partition hostctl has created but whose filesystem
it has not finished making carries GPT attribute bit 48 (UNFINISHED_BIT, one of the bits the
GPT leaves to the partition type; Linux and the discoverable-partitions spec use 59-63): it
is set in the same `sgdisk` call that creates the partition and cleared only after mkswap or
mkfs has returned, so a partition with the bit set holds no data by construction, whichever
step was interrupted.
"""

from __future__ import annotations

from typing import Literal

PartRole = Literal["swap", "data"]

PART_PREFIX = "hostctl-"
PART_NAMES: dict[PartRole, str] = {"swap": "hostctl-swap-", "data": "hostctl-data-"}
FS_LABELS: dict[PartRole, str] = {"swap": "hcswap-", "data": "hcdata-"}
UNFINISHED_BIT = 48


def part_name(role: PartRole, drive: str) -> str:
    return PART_NAMES[role] + drive


def fs_label(role: PartRole, drive: str) -> str:
    return FS_LABELS[role] + drive


def role_of(part_label: str | None, fs_label_: str | None) -> PartRole | None:
    """The role hostctl gave a partition, from either mark; None when it carries neither."""
    for role in ("swap", "data"):
        if (part_label or "").startswith(PART_NAMES[role]) or (fs_label_ or "").startswith(FS_LABELS[role]):
            return role
    return None


def drive_of(part_label: str | None, fs_label_: str | None) -> str | None:
    """The drive name a partition was made for (from the GPT name, else the label)."""
    for role in ("swap", "data"):
        if (part_label or "").startswith(PART_NAMES[role]):
            return (part_label or "")[len(PART_NAMES[role]):]
    for role in ("swap", "data"):
        if (fs_label_ or "").startswith(FS_LABELS[role]):
            return (fs_label_ or "")[len(FS_LABELS[role]):]
    return None


def unfinished(flags: int | None) -> bool:
    return flags is not None and bool(flags >> UNFINISHED_BIT & 1)
