"""Who a file's POSIX access ACL lets write it, read from the kernel's extended attribute: the one
ACL reader for every trust check (safefs's paths, the boot-code chain of facts/executable.py).

The format is a fact of Linux (include/uapi/linux/posix_acl_xattr.h, acl(5)): the value of
`system.posix_acl_access` is a little-endian u32 version (2), then 8-byte entries of u16 tag, u16
permission bits (4 read, 2 write, 1 execute), u32 id (a uid or gid; unused for the owner, the
owning group, the mask and "other"). With a mask entry, named users, named groups and the owning
group get only what the mask also grants; the mode's group bits then show the mask, not the
owning group, which is why mode bits alone cannot say who may write.
"""

from __future__ import annotations

import errno
import os
import struct

USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
_WRITE = 2
_HEADER, _ENTRY = struct.Struct("<I"), struct.Struct("<HHI")
_VERSION = 2
UNREADABLE = ("unreadable", -1)  # an ACL this reader cannot parse: taken as letting anyone write


def _raw(target: int | str) -> bytes:
    try:
        if isinstance(target, int):
            return os.getxattr(target, "system.posix_acl_access")
        return os.getxattr(target, "system.posix_acl_access", follow_symlinks=False)
    except OSError as exc:
        if exc.errno in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            return b""  # no ACL, or a filesystem without them: the mode bits are the whole story
        raise


def drop(fd: int) -> None:
    """Remove the access ACL of the open file (its mode bits are then the whole story)."""
    try:
        os.removexattr(fd, "system.posix_acl_access")
    except OSError as exc:
        if exc.errno not in (errno.ENODATA, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise


def parse(blob: bytes) -> list[tuple[int, int, int]] | None:
    """The (tag, perm, id) entries, or None when the value is not the format above."""
    if len(blob) < _HEADER.size or (len(blob) - _HEADER.size) % _ENTRY.size:
        return None
    if _HEADER.unpack_from(blob)[0] != _VERSION:
        return None
    return [_ENTRY.unpack_from(blob, off) for off in range(_HEADER.size, len(blob), _ENTRY.size)]


def writers(target: int | str) -> list[tuple[str, int]] | None:
    """Who the access ACL of `target` (an open fd, or a path whose last link is not followed)
    lets write beyond what its owner and "other" bits show: ("user", uid), ("group", gid), and
    ("group-owner", -1) for the owning group; [] when the ACL grants no such write, None when the
    file has no extended ACL (then the mode's group bits are the owning group's)."""
    blob = _raw(target)
    if not blob:
        return None
    entries = parse(blob)
    if entries is None:
        return [UNREADABLE]
    masks = [perm for tag, perm, _ in entries if tag == MASK]
    if not masks:
        return None  # a minimal ACL (owner, group, other) is exactly the mode bits
    mask = masks[0]
    out: list[tuple[str, int]] = []
    for tag, perm, ident in entries:
        if not perm & mask & _WRITE:
            continue
        if tag == USER:
            out.append(("user", ident))
        elif tag == GROUP:
            out.append(("group", ident))
        elif tag == GROUP_OBJ:
            out.append(("group-owner", -1))
    return out
