"""Which host paths hostctl may mount a drive on, bind into the runtime container or write a
rendered project to: the one list of system directories it refuses, and the lexical checks
(absolute, no `..`, no control characters, within the kernel's length limits). Also the one
rule for an outside name that hostctl puts into a file name (file_name_problem: a bench suite's
id), and for names from outside that are joined onto a folder (relative_name_problem: a hub's file
list, an index, a manifest, a cache listing): a plain relative path that stays under it.

The checks are lexical on purpose: the profile is judged where it is loaded, before any fact is
read, and a path that needs `..` or names a system directory is refused whatever the disk holds.
A symlink placed under an allowed directory is outside what a lexical rule can see; the bind
sources are created by hostctl's own provisioning, not by following the user's links.

What people write uses these rules as annotated field types: HostPath (any absolute host path),
HostDir (a directory hostctl binds or writes, in its normal form) and MountPoint (a drive's
mountpoint, which also goes into the service unit).
"""

from __future__ import annotations

import posixpath
import re
from typing import Annotated

from pydantic import AfterValidator

from hostctl import safetext

# Whole trees: nothing below them is a cache, a store or a mountpoint hostctl should own.
# /var/lib/docker and containerd's state: a read-write bind there hands the container every
# other container's filesystem.
DENIED_TREES = ("/etc", "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/boot", "/proc",
                "/sys", "/dev", "/run", "/root", "/var/run", "/var/lib/docker", "/var/lib/containerd")
# The directories themselves, whose subdirectories are fine: mounting over /home or /var hides
# everyone's files; a read-write bind of /tmp or /var/lib exposes every service's state.
DENIED_EXACT = ("/", "/var", "/var/lib", "/var/cache", "/var/log", "/home", "/tmp", "/srv", "/mnt", "/opt",
                "/media")
PATH_MAX = 4096  # Linux's limit for a whole path
NAME_MAX = 255  # and for one component
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff]")


def lexical_problem(path: str) -> str | None:
    """Why `path` cannot be taken as an absolute host path at all, or None."""
    if not isinstance(path, str) or not path:
        return "expected an absolute path"
    if _CONTROL.search(path):
        return f"{path!r} contains a control character (a newline, tab or similar)"
    if not path.startswith("/"):
        return f"expected an absolute path (starting with /), got {path!r}"
    if len(path.encode()) >= PATH_MAX:
        return f"the path is {len(path.encode())} bytes long; Linux allows {PATH_MAX - 1}"
    parts = path.split("/")
    if ".." in parts:
        return f"{path!r} contains '..': write the path without it"
    long = next((p for p in parts if len(p.encode()) > NAME_MAX), None)
    if long is not None:
        return f"a component of the path is {len(long.encode())} bytes long; Linux allows {NAME_MAX}"
    return None


def normalise(path: str) -> str:
    """Lexical normal form of a path that passed lexical_problem(): `.` and repeated or trailing
    slashes removed (no `..` is left to resolve)."""
    out = posixpath.normpath(path)
    return "/" + out.lstrip("/") if out.startswith("//") else out


def system_dir(path: str) -> str | None:
    """Why `path` (absolute, checked) names a system directory hostctl must not mount on or bind,
    or None. Compared in its normal form, so /etc/, /./etc and //etc are /etc."""
    p = normalise(path)
    if p in DENIED_EXACT:
        return (f"{p} is a system directory: a drive mounted on it hides what it holds, a read-write bind of it "
                "hands the container the whole tree, and a project written there mixes with it; use a directory "
                "below it (e.g. /mnt/hostctl/<name>, /var/lib/hostctl/<role>, /srv/<name>)")
    for tree in DENIED_TREES:
        if p == tree or p.startswith(tree + "/"):
            return (f"{p} is {'the system directory ' + tree if p == tree else 'inside the system directory ' + tree}"
                    ": hostctl never mounts a drive, binds the runtime or writes a project there; use a directory "
                    "below /mnt, /srv, /var/lib or a user's home")
    return None


def host_dir_problem(path: str) -> str | None:
    """Everything that refuses `path` as a mountpoint or a bind source: lexical, then the denylist."""
    return lexical_problem(path) or system_dir(path)


def device_path_problem(path: str) -> str | None:
    """A `path:` drive identity names a device node: /dev/<name>[/<name>...], no `..`, no `.`."""
    problem = lexical_problem(path)
    if problem:
        return problem
    parts = path.split("/")[1:]
    if parts[0] != "dev" or len(parts) < 2 or any(p in ("", ".") for p in parts[1:]):
        return f"expected a device node such as /dev/nvme0n1 or /dev/disk/by-id/<name>, got {path!r}"
    if not all(re.fullmatch(r"[A-Za-z0-9._:+@=-]+", p) for p in parts[1:]):
        return f"{path!r}: device node names hold letters, digits and ._:+@=- only"
    return None


def by_id_problem(name: str) -> str | None:
    """A `by-id:` identity is one plain name in /dev/disk/by-id (no slash, no `..`); the full
    /dev/disk/by-id/<name> path is accepted for that name."""
    name = name.removeprefix("/dev/disk/by-id/") if isinstance(name, str) else name
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._:+@=-]{0,254}", name or "") or name in (".", ".."):
        return (f"expected one name from /dev/disk/by-id (e.g. nvme-Samsung_SSD_990_PRO_4TB_S7KGNU0X123456), "
                f"got {name!r}")
    return None


def normalise_mountpoint(path: str) -> str:
    """The one spelling of a mountpoint: absolute, no `.` components, no repeated or trailing
    slashes. `..` is refused rather than resolved: lexically it can point anywhere, and the
    mount table, fstab and the plan must all name one directory the same way. Symlinks on the
    path are a fact of the host, judged by the storage plan, not here."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise ValueError(f"expected an absolute path, got {path!r}")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise ValueError(f"{path!r} contains '..': write the directory it means without '..'")
    if not parts:
        raise ValueError(f"expected a directory other than /, got {path!r}")
    return "/" + "/".join(parts)


def _host_dir(path: str) -> str:
    problem = host_dir_problem(path)
    if problem:
        raise ValueError(problem)
    return normalise(path)


def _mountpoint(path: str) -> str:
    # It goes into the service unit's RequiresMountsFor= and fstab: no control characters, spaces
    # or %; and never a system directory.
    path = normalise_mountpoint(path)
    problem = safetext.control_problem(path) or safetext.unit_path_problem(path) or host_dir_problem(path)
    if problem:
        raise ValueError(problem)
    return path


HostPath = Annotated[str, safetext.rule(lexical_problem)]
HostDir = Annotated[str, AfterValidator(_host_dir)]
MountPoint = Annotated[str, AfterValidator(_mountpoint)]


# ---------------------------------------------------------------- names from outside

# A name from a file hostctl reads (a suite's id) that becomes one component of a file name
# hostctl writes as root (<stamp>-<id>.json): a plain word, so it can neither climb out (`/`,
# `..`), hide (a leading dot) nor be read as an option (a leading dash). 128 bytes leaves room for
# the stamp and the suffix within NAME_MAX.
FILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,127}")


def file_name_problem(name: object) -> str | None:
    """Why `name` cannot be one component of a file name hostctl builds, or None."""
    if isinstance(name, str) and FILE_NAME.fullmatch(name):
        return None
    return (f"expected a plain name such as quick or qualify-v2 (letters, digits and ._+-, starting with a letter "
            f"or digit, at most 128 characters; no '/'), got {name!r}"[:400])


# A name from outside (a hub's file list, an index's weight_map, hostctl's manifest, a cache
# listing) is joined onto a folder hostctl owns. Kept below NAME_MAX with room for the longest
# suffix huggingface_hub adds to a file's name in its own bookkeeping (`<name>.metadata`,
# `<name>.lock`), so a name that passes here can never fail later halfway through a download.
NAME_SUFFIX_ROOM = len(".metadata")
RELATIVE_MAX = 1024  # bytes for the whole relative name: far above any checkpoint's, far below PATH_MAX


def relative_name_problem(name: object) -> str | None:
    """Why `name` cannot be taken as a file's path relative to its folder, or None: it must be a
    non-empty string of `/`-separated components, none empty, `.` or `..`, no leading `/`, no
    backslash (a Windows separator that other tools and mirrors treat as one), no NUL or other
    control character, each component and the whole within length limits."""
    if not isinstance(name, str):
        return f"expected a relative path (a string), got {type(name).__name__} {name!r}"
    if not name:
        return "expected a relative path, got an empty name"
    if _CONTROL.search(name):
        return f"{name!r} contains a control character (a newline, NUL or similar)"
    if "\\" in name:
        return f"{name!r} contains a backslash, which some tools read as a folder separator"
    if name.startswith("/"):
        return f"{name!r} is an absolute path; expected one relative to its folder"
    try:
        size = len(name.encode())
    except UnicodeEncodeError:
        return f"{name!r} is not valid UTF-8"
    if size > RELATIVE_MAX:
        return f"the name is {size} bytes long; at most {RELATIVE_MAX} are accepted"
    for part in name.split("/"):
        if part in ("", ".", ".."):
            return f"{name!r} has an {'empty' if not part else repr(part)} component; expected a plain path below its folder"
        if len(part.encode()) > NAME_MAX - NAME_SUFFIX_ROOM:
            return (f"a component of {name!r} is {len(part.encode())} bytes long; at most "
                    f"{NAME_MAX - NAME_SUFFIX_ROOM} are accepted")
    return None


def relative_names_problem(names: list[str]) -> tuple[str, str] | None:
    """(the first name refused, why) for a whole listing, or None: each name as relative_name_problem
    says, and no two that are the same file once Unicode-normalised (NFC), which would show as
    one name while being two (or, on a normalising filesystem, overwrite each other)."""
    import unicodedata

    seen: dict[str, str] = {}
    for name in names:
        problem = relative_name_problem(name)
        if problem:
            return name, problem
        key = unicodedata.normalize("NFC", name)
        if key in seen:
            other = seen[key]
            return name, (f"{name!r} is listed twice" if other == name
                          else f"{name!r} and {other!r} differ only in Unicode normalisation")
        seen[key] = name
    return None
