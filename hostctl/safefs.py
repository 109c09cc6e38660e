"""Who may steer a path root uses, and the one way hostctl opens, creates and replaces files
(README "Security"). hostctl trusts root and the invoking user (SUDO_UID under sudo, else the
real uid) and nobody else on the host.

A path is *safe* when no one else can change where it leads: every directory on the way is owned
by a trusted user and writable by no one else (group-write is allowed only through the owner's
own private group, as login's USERGROUPS_ENAB makes it; a sticky directory such as /tmp is fine
for entries a trusted user owns), and every symlink on the way is a trusted user's in such a
directory. Folders are walked one component at a time with `openat` and `O_NOFOLLOW`, so the
check and the use are the same directory (no window between a check and a second lookup); files
are created with `O_EXCL` under that directory's fd and their mode and owner are set on the open
file, never on a path.

A refusal is an `UntrustedPathError` (exit 3) naming the path, who owns it and its mode.
"""

from __future__ import annotations

import errno
import grp
import os
import pwd
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from hostctl import posixacl
from hostctl.errors import UntrustedPathError

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_LINKS = 40  # the kernel's own limit on links followed in one lookup (ELOOP)
TEMP_MARK = ".hostctl-"  # temporaries are .<name>.hostctl-<random>; a killed writer's are removed


def invoking_uid(env: dict[str, str] | None = None) -> int:
    """The user who ran hostctl: SUDO_UID under sudo (as root), else the real uid."""
    env = os.environ if env is None else env
    sudo = env.get("SUDO_UID", "")
    if os.geteuid() == 0 and sudo.isdigit():
        return int(sudo)
    return os.getuid()


def sudo_owner(env: dict[str, str] | None = None) -> tuple[int, int] | None:
    """The user and group who ran `sudo hostctl ...`, or None: what hostctl makes for them (cache
    folders, results, a tuned recipe) is theirs, not root's."""
    env = os.environ if env is None else env
    uid, gid = env.get("SUDO_UID", ""), env.get("SUDO_GID", "")
    return (int(uid), int(gid)) if uid.isdigit() and gid.isdigit() else None


def trusted_uids() -> frozenset[int]:
    return frozenset({0, os.geteuid(), invoking_uid()})


def owner_name(uid: int) -> str:
    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _private_gid(gid: int, owner: int) -> bool:
    """`gid` is `owner`'s own group: their primary group, with no supplementary members and no
    other account whose primary group it is (members by primary gid are not in gr_mem: on a host
    without user-private groups everyone may share `users`, and here several system accounts
    share nogroup)."""
    try:
        if pwd.getpwuid(owner).pw_gid != gid or grp.getgrgid(gid).gr_mem:
            return False
    except KeyError:
        return False
    return not any(p.pw_gid == gid and p.pw_uid != owner for p in pwd.getpwall())


def _private_group(st: os.stat_result) -> bool:
    return _private_gid(st.st_gid, st.st_uid)


def others_can_write(st: os.stat_result, target: int | str) -> bool:
    """Anyone but the owner can write it (root can always; that is trusted). `target` is the open
    fd (or the path, its last link not followed) whose access ACL is read: a named user or group
    entry, or the owning group's, that the ACL's mask lets write counts like group-write. A folder's
    *default* ACL grants nothing on the folder itself; files made in it inherit it as their access
    ACL, which this check reads when they are trusted; create_temp drops it from what hostctl
    writes."""
    if st.st_mode & stat.S_IWOTH:
        return True
    acl = posixacl.writers(target)
    if acl is None:
        return bool(st.st_mode & stat.S_IWGRP) and not _private_group(st)
    trusted = trusted_uids()
    for kind, ident in acl:
        if kind == "user" and ident in trusted:
            continue
        if kind == "group" and _private_gid(ident, st.st_uid):
            continue
        if kind == "group-owner" and _private_group(st):
            continue
        return True
    return False


def describe(st: os.stat_result) -> str:
    return f"owned by {owner_name(st.st_uid)}, mode {stat.filemode(st.st_mode)}"


def _swappable(st: os.stat_result, fd: int) -> bool:
    """Others could rename or replace entries of the directory open as `fd` (sticky protects
    others' entries)."""
    return others_can_write(st, fd) and not st.st_mode & stat.S_ISVTX


def check_file_stat(path: str | Path, st: os.stat_result, target: int | str) -> None:
    """A file hostctl will trust (a profile, a recipe, an ssh config, a key, an env file): a
    trusted user's and writable by no one else, as sshd's StrictModes asks of authorized_keys.
    `target`: its open fd (or path), whose ACL is read."""
    if st.st_uid not in trusted_uids():
        raise UntrustedPathError(path, f"the file is {describe(st)}; hostctl reads only files that root or you own")
    if others_can_write(st, target):
        raise UntrustedPathError(path, f"the file is {describe(st)}: others can change it; "
                                       f"fix: chmod go-w {path} (and `setfacl -b {path}` if its ACL names others)")


def _component(parent_fd: int, name: str, shown: str, parent: str, parent_st: os.stat_result,
               uids: frozenset[int]) -> os.stat_result | None:
    """The lstat of one component, or None when it is missing; refused when someone else could
    swap it: its folder writable by others (and not sticky), or the entry itself not a trusted
    user's (a folder or link of another user leads wherever they like)."""
    if _swappable(parent_st, parent_fd):
        raise UntrustedPathError(parent, f"the folder is {describe(parent_st)}: others can replace what is in it")
    try:
        st = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if st.st_uid not in uids:
        raise UntrustedPathError(shown, f"it is {describe(st)}; root would follow what that user put there")
    return st


def open_dir(path: str | Path, *, create: bool = False, mode: int = 0o755,
             owner: tuple[int, int] | None = None, follow: bool = True,
             dotdot: bool = False) -> int:
    """An fd of the directory `path` (absolute or relative to the cwd), walked from / one
    component at a time; `create` makes what is missing (mode `mode`, chowned to `owner` on the
    open directory). `follow=False` refuses any symlink on the way (names from outside, below a
    folder of hostctl's).
    Raises UntrustedPathError when anyone but root and the invoking user could change where it
    leads, NotADirectoryError / FileNotFoundError as open would, and refuses a path with a `..`
    component: collapsing it by hand (abspath) would name a folder other than the one the kernel
    reaches through a link on the way, and a `..` in a name built from outside input (a suite id)
    would climb out of the folder hostctl meant. `dotdot` (a path the user typed, read by
    read_trusted) walks a `..` as the kernel does instead: to the parent of the folder really
    reached, after any link before it."""
    path = Path(path)
    if ".." in path.parts and not dotdot:
        raise UntrustedPathError(path, "the path contains '..', which hostctl does not resolve",
                                 fix="give the path without '..' (e.g. as `realpath` prints it)")
    path = path if path.is_absolute() else Path(os.getcwd()) / path
    uids = trusted_uids()
    todo = list(path.parts[1:])
    fd = os.open("/", _DIR_FLAGS)
    shown, links = Path("/"), 0
    try:
        st = os.fstat(fd)
        while todo:
            part = todo.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                new = os.open("..", _DIR_FLAGS, dir_fd=fd)
                os.close(fd)
                fd, shown = new, real_dir(new)  # not shown.parent: a link on the way moved us
                st = os.fstat(fd)
                continue
            here = shown / part
            cst = _component(fd, part, str(here), str(shown), st, uids)
            if cst is None:
                if not create:
                    raise FileNotFoundError(2, "No such file or directory", str(here))
                try:
                    os.mkdir(part, mode, dir_fd=fd)
                except FileExistsError:
                    todo.insert(0, part)  # made by someone a moment ago: look again
                    continue
                new = os.open(part, _DIR_FLAGS, dir_fd=fd)
                if owner is not None:
                    os.fchown(new, *owner)
                os.close(fd)
                fd, shown = new, here
                st = os.fstat(fd)
                continue
            if stat.S_ISLNK(cst.st_mode):
                if not follow:
                    raise UntrustedPathError(here, "it is a symlink, and this path must not pass through one")
                links += 1
                target = os.readlink(part, dir_fd=fd)
                if links > MAX_LINKS or not target:
                    raise UntrustedPathError(here, "too many symlinks on the way")
                if target.startswith("/"):
                    os.close(fd)
                    fd, shown = os.open("/", _DIR_FLAGS), Path("/")
                    st = os.fstat(fd)
                todo[:0] = [p for p in Path(target).parts if p != "/"]
                continue
            new = os.open(part, _DIR_FLAGS, dir_fd=fd)
            nst = os.fstat(new)
            if (nst.st_dev, nst.st_ino) != (cst.st_dev, cst.st_ino):  # swapped between the stat and the open
                os.close(new)
                raise UntrustedPathError(here, "it changed while hostctl was opening it")
            os.close(fd)
            fd, shown, st = new, here, nst
        if _swappable(st, fd):
            raise UntrustedPathError(shown, f"the folder is {describe(st)}: others can replace what is in it")
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_drop_dir(path: str | Path) -> int:
    """An fd of a folder root leaves a file in for another program to read (node_exporter's
    textfile folder), whose ancestors may be another user's: Debian's prometheus-node-exporter
    makes /var/lib/prometheus the prometheus user's and /var/lib/prometheus/node-exporter root's.
    Walked from / without following any symlink, so whoever owns an ancestor can neither lead the
    walk out of their own tree nor swap in a folder of theirs: the folder reached must be a trusted
    user's and writable by no one else (UntrustedPathError). What they could swap in is another
    folder root owns inside their tree, which then gets a new file (create_temp: O_EXCL, never a
    link) and nothing else."""
    path = Path(path)
    if not path.is_absolute() or ".." in path.parts:
        raise UntrustedPathError(path, "the folder must be an absolute path without '..'")
    fd = os.open("/", _DIR_FLAGS)
    shown = Path("/")
    try:
        for part in path.parts[1:]:
            shown = shown / part
            try:
                new = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR) and stat.S_ISLNK(
                        os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                    raise UntrustedPathError(shown, "it is a symlink, and this path must not pass through one") from None
                raise
            os.close(fd)
            fd = new
        st = os.fstat(fd)
        if st.st_uid not in trusted_uids() or _swappable(st, fd):
            raise UntrustedPathError(shown, f"the folder is {describe(st)}; root writes here only into a folder root "
                                            "or you own that no one else can write")
        return fd
    except BaseException:
        os.close(fd)
        raise


def _lstat_below(fd: int, part: str) -> os.stat_result | None:
    try:
        return os.stat(part, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def open_below(base_fd: int, relative: str, *, shown: str | Path, create: bool = False, mode: int = 0o755,
               owner: tuple[int, int] | None = None, owners: bool = True) -> int:
    """An fd of the directory `relative` (a name that passed safepaths.relative_name_problem, or
    "" for the base itself) under the already-open directory `base_fd`, walked one component at
    a time with no symlink followed at all: below a folder of hostctl's, a link is never part of a
    name from outside, whoever owns it. With `owners` (for anything that writes or deletes) every
    component must also be a trusted user's, in a folder others cannot swap entries of; a read
    (`owners=False`) needs only the no-link walk, since each component is opened O_NOFOLLOW and a
    link swapped in fails the open. `create` makes what is missing (mode `mode`, chowned to `owner`
    on the open fd). `shown` is the base's path, for the messages."""
    fd = os.dup(base_fd)
    here = Path(shown)

    def look(part: str) -> os.stat_result | None:
        return (_component(fd, part, str(here / part), str(here), st, trusted_uids()) if owners
                else _lstat_below(fd, part))

    try:
        st = os.fstat(fd)
        for part in [p for p in relative.split("/") if p]:
            if part in (".", ".."):
                raise UntrustedPathError(here / part, "a name below this folder may not hold '.' or '..'")
            cst = look(part)
            if cst is None:
                if not create:
                    raise FileNotFoundError(2, "No such file or directory", str(here / part))
                try:
                    os.mkdir(part, mode, dir_fd=fd)
                    made = True
                except FileExistsError:
                    made = False  # made a moment ago: opened (and checked) below like any other
                cst = look(part)
                if cst is None:
                    raise FileNotFoundError(2, "No such file or directory", str(here / part))
            else:
                made = False
            if stat.S_ISLNK(cst.st_mode):
                raise UntrustedPathError(here / part, f"it is a symlink ({describe(cst)}); hostctl follows none "
                                                      "below this folder", fix=f"remove the link {here / part}")
            if not stat.S_ISDIR(cst.st_mode):
                raise NotADirectoryError(20, "Not a directory", str(here / part))
            new = os.open(part, _DIR_FLAGS, dir_fd=fd)
            nst = os.fstat(new)
            if (nst.st_dev, nst.st_ino) != (cst.st_dev, cst.st_ino):  # swapped between the stat and the open
                os.close(new)
                raise UntrustedPathError(here / part, "it changed while hostctl was opening it")
            if made and owner is not None:
                os.fchown(new, *owner)
                nst = os.fstat(new)
            os.close(fd)
            fd, here, st = new, here / part, nst
        if owners and _swappable(st, fd):
            raise UntrustedPathError(here, f"the folder is {describe(st)}: others can replace what is in it")
        return fd
    except BaseException:
        os.close(fd)
        raise


def open_under(root: str | Path, rel: str | Path, *, create: bool = False, mode: int = 0o755,
               owner: tuple[int, int] | None = None) -> int:
    """An fd of the directory `root/rel`: `root` walked as open_dir (a trusted link on the way is
    followed: the profile names it), `rel` below it as open_below (no link followed, even the
    invoking user's), so root writes, chowns and deletes inside a user's folder only in what is
    really inside it. `..` and absolute parts are refused."""
    rel = Path(rel)
    if rel.is_absolute() or ".." in rel.parts:
        raise UntrustedPathError(Path(root) / rel, f"{rel} is not a path inside {root}")
    with closing_fd(open_dir(root, create=create, mode=mode, owner=owner)) as base:
        return open_below(base, "/".join(p for p in rel.parts if p != "."), shown=root, create=create, mode=mode,
                          owner=owner)


def open_file_below(base_fd: int, relative: str, *, shown: str | Path, owners: bool = True) -> int:
    """A read-only fd of the regular file `relative` under `base_fd` (open_below for its folder,
    O_NOFOLLOW for the file itself): FileNotFoundError when it is missing, UntrustedPathError when
    it is a link or not a regular file (a FIFO would block, a device is not a checkpoint file)."""
    parent, _, leaf = relative.rpartition("/")
    with closing_fd(open_below(base_fd, parent, shown=shown, owners=owners)) as dfd:
        try:
            fd = os.open(leaf, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UntrustedPathError(Path(shown) / relative, "it is a symlink; hostctl follows none below this "
                                                                 "folder") from None
            raise
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise UntrustedPathError(Path(shown) / relative, "it is not a regular file")
    return fd


def read_below(base_fd: int, relative: str, *, shown: str | Path, max_bytes: int, owners: bool = True) -> bytes:
    """The bytes of the regular file `relative` under `base_fd` (as open_file_below opens it), at
    most `max_bytes` (ValueError past that: a small JSON file that is not small is not read whole)."""
    fd = open_file_below(base_fd, relative, shown=shown, owners=owners)
    try:
        # Refused by its size before a byte is read: a sparse file costs no disk but would cost
        # its whole size in memory (and minutes) if read to the cap first.
        if os.fstat(fd).st_size > max_bytes:
            raise TooLargeError(f"{Path(shown) / relative} is larger than {max_bytes} bytes; not read")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:  # grew while read
                raise TooLargeError(f"{Path(shown) / relative} is larger than {max_bytes} bytes; not read")
        return b"".join(chunks)
    finally:
        os.close(fd)


def read_bounded(path: str | Path, *, max_bytes: int) -> bytes:
    """The bytes of the regular file at `path`, links followed, trusting nothing about who owns it
    (data hostctl only hashes or parses: a checkpoint's config.json or index, which live behind the
    Hugging Face cache's links). Refused (TooLargeError) by its size before a byte is read; a FIFO
    or device is refused (UntrustedPathError) without blocking."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedPathError(path, "it is not a regular file")
        if st.st_size > max_bytes:
            raise TooLargeError(f"{path} is larger than {max_bytes} bytes; not read")
        data = os.read(fd, max_bytes + 1)
        while len(data) <= max_bytes and (chunk := os.read(fd, max_bytes + 1 - len(data))):
            data += chunk
        if len(data) > max_bytes:
            raise TooLargeError(f"{path} is larger than {max_bytes} bytes; not read")
        return data
    finally:
        os.close(fd)


def unlink_below(base_fd: int, relative: str, *, shown: str | Path) -> bool:
    """Remove the entry `relative` under `base_fd` (a link itself, never what it points to) through
    its folder's fd; False when it was not there."""
    parent, _, leaf = relative.rpartition("/")
    try:
        with closing_fd(open_below(base_fd, parent, shown=shown)) as dfd:
            os.unlink(leaf, dir_fd=dfd)
    except FileNotFoundError:
        return False
    return True


@contextmanager
def closing_fd(fd: int) -> Iterator[int]:
    try:
        yield fd
    finally:
        os.close(fd)


@contextmanager
def opened_dir(path: str | Path, **kwargs) -> Iterator[int]:
    fd = open_dir(path, **kwargs)
    try:
        yield fd
    finally:
        os.close(fd)


def check_dir(path: str | Path, *, private: bool = False) -> None:
    """Refuse a folder (and the way to it) that another user could swap or write; `private`: also
    one that others can write into at all (a project folder Compose reads, an output folder)."""
    with opened_dir(path) as fd:
        st = os.fstat(fd)
        if private and others_can_write(st, fd):
            raise UntrustedPathError(path, f"the folder is {describe(st)}: others can put files in it")


class NotRegularFileError(UntrustedPathError):
    """Not a regular file (a directory, a FIFO that would block, a device): callers that read a
    user's input say so as bad input."""


class TooLargeError(ValueError):
    """More bytes than the caller reads."""


def real_dir(fd: int) -> Path:
    """The path the kernel reached for the directory open as `fd` (no link, no `..` in it)."""
    return Path(os.readlink(f"/proc/self/fd/{fd}"))


def _absolute(path: str | Path) -> Path:
    """`path` from the cwd, `..` kept: collapsing it on the text (abspath) would name another file
    than the kernel reaches when a link comes before it (`~/link/../p.toml`)."""
    path = Path(path)
    return path if path.is_absolute() else Path(os.getcwd()) / path


def _open_trusted(path: Path) -> tuple[int, Path]:
    """An O_RDONLY fd of `path` and the real path it was found at (no link, no `..`): its folder
    walked by open_dir, `..` the kernel's way; a link as the last name followed only when a
    trusted user owns it (open_dir checked that no one else can replace it in its folder), from
    the folder really reached, one step at a time, at most MAX_LINKS."""
    for _ in range(MAX_LINKS):
        with opened_dir(path.parent, dotdot=True) as dfd:
            here = real_dir(dfd)
            try:
                return os.open(path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                               dir_fd=dfd), here / path.name
            except OSError as e:
                if e.errno != errno.ELOOP:
                    raise
            st = os.stat(path.name, dir_fd=dfd, follow_symlinks=False)
            if st.st_uid not in trusted_uids():
                raise UntrustedPathError(path, f"it is a link {describe(st)}; root would follow what that user put there")
            path = here / os.readlink(path.name, dir_fd=dfd)  # an absolute target replaces `here`
    raise UntrustedPathError(path, "too many symlinks on the way")


def open_regular(path: str | Path) -> tuple[int, os.stat_result, Path]:
    """A read-only fd of the regular file at `path`, its stat and the path it was found at: the
    way to it safe (open_dir; a link as the last name followed only when a trusted user owns it),
    whoever owns the file itself. For what root only reads and shows (a log to diagnose, which may
    be syslog's); what root acts on goes through read_trusted. A directory is IsADirectoryError,
    another non-regular file (a FIFO would block) NotRegularFileError."""
    fd, found = _open_trusted(_absolute(path))
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory", str(path))
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFileError(path, "it is not a regular file")
    except BaseException:
        os.close(fd)
        raise
    return fd, st, found


def real_path(path: str | Path) -> Path:
    """Where the regular file `path` really is (no link, no `..`), walked as read_trusted walks it:
    what hostctl keeps and passes on, so that a later read by path reaches the file it checked."""
    fd, _, found = open_regular(path)
    os.close(fd)
    return found


def read_trusted(path: str | Path, *, max_bytes: int) -> bytes:
    """The bytes of a file hostctl will act on as root: the way to it safe, the file itself a
    trusted user's, writable by no one else, regular (a FIFO would block), at most `max_bytes`
    (TooLargeError). A directory is IsADirectoryError, another non-regular file NotRegularFileError."""
    fd, st, found = open_regular(path)
    try:
        check_file_stat(path if found == _absolute(path) else found, st, fd)
        if st.st_size > max_bytes:  # refused unread: a sparse file would cost the cap in memory first
            raise TooLargeError(f"{path} is larger than {max_bytes} bytes; not read")
        chunks, size = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            size += len(chunk)
            if size > max_bytes:
                raise TooLargeError(f"{path} is larger than {max_bytes} bytes")
        return b"".join(chunks)
    finally:
        os.close(fd)


def remove_stale_temps(dir_fd: int, name: str) -> None:
    prefix = f".{name}{TEMP_MARK}"
    for entry in os.listdir(dir_fd):
        if entry.startswith(prefix):
            try:
                os.unlink(entry, dir_fd=dir_fd)
            except (FileNotFoundError, IsADirectoryError):
                pass


def create_temp(dir_fd: int, name: str, mode: int = 0o600) -> tuple[int, str]:
    """A new, empty temporary file for `name` in the directory: O_EXCL, never a link, and no ACL:
    one inherited from the folder's default ACL would let the users it names write what root
    wrote once the mode given later has group-write (the mask follows the mode's group bits)."""
    for _ in range(100):
        tmp = f".{name}{TEMP_MARK}{os.urandom(6).hex()}"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode,
                         dir_fd=dir_fd)
        except FileExistsError:
            continue
        try:
            posixacl.drop(fd)
        except BaseException:
            os.close(fd)
            os.unlink(tmp, dir_fd=dir_fd)
            raise
        return fd, tmp
    raise FileExistsError(f"no free temporary name for {name}")


@contextmanager
def staged_temp(dir_fd: int, name: str, mode: int = 0o600) -> Iterator[tuple[int, str]]:
    """create_temp's (fd, temporary name) for a block that fills it and ends with commit_temp;
    if the block fails (a full disk, Ctrl-C, a refusal), the temporary is removed. The block owns
    the fd (closes it, usually through os.fdopen)."""
    fd, tmp = create_temp(dir_fd, name, mode)
    try:
        yield fd, tmp
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except FileNotFoundError:
            pass
        raise


def fsync_dir(dir_fd: int) -> None:
    os.fsync(dir_fd)  # the rename itself must survive a power cut


def commit_temp(dir_fd: int, tmp: str, name: str, *, exclusive: bool = False, durable: bool = True) -> None:
    """Give the finished temporary its name: atomically replace (or, `exclusive`, claim a name no
    one has: a hard link never overwrites), then fsync the directory (unless not `durable`: a
    cache whose entry, lost in a crash, is simply made again)."""
    if exclusive:
        try:
            os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
            os.unlink(tmp, dir_fd=dir_fd)
        except FileExistsError:
            raise
        except OSError:  # a filesystem without hard links: claim the name first, then fill it
            os.close(os.open(name, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd))
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    else:
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    if durable:
        fsync_dir(dir_fd)


def write_file(target: str | Path, data: str | bytes, *, mode: int | None = None,
               owner: tuple[int, int] | None = None, exclusive: bool = False, create_dirs: bool = True,
               dir_mode: int = 0o755, before_replace: Callable[[], None] | None = None) -> Path:
    """Replace `target` with `data` so that a crash leaves the old file or the new one. The folder
    is opened safely (open_dir); a file being replaced keeps its mode and owner unless `mode` /
    `owner` are given; a new one gets `mode` or 0644. The temporary is made with O_EXCL, its mode
    and owner set on the open file, data and rename fsynced. `exclusive`: FileExistsError when
    `target` exists. A temporary left by a writer that was killed goes first."""
    target = Path(target)
    with opened_dir(target.parent, create=create_dirs, mode=dir_mode, owner=owner) as dfd:
        write_in(dfd, target.name, data, mode=mode, owner=owner, exclusive=exclusive, before_replace=before_replace)
    return target


def write_in(dir_fd: int, name: str, data: str | bytes, *, mode: int | None = None,
             owner: tuple[int, int] | None = None, exclusive: bool = False,
             before_replace: Callable[[], None] | None = None) -> None:
    """write_file's work in a folder already open (by open_dir, or open_drop_dir for a folder
    another program reads)."""
    remove_stale_temps(dir_fd, name)
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        # another user's file is replaced, never handed back to them
        trusted = stat.S_ISREG(st.st_mode) and st.st_uid in trusted_uids()
        kept = (st.st_mode & 0o7777, (st.st_uid, st.st_gid)) if trusted else (None, None)
    except FileNotFoundError:
        kept = (None, None)
    with staged_temp(dir_fd, name) as (fd, tmp):
        with os.fdopen(fd, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
            fh.flush()
            os.fchmod(fh.fileno(), mode if mode is not None else (kept[0] if kept[0] is not None else 0o644))
            chown_to = owner or kept[1]
            if chown_to is not None and chown_to != (os.geteuid(), os.getegid()):
                os.fchown(fh.fileno(), *chown_to)
            os.fsync(fh.fileno())
        if before_replace is not None:
            before_replace()
        commit_temp(dir_fd, tmp, name, exclusive=exclusive)
