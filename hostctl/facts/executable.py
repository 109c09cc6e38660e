"""The code a boot unit runs, as facts: every file and directory that decides what runs when
systemd starts the hostctl the units call (`/usr/local/bin/hostctl`), with its owner and mode, so
that a pure decision (hostctl/provision/boot_code.py) can tell whether anyone but root could
change that code. Read here, judged there.

What is read, in order: each directory from / down to the executable and each link on the way
(followed like the kernel does); the script's shebang interpreter the same way; the Python
environment behind it: a venv's whole tree (pyvenv.cfg beside the interpreter's bin/), else the
interpreter's site directories (and its standard library folder, not each module); in each site directory the hostctl package, the directories its
.pth files add to sys.path and the source folders an editable install maps hostctl to.

Nothing found is executed: the interpreter is never run to ask where it imports from, since
running it as root is what the check must first prove safe. Links inside a walked tree are
recorded, not followed (the interpreter, the .pth paths and the editable sources are).
"""

from __future__ import annotations

import ast
import glob
import grp
import os
import pwd
import stat
from dataclasses import dataclass, field

from hostctl import paths, posixacl

# The PATH systemd gives a unit: where `#!/usr/bin/env python3` finds python3 at boot.
BOOT_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# The units that call the installed hostctl (provision's system and gpu parts write them): doctor
# tells "not installed yet" from "installed units would fail" by them.
BOOT_UNITS = ("/etc/systemd/system/hostctl-runtime.service", "/etc/systemd/system/hostctl-power.service")
MAX_LINKS = 40  # the kernel's own limit on links followed in one lookup
SHEBANG_BYTES = 256  # Linux reads at most this much of a #! line
MAX_PTH_BYTES = 64 * 1024

EXECUTABLE = "the executable the units call"
INTERPRETER = "its interpreter (the #! line)"
STDLIB = "the interpreter's standard library folder"
ENVIRONMENT = "its Python environment"
SITE = "a site-packages directory of that interpreter"
PACKAGE = "the hostctl package"
PTH_PATH = "a directory a .pth file adds to sys.path"
EDITABLE = "the source an editable install maps hostctl to"


@dataclass(frozen=True)
class Entry:
    path: str  # real path on this machine
    role: str  # why it matters (one of the constants above)
    uid: int
    gid: int
    mode: int  # st_mode, file type bits included (lstat: a link is a link)
    # An access ACL, read only where the group bits allow writing (with an ACL they are its mask:
    # some named user or group may write even though the group is root).
    acl: bool = False


@dataclass
class ExecChain:
    """What the code behind one executable path is made of."""

    path: str  # the path the units name (a host path)
    euid: int  # who reads it: that account runs provision, so its own files are no escalation
    entries: list[Entry] = field(default_factory=list)
    missing: str | None = None  # the first path on the way that does not exist
    unreadable: str | None = None  # what could not be read or followed, and why
    users: dict[int, str] = field(default_factory=dict)  # uid -> name, for the owners seen
    groups: dict[int, str] = field(default_factory=dict)  # gid -> name


class _Missing(Exception):
    pass


class _Walker:
    def __init__(self, chain: ExecChain) -> None:
        self.chain = chain
        self.seen: set[str] = set()
        self.walked: list[str] = []  # real roots of the trees walked

    def add(self, path: str, role: str, st: os.stat_result) -> None:
        if path in self.seen:
            return
        self.seen.add(path)
        # With an ACL that lets anyone but the owner write, the mode's group bits (the mask) show w.
        acl = bool(st.st_mode & stat.S_IWGRP) and not stat.S_ISLNK(st.st_mode) and bool(posixacl.writers(path))
        self.chain.entries.append(Entry(path, role, st.st_uid, st.st_gid, st.st_mode, acl))

    def resolve(self, path: str, role: str) -> str:
        """Follow `path` component by component from /, recording every directory and link on
        the way and the final object; its real path. _Missing when something is absent."""
        todo = [p for p in path.split("/") if p]
        real, links = "/", 0
        self.add("/", role, os.lstat("/"))
        while todo:
            part = todo.pop(0)
            if part == ".":
                continue
            if part == "..":
                real = os.path.dirname(real) or "/"
                continue
            here = os.path.join(real, part)
            try:
                st = os.lstat(here)
            except (FileNotFoundError, NotADirectoryError):
                raise _Missing(here) from None
            self.add(here, role, st)
            if stat.S_ISLNK(st.st_mode):
                links += 1
                if links > MAX_LINKS:
                    raise OSError(f"{path}: more than {MAX_LINKS} links on the way")
                target = os.readlink(here)
                if target.startswith("/"):
                    real = "/"
                todo[:0] = [p for p in target.split("/") if p]
                continue
            real = here
        return real

    def tree(self, top: str, role: str) -> None:
        """`top` resolved, then everything below it. A link below it is recorded and its target
        resolved (an editable install's link farm points at the user's files), but a folder it
        leads to is not walked: the walk stays one tree."""
        real = self.resolve(top, role)
        if any(real == done or real.startswith(done.rstrip("/") + "/") for done in self.walked):
            return  # inside a tree already walked (a venv's site-packages, its hostctl package)
        self.walked.append(real)
        for dirpath, dirnames, filenames in os.walk(real, followlinks=False):
            for name in (*dirnames, *filenames):
                full = os.path.join(dirpath, name)
                try:
                    st = os.lstat(full)
                except FileNotFoundError:
                    continue
                self.add(full, role, st)
                if stat.S_ISLNK(st.st_mode):
                    try:
                        self.resolve(full, role)
                    except _Missing:
                        continue  # a dangling link runs nothing


def _interpreter(script: str) -> str | None:
    """The program a script's #! line names (`env NAME` looked up in the boot PATH), or None
    for a binary or a script without one."""
    fd = os.open(script, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        head = os.read(fd, SHEBANG_BYTES)
    finally:
        os.close(fd)
    if not head.startswith(b"#!"):
        return None
    words = head[2:].split(b"\n", 1)[0].decode(errors="replace").split()
    if not words:
        raise OSError(f"{script}: an empty #! line")
    program = words[0]
    if os.path.basename(program) == "env":
        if len(words) < 2 or words[1].startswith("-"):
            raise OSError(f"{script}: `#!{' '.join(words)}`: which program env runs is not known before it runs")
        name = words[1]
        found = next((os.path.join(d, name) for d in BOOT_PATH if os.path.isfile(os.path.join(d, name))), None)
        if found is None:
            raise OSError(f"{script}: `#!{program} {name}` finds no {name} in systemd's PATH")
        return found
    return program


def _site_dirs(interpreter: str) -> tuple[str | None, list[str]]:
    """(the venv root or None, the site directories) of an interpreter, as its path says; a venv
    made with --system-site-packages adds its base interpreter's."""
    venv = os.path.dirname(os.path.dirname(interpreter))
    cfg = os.path.join(venv, "pyvenv.cfg")
    if os.path.isfile(cfg):
        own = sorted(glob.glob(os.path.join(venv, "lib*/python3*/site-packages")))
        with open(cfg, "rb") as fh:
            settings = dict(line.partition("=")[::2] for line in fh.read(MAX_PTH_BYTES).decode(errors="replace").splitlines())
        shared = {k.strip(): v.strip() for k, v in settings.items()}.get("include-system-site-packages", "")
        return venv, own + (_site_dirs(os.path.realpath(interpreter))[1] if shared.lower() == "true" else [])
    prefix = os.path.dirname(os.path.dirname(os.path.realpath(interpreter)))
    patterns = ("lib/python3*/site-packages", "lib/python3*/dist-packages", "lib/python3/dist-packages",
                "local/lib/python3*/dist-packages", "local/lib/python3*/site-packages")
    found = [d for p in patterns for d in sorted(glob.glob(os.path.join(prefix, p)))]
    return None, list(dict.fromkeys(found))


def _pth_paths(site: str, name: str) -> list[str]:
    """The directories a .pth file adds to sys.path (its lines that are not comments or imports)."""
    with open(os.path.join(site, name), "rb") as fh:
        text = fh.read(MAX_PTH_BYTES).decode(errors="replace")
    out = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or line.startswith(("import ", "import\t")):
            continue
        out.append(os.path.normpath(os.path.join(site, line)))
    return out


def _editable_sources(path: str) -> list[str]:
    """The folders an editable-install finder maps packages to: the literal MAPPING dict that
    setuptools writes into __editable___*_finder.py (read as data, never imported)."""
    with open(path, "rb") as fh:
        tree = ast.parse(fh.read(1024 * 1024))
    for node in tree.body:
        target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else \
            node.target if isinstance(node, ast.AnnAssign) else None
        if isinstance(target, ast.Name) and target.id == "MAPPING" and node.value is not None:
            value = ast.literal_eval(node.value)
            return [v for v in value.values() if isinstance(v, str)] if isinstance(value, dict) else []
    return []


def _environment(w: _Walker, interpreter: str) -> None:
    venv, sites = _site_dirs(interpreter)
    if venv is not None:
        w.tree(venv, ENVIRONMENT)
    for site in sites:
        # Everything in a site directory can run in hostctl's process (a module it imports, a
        # sitecustomize, a .pth line); in a venv the walk above already read it.
        w.tree(site, SITE)
        for name in sorted(os.listdir(site)):
            full = os.path.join(site, name)
            if name == "hostctl":
                w.tree(full, PACKAGE)
            elif name.endswith(".pth"):
                for extra in _pth_paths(site, name):
                    if not os.path.isdir(extra):
                        continue  # Python skips a path that is not there
                    real = w.resolve(extra, PTH_PATH)
                    # Its top-level names too (a module there shadows one hostctl imports); not
                    # the whole tree: such a path is often a whole checkout.
                    for entry in sorted(os.listdir(real)):
                        try:
                            w.add(os.path.join(real, entry), PTH_PATH, os.lstat(os.path.join(real, entry)))
                        except FileNotFoundError:
                            continue
                    if os.path.isdir(os.path.join(extra, "hostctl")):
                        w.tree(os.path.join(extra, "hostctl"), PACKAGE)
            elif name.startswith("__editable__") and name.endswith("_finder.py"):
                for source in _editable_sources(full):
                    w.tree(source, EDITABLE)


def read_exec_chain(host_path: str) -> ExecChain:
    """Everything that decides what runs when a unit executes `host_path` (under the test sysroot
    for that first path; links are then followed on this machine)."""
    chain = ExecChain(path=host_path, euid=os.geteuid())
    w = _Walker(chain)
    try:
        real = w.resolve(str(paths.system_path(host_path)), EXECUTABLE)
        interpreter = _interpreter(real) if stat.S_ISREG(os.stat(real).st_mode) else None
        if interpreter is not None:
            real_interpreter = w.resolve(interpreter, INTERPRETER)
            # The standard library it starts from (encodings, site): the folder, not every module.
            prefix = os.path.dirname(os.path.dirname(real_interpreter))
            for stdlib in sorted(glob.glob(os.path.join(prefix, "lib/python3.*"))):
                w.resolve(stdlib, STDLIB)
            _environment(w, interpreter)
    except _Missing as exc:
        chain.missing = str(exc)
    except (OSError, SyntaxError, ValueError, RecursionError) as exc:
        chain.unreadable = str(exc)
    chain.users = {uid: _name(pwd.getpwuid, uid) for uid in {e.uid for e in chain.entries}}
    chain.groups = {gid: _name(grp.getgrgid, gid) for gid in {e.gid for e in chain.entries}}
    return chain


def _name(lookup, ident: int) -> str:
    try:
        return lookup(ident)[0]
    except KeyError:
        return str(ident)
