"""The code a boot unit runs, as facts: every file and directory that decides what runs when
systemd starts the hostctl the units call (`/usr/local/bin/hostctl`), with its owner and mode, so
that a pure decision (hostctl/provision/boot_code.py) can tell whether anyone but root could
change that code. Read here, judged there.

What is read, in order: each directory from / down to the executable and each link on the way
(followed like the kernel does); what Python could import from the script's own folder; the
script's shebang interpreter the same way; the Python environment behind it: a venv's whole tree
(pyvenv.cfg beside the interpreter's bin/) and the base interpreter its pyvenv.cfg names (`home`,
`executable`, `base-prefix`: a `--copies` venv runs on a Python found only there); the base's
standard library, every file of it (os.py, encodings/, lib-dynload/, a sitecustomize.py: all of it
runs before hostctl does), its zip and the libpython a shared build loads from the prefix; the
site directories on the default sys.path; in each site directory the hostctl package, the
directories its .pth files add to sys.path and the source folders an editable install maps hostctl
to.

Nothing found is executed: the interpreter is never run to ask where it imports from, since
running it as root is what the check must first prove safe; sys.path is derived the way Python's
own start-up derives it (pyvenv.cfg, then the landmark lib/python3.X/os.py). A .pth `import` line
is code run at every start-up: only the lines setuptools and virtualenv write are known (their
modules lie in the site directory, read with it); any other makes the chain unreadable. Links
inside a walked tree are recorded, not followed (the interpreter, the .pth paths and the
editable sources are).
"""

from __future__ import annotations

import ast
import glob
import grp
import os
import pwd
import re
import stat
from pydantic import ConfigDict, Field

from hostctl import paths, posixacl
from hostctl.data import Data

# The PATH systemd gives a unit: where `#!/usr/bin/env python3` finds python3 at boot.
BOOT_PATH = ("/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin")
# The units that call the installed hostctl (provision's system and gpu parts write them): doctor
# tells "not installed yet" from "installed units would fail" by them.
BOOT_UNITS = ("/etc/systemd/system/hostctl-runtime.service", "/etc/systemd/system/hostctl-power.service")
MAX_LINKS = 40  # the kernel's own limit on links followed in one lookup
SHEBANG_BYTES = 256  # Linux reads at most this much of a #! line
MAX_PTH_BYTES = 64 * 1024

EXECUTABLE = "the executable the units call"
SCRIPT_DIR = "the script's own folder (first on sys.path)"
INTERPRETER = "its interpreter (the #! line)"
STDLIB = "the interpreter's standard library"
ENVIRONMENT = "its Python environment"
SITE = "a site-packages directory of that interpreter"
PACKAGE = "the hostctl package"
PTH_PATH = "a directory a .pth file adds to sys.path"
EDITABLE = "the source an editable install maps hostctl to"


class InstallPath(Data):
    model_config = ConfigDict(frozen=True)

    path: str  # real path on this machine
    role: str  # why it matters (one of the constants above)
    uid: int
    gid: int
    mode: int  # st_mode, file type bits included (lstat: a link is a link)
    # An access ACL, read only where the group bits allow writing (with an ACL they are its mask:
    # some named user or group may write even though the group is root).
    acl: bool = False


class ExecChain(Data):
    """What the code behind one executable path is made of."""

    path: str  # the path the units name (a host path)
    euid: int  # who reads it: that account runs provision, so its own files are no escalation
    entries: list[InstallPath] = Field(default_factory=list)
    missing: str | None = None  # the first path on the way that does not exist
    unreadable: str | None = None  # what could not be read or followed, and why
    users: dict[int, str] = Field(default_factory=dict)  # uid -> name, for the owners seen
    groups: dict[int, str] = Field(default_factory=dict)  # gid -> name


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
        self.chain.entries.append(InstallPath(path=path, role=role, uid=st.st_uid, gid=st.st_gid, mode=st.st_mode, acl=acl))

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

    def tree(self, top: str, role: str, skip: tuple[str, ...] = ()) -> None:
        """`top` resolved, then everything below it. A link below it is recorded and its target
        resolved (an editable install's link farm points at the user's files), but a folder it
        leads to is not walked: the walk stays one tree. Folders named in `skip` directly below
        `top` are left out (walked in their own role where they matter)."""
        real = self.resolve(top, role)
        if any(real == done or real.startswith(done.rstrip("/") + "/") for done in self.walked):
            return  # inside a tree already walked (a venv's site-packages, its hostctl package)
        if not skip:  # a tree with holes does not stand for what lies in them
            self.walked.append(real)
        for dirpath, dirnames, filenames in os.walk(real, followlinks=False):
            if dirpath == real:
                dirnames[:] = [d for d in dirnames if d not in skip]
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


def _venv_settings(interpreter: str) -> tuple[str | None, dict[str, str]]:
    """(the venv root, its pyvenv.cfg keys) for an interpreter path as the #! line names it, or
    (None, {}) outside a venv. Python looks for pyvenv.cfg beside the executable and one folder up."""
    here = os.path.dirname(interpreter)
    for venv in (os.path.dirname(here), here):
        cfg = os.path.join(venv, "pyvenv.cfg")
        if os.path.isfile(cfg):
            with open(cfg, "rb") as fh:
                lines = fh.read(MAX_PTH_BYTES).decode(errors="replace").splitlines()
            pairs = (line.partition("=") for line in lines if "=" in line)
            return venv, {k.strip().lower(): v.strip() for k, _, v in pairs}
    return None, {}


def _has_landmark(prefix: str) -> bool:
    return bool(glob.glob(os.path.join(prefix, "lib/python3*/os.py")))


def _base_prefixes(interpreter: str, venv: str | None, settings: dict[str, str]) -> list[str]:
    """Where the interpreter's standard library is loaded from (sys.base_prefix and its
    exec_prefix), found as Python's start-up finds it: from a venv's `home` (the folder holding
    the base interpreter; its prefix is the first folder up from it with lib/python3.X/os.py)
    and the keys virtualenv and newer venvs add; outside a venv, from the real interpreter."""
    if venv is None:
        starts = [os.path.dirname(os.path.realpath(interpreter))]
    else:
        starts = [settings[k] for k in ("home",) if settings.get(k)]
        starts += [os.path.dirname(settings[k]) for k in ("executable", "base-executable") if settings.get(k)]
        starts += [os.path.join(settings[k], "bin") for k in ("base-prefix", "base-exec-prefix") if settings.get(k)]
        if not starts:  # no home: Python falls back to the executable's own prefix
            starts = [os.path.dirname(os.path.realpath(interpreter))]
    out = []
    for start in starts:
        if not start.startswith("/"):
            raise OSError(f"{venv}/pyvenv.cfg names a relative base interpreter folder {start!r}: "
                          "where Python would look is not known before it runs")
        # Lexically, as getpath does; the walk then follows links as the kernel does.
        probe = os.path.normpath(start)
        while not _has_landmark(probe):
            if probe == "/":
                # Python would fall back to the prefix it was built with: not known from here
                raise OSError(f"no standard library (lib/python3.X/os.py) in {start} or any folder above it, "
                              f"so where {interpreter} loads it from is not known before it runs")
            probe = os.path.dirname(probe)
        out.append(probe)
    return list(dict.fromkeys(out))


def _site_dirs(prefix: str) -> list[str]:
    """The site directories of a base Python under `prefix` (Debian's dist-packages included)."""
    patterns = ("lib/python3*/site-packages", "lib/python3*/dist-packages", "lib/python3/dist-packages",
                "local/lib/python3*/dist-packages", "local/lib/python3*/site-packages")
    return list(dict.fromkeys(d for p in patterns for d in sorted(glob.glob(os.path.join(prefix, p)))))


def _stdlib(w: _Walker, prefix: str) -> None:
    """Every file of the standard library under `prefix` (a module another user owns in a
    root-owned folder runs as well as any) and the zip Python puts first on sys.path. Its own
    site-packages is walked only where it is on sys.path (as a site directory)."""
    for name in ("lib/python3*.zip", "lib/libpython3*.so*"):  # a shared build's RUNPATH is prefix/lib
        for found in sorted(glob.glob(os.path.join(prefix, name))):
            w.resolve(found, STDLIB)
    for lib in sorted(glob.glob(os.path.join(prefix, "lib/python3.*"))):
        if os.path.isdir(lib):
            w.tree(lib, STDLIB, skip=("site-packages", "dist-packages"))


def _user_site(venv: str | None) -> list[str]:
    """Root's user site directory (~root/.local/lib/python3.X/site-packages, where a
    usercustomize.py runs): on sys.path outside a venv only."""
    if venv is not None:
        return []
    try:
        home = pwd.getpwuid(0).pw_dir
    except KeyError:
        return []
    return sorted(glob.glob(os.path.join(home, ".local/lib/python3*/site-packages")))


_PYTHON_NAME = re.compile(r"python(3(\.[0-9]+)?)?")
_EDITABLE_FINDER = re.compile(r"__editable___[A-Za-z0-9_]+_finder")
# What setuptools writes as distutils-precedence.pth, byte for byte (its module _distutils_hack
# lies in the same site directory and is read with it).
_DISTUTILS_PRECEDENCE = ("import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os.environ.get(var, 'local') "
                         "== 'local'; enabled and __import__('_distutils_hack').add_shim(); ")


class _UnknownCode(ValueError):
    """A .pth line that runs code this check cannot read."""


def _known_import(pth: str, line: str) -> str | None:
    """For a .pth `import` line that is one of the known, harmless ones: the module file it runs
    from the site directory (to be read as such; None for virtualenv's and setuptools' own
    shims, read with the site directory). _UnknownCode for any other line: Python exec()s it at
    every start-up (`import sys; sys.path.insert(0, ...)` puts any folder first)."""
    site = os.path.dirname(pth)
    if line.strip() == _DISTUTILS_PRECEDENCE.strip() or line.strip() == "import _virtualenv":
        module = "_distutils_hack" if "distutils" in line else "_virtualenv.py"
        if os.path.lexists(os.path.join(site, module)):
            return None
    try:
        body = ast.parse(line).body
    except SyntaxError:
        body = []
    # setuptools' editable finder: `import __editable___NAME_finder; __editable___NAME_finder.install()`
    if (len(body) == 2 and isinstance(body[0], ast.Import) and len(body[0].names) == 1
            and body[0].names[0].asname is None and _EDITABLE_FINDER.fullmatch(body[0].names[0].name)
            and isinstance(body[1], ast.Expr) and isinstance(call := body[1].value, ast.Call)
            and isinstance(call.func, ast.Attribute) and call.func.attr == "install"
            and isinstance(call.func.value, ast.Name) and call.func.value.id == body[0].names[0].name
            and not call.keywords and all(isinstance(a, ast.Constant) for a in call.args)):
        finder = os.path.join(site, body[0].names[0].name + ".py")
        if os.path.isfile(finder):
            return finder
    raise _UnknownCode(f"{pth}: a .pth `import` line runs code at every start-up that this check cannot read "
                      f"({line.strip()[:120]!r}); remove the line or the file")


def _pth_lines(site: str, name: str) -> tuple[list[str], list[str]]:
    """(the directories a .pth file adds to sys.path, the editable finders it runs), read as
    site.addpackage reads it: `#` lines skipped, `import` lines run (known ones only, see
    _known_import), any other line a path."""
    full = os.path.join(site, name)
    with open(full, "rb") as fh:
        text = fh.read(MAX_PTH_BYTES).decode(errors="replace")
    paths_, finders = [], []
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        if line.startswith(("import ", "import\t")):
            finder = _known_import(full, line)
            if finder is not None:
                finders.append(finder)
            continue
        paths_.append(os.path.normpath(os.path.join(site, line.rstrip())))
    return paths_, finders


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
    venv, settings = _venv_settings(interpreter)
    if venv is not None:
        w.tree(venv, ENVIRONMENT)
    prefixes = _base_prefixes(interpreter, venv, settings)
    for key in ("executable", "base-executable"):  # the base interpreter a venv names
        if settings.get(key) and os.path.lexists(settings[key]):  # informational to 3.11's start-up
            w.resolve(settings[key], INTERPRETER)
    for prefix in prefixes:
        w.resolve(prefix, STDLIB)
        _stdlib(w, prefix)
    sites = sorted(glob.glob(os.path.join(venv, "lib*/python3*/site-packages"))) if venv is not None else []
    if venv is None or settings.get("include-system-site-packages", "").lower() == "true":
        sites += [d for prefix in prefixes for d in _site_dirs(prefix)]
    for site in [*dict.fromkeys(sites), *_user_site(venv)]:
        # Everything in a site directory can run in hostctl's process (a module it imports, a
        # sitecustomize, a .pth line); in a venv the walk above already read it.
        w.tree(site, SITE)
        for name in sorted(os.listdir(site)):
            full = os.path.join(site, name)
            if name == "hostctl":
                w.tree(full, PACKAGE)
            elif name.endswith(".pth"):
                extras, finders = _pth_lines(site, name)
                for finder in finders:
                    for source in _editable_sources(finder):
                        w.tree(source, EDITABLE)
                for extra in extras:
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
            elif _EDITABLE_FINDER.fullmatch(name.removesuffix(".py")) and name.endswith(".py"):
                # a finder no .pth names yet still maps hostctl if something imports it
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
            # Python puts the script's real folder first on sys.path: a module there (typer.py
            # beside /usr/local/bin/hostctl) shadows any hostctl imports.
            here = os.path.dirname(real)
            for name in sorted(os.listdir(here)):
                full = os.path.join(here, name)
                try:
                    st = os.lstat(full)
                except FileNotFoundError:
                    continue
                if name.endswith((".py", ".pyc", ".so", ".pth")) or stat.S_ISDIR(st.st_mode):
                    w.add(full, SCRIPT_DIR, st)
            # A ._pth file beside the binary replaces sys.path (and whether site runs) wholesale.
            for pth in sorted(glob.glob(os.path.join(os.path.dirname(real_interpreter), "*._pth"))):
                w.resolve(pth, INTERPRETER)
            # Only a Python reads pyvenv.cfg, site directories and .pth files: a #!/bin/sh
            # script has none of them (/bin/sh lies beside /usr/bin/python3, whose would be read).
            if any(_PYTHON_NAME.fullmatch(os.path.basename(p)) for p in (interpreter, real_interpreter)):
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
