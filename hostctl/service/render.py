"""Render a Plan into files: compose.yaml, runtime.env and the systemd units, and write them as
one project.

Rendering is a pure function of the plan (plus the hostctl binary and profile paths the
units call), and it re-reads its own output (hostctl.service.rendercheck): a unit whose keys
are not its template's, or a compose.yaml or env file that does not read back as the plan, is
refused before anything is written. Writing goes to a temporary directory beside the target,
is checked there (`docker compose config` when the caller asks), and only then takes the
target's place, so a rejected render never replaces a working project. runtime.env holds the
recipe's secrets: it is mode 0600 in a 0700 directory.
"""

from __future__ import annotations

import ctypes
import errno
import json
import os
import re
import stat
from collections.abc import Callable
from pathlib import Path

import jinja2

from hostctl import __version__, paths, safefs, safetext
from hostctl.act.files import FileNow, read_file
from hostctl.errors import FailedError, InputError
from hostctl.plan.records import Plan

INSTALLED_HOSTCTL = paths.INSTALLED_HOSTCTL
INSTALLED_PROFILE = "/etc/hostctl/hostctl.toml"
FILES = {
    "compose.yaml": "compose.yaml.j2",
    "runtime.env": "runtime.env.j2",
    "hostctl-runtime.service": "hostctl-runtime.service.j2",
    "hostctl-power.service": "hostctl-power.service.j2",
    "hostctl-metrics.service": "hostctl-metrics.service.j2",
    "hostctl-metrics.timer": "hostctl-metrics.timer.j2",
}
TEXTFILE_DIR = str(paths.TEXTFILE_DIR)
_PLAIN_ENV = re.compile(r"^[A-Za-z0-9_./:,=+@%-]*$")
_PLAIN_UNIT_ARG = re.compile(r"^[A-Za-z0-9_./:,=+@-]+$")
SECRET_MODE, FILE_MODE, DIR_MODE = 0o600, 0o644, 0o700


def _env_quote(value: str) -> str:
    """One env-file value as Compose reads it back unchanged: plain; 'single-quoted' (literal);
    or "double-quoted" with \\, \" and $$ escaped when it holds a single quote."""
    problem = safetext.control_problem(value)
    if problem:
        raise InputError(f"an environment value {problem}", fix="remove it from the recipe's env")
    if _PLAIN_ENV.fullmatch(value) and not value.startswith('"'):
        return value
    if "'" not in value:
        return f"'{value}'"
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "$$") + '"'


def _unit_word(value: object, *, program: bool) -> str:
    text = str(value)
    problem = safetext.control_problem(text)
    if problem:
        raise InputError(f"a path for the systemd units ({text[:80]!r}) {problem}")
    if _PLAIN_UNIT_ARG.fullmatch(text):
        return text
    quoted = text.replace("\\", "\\\\").replace('"', '\\"').replace("%", "%%")
    # systemd expands ${VAR} (and a word that is $VAR) in the arguments when the command runs, and
    # reads $$ as one $; it does not expand the program's path (systemd.service(5) "Command lines":
    # "the first argument ... may not be a variable"; systemd-analyze verify reads a $$ there as two).
    return '"' + (quoted if program else quoted.replace("$", "$$")) + '"'


def _unit_arg(value: object) -> str:
    """One argument word of an Exec*= line: as is, or double-quoted with \\ and \" escaped, % doubled
    (systemd's specifier sign) and $ doubled (its variable sign); a control character is refused.
    hostctl.service.rendercheck.exec_argv reads it back as systemd does."""
    return _unit_word(value, program=False)


def _unit_exe(value: object) -> str:
    """The program word of an Exec*= line: as _unit_arg, but $ as is (systemd takes the path literally)."""
    return _unit_word(value, program=True)


def _environment(compose: bool = False) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader([str(d) for d in paths.template_dirs()]),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters["env_quote"] = _env_quote
    env.filters["unit_arg"] = _unit_arg
    env.filters["unit_exe"] = _unit_exe
    # A JSON string is a valid YAML double-quoted scalar: safe quoting for any value. In
    # compose.yaml every literal `$` is doubled (Compose interpolates the file); `qi` is the one
    # place hostctl means interpolation (the API key's ${VAR:?...} guard).
    if compose:
        env.filters["q"] = lambda value: json.dumps(str(value).replace("$", "$$") if isinstance(value, str)
                                                    else [str(v).replace("$", "$$") for v in value]
                                                    if isinstance(value, list) else value, ensure_ascii=False)
    else:
        env.filters["q"] = lambda value: json.dumps(value, ensure_ascii=False)
    env.filters["qi"] = lambda value: json.dumps(value, ensure_ascii=False)
    return env


def render_files(plan: Plan, *, hostctl_bin: str = INSTALLED_HOSTCTL, config_path: str = INSTALLED_PROFILE) -> dict[str, str]:
    """The project's files; InputError when one does not read back as its template and the plan."""
    from hostctl.service.rendercheck import exec_problems, project_problems

    env, compose_env = _environment(), _environment(compose=True)
    groups: dict[str, list[tuple[str, str]]] = {}
    for key, value in plan.runtime.env.items():
        groups.setdefault(plan.runtime.env_sources.get(key, "plan"), []).append((key, value))
    limits = sorted({f"{s.desired_w:g} W" for s in plan.power.gpus if s.desired_w is not None})
    context = {
        "version": __version__,
        "plan": plan,
        "rt": plan.runtime,
        "env_groups": list(groups.items()),
        "health_host": "127.0.0.1" if plan.runtime.api_host in ("0.0.0.0", "::") else plan.runtime.api_host,
        "hostctl_bin": hostctl_bin,
        "config_path": config_path,
        "power_summary": ", ".join(limits) if limits else "none set",
        "textfile_dir": TEXTFILE_DIR,
    }
    out = {}
    for name, template in FILES.items():
        out[name] = (compose_env if name == "compose.yaml" else env).get_template(template).render(**context)
    problems = project_problems(out, plan, plan.runtime.env, FILES)
    problems += exec_problems("hostctl-runtime.service", out["hostctl-runtime.service"],
                              {"ExecStart": [hostctl_bin, "--config", config_path, "up", "--foreground"]})
    problems += exec_problems("hostctl-power.service", out["hostctl-power.service"],
                              {"ExecStart": [hostctl_bin, "--config", config_path, "provision", "--only", "gpu", "--boot"]})
    problems += exec_problems("hostctl-metrics.service", out["hostctl-metrics.service"],
                              {"ExecCondition": ["/bin/test", "-d", TEXTFILE_DIR],
                               "ExecStart": [hostctl_bin, "--config", config_path, "metrics", "--textfile-dir",
                                             TEXTFILE_DIR]})
    if problems:
        raise InputError("the rendered project is not what its templates write; nothing was written",
                         details=problems[:10],
                         fix="a value in the profile or recipe carries text the files would read as their own "
                         "(a line break, a quote): correct it")
    return out


# ---------------------------------------------------------------- writing a project

_PSEUDO_FS = ("/proc", "/sys", "/dev")


def _project_target(out_dir: Path) -> Path:
    """out_dir made absolute, or InputError naming why it cannot hold a rendered project."""
    problem = _target_problem(out_dir)
    if problem:
        raise InputError(f"cannot write the project to {str(out_dir)[:200]}: {problem}",
                         fix="pass --out a directory (it is created if missing), or set runtime.project_dir")
    return Path(os.path.abspath(out_dir))


def _target_problem(out_dir: Path) -> str | None:
    """Why out_dir cannot hold a rendered project, judged before anything is written."""
    text = str(out_dir)
    from hostctl import safepaths

    absolute = os.path.abspath(text)
    problem = safepaths.lexical_problem(absolute)
    if problem:
        return problem
    if any(absolute == p or absolute.startswith(p + "/") for p in _PSEUDO_FS):
        return f"{absolute} is on a kernel pseudo-filesystem (/proc, /sys, /dev), which cannot hold files"
    system = safepaths.system_dir(absolute)
    if system:
        return system
    probe = Path(absolute)
    while True:
        try:
            if probe.exists() and not probe.is_dir():
                return f"{probe} is a file, not a directory" if probe == Path(absolute) else \
                    f"{probe} is a file, so {absolute} cannot be a directory"
        except OSError as exc:
            return f"{probe}: {exc.strerror or exc}"
        if probe.exists() or probe.parent == probe:
            return None
        probe = probe.parent


def _renameat2_exchange(dir_fd: int, a: str, b: str) -> bool:
    """Swap two entries of one directory in one step (Linux renameat2 RENAME_EXCHANGE); False
    where the kernel or filesystem cannot."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    rename_exchange = 2
    if fn(dir_fd, os.fsencode(a), dir_fd, os.fsencode(b), rename_exchange) == 0:
        return True
    if ctypes.get_errno() in (errno.EINVAL, errno.ENOSYS, errno.EXDEV, errno.ENOTSUP):
        return False
    raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()), b)


def _private_project(out_dir: Path) -> int | None:
    """An fd of the existing project folder (its links followed only where trusted), or None when
    it is missing. Compose reads every file there (compose.yaml, runtime.env, a `.env` it finds on
    its own), so a folder another user owns or can write into is refused, not written."""
    try:
        fd = safefs.open_dir(out_dir)
    except FileNotFoundError:
        return None
    st = os.fstat(fd)
    if safefs.others_can_write(st, fd):
        os.close(fd)
        raise safefs.UntrustedPathError(out_dir, f"the project folder is {safefs.describe(st)}: others can put "
                                                 "files in it that Compose would read as root",
                                        fix=f"chmod go-w {out_dir}, or pass --out a folder of yours")
    return fd


def _refuse_system_dir(out_dir: Path, fd: int) -> None:
    """_target_problem judged the path as written; a link on the way (even one of the invoking
    user's) could still lead into a system directory, so where the open folder really is is
    judged by the same rule."""
    from hostctl import safepaths

    real = os.readlink(f"/proc/self/fd/{fd}")
    problem = safepaths.system_dir(real) if real.startswith("/") else None
    if problem:
        raise safefs.UntrustedPathError(out_dir, f"it leads to {real}: {problem}",
                                        fix="pass --out a folder of yours that is not a link into a system directory")


def _remove_temp_dir(parent_fd: int, name: str) -> None:
    """Remove the temporary project folder (hostctl's own, in a folder no one else can swap)."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
    except FileNotFoundError:
        return
    try:
        for entry in os.listdir(fd):
            os.unlink(entry, dir_fd=fd)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=parent_fd)


def write_project(files: dict[str, str], out_dir: Path, *, check: Callable[[Path], None] | None = None) -> list[Path]:
    """Write `files` into a temporary directory beside out_dir, run `check` on it (it raises to
    refuse), then put it in place: a new directory is renamed into place; a directory that holds
    only hostctl's files is swapped in one step; a directory that also holds other files keeps
    them and gets each file replaced atomically. On any failure out_dir is as it was.

    Everything goes through directory fds opened by safefs: the way to out_dir, and out_dir itself,
    must be root's or the invoking user's and not writable by others (UntrustedPathError, exit 3),
    so a link or folder planted in /tmp never redirects root's write."""
    out_dir = _project_target(out_dir)
    try:
        pfd = safefs.open_dir(out_dir.parent, create=True)
    except OSError as exc:
        raise InputError(f"cannot write the project to {out_dir}: {exc.strerror or exc}",
                         fix="pass --out a directory you can write to") from None
    try:
        ofd = _private_project(out_dir)
        try:
            _refuse_system_dir(out_dir, ofd if ofd is not None else pfd)
            tmp = _fill_temp_dir(pfd, out_dir, files)
            try:
                if check is not None:
                    check(out_dir.parent / tmp)
                _put_in_place(pfd, tmp, ofd, out_dir.name, list(files))
            finally:
                _remove_temp_dir(pfd, tmp)
        finally:
            if ofd is not None:
                os.close(ofd)
    finally:
        os.close(pfd)
    return [out_dir / name for name in files]


def _fill_temp_dir(pfd: int, out_dir: Path, files: dict[str, str]) -> str:
    for _ in range(100):
        tmp = f".{out_dir.name}{safefs.TEMP_MARK}{os.urandom(6).hex()}"
        try:
            os.mkdir(tmp, DIR_MODE, dir_fd=pfd)
            break
        except FileExistsError:
            continue
    else:
        raise FileExistsError(f"no free temporary name beside {out_dir}")
    try:
        tfd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
        try:
            os.fchmod(tfd, DIR_MODE)
            for name, text in files.items():
                mode = file_mode(name)
                fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=tfd)
                with os.fdopen(fd, "w", encoding="utf-8") as fh:
                    fh.write(text)
                    fh.flush()
                    os.fchmod(fh.fileno(), mode)  # the umask may have narrowed it
                    os.fsync(fh.fileno())
            safefs.fsync_dir(tfd)
        finally:
            os.close(tfd)
    except BaseException:
        _remove_temp_dir(pfd, tmp)
        raise
    return tmp


def _put_in_place(pfd: int, tmp: str, ofd: int | None, name: str, names: list[str]) -> None:
    if ofd is None:
        os.rename(tmp, name, src_dir_fd=pfd, dst_dir_fd=pfd)
        safefs.fsync_dir(pfd)
        return
    ours = set(FILES) | set(names)
    is_link = stat.S_ISLNK(os.stat(name, dir_fd=pfd, follow_symlinks=False).st_mode)
    only_ours = not is_link and all(e in ours for e in os.listdir(ofd))
    if only_ours and _renameat2_exchange(pfd, tmp, name):
        safefs.fsync_dir(pfd)
        return  # tmp now holds the old project; the caller removes it
    tfd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
    try:
        for n in names:
            os.replace(n, n, src_dir_fd=tfd, dst_dir_fd=ofd)
    finally:
        os.close(tfd)
    if only_ours:
        os.fchmod(ofd, DIR_MODE)
    safefs.fsync_dir(ofd)


def read_project(out_dir: Path, names: list[str]) -> list[FileNow]:
    """The project's files as they are now, read through the same trusted folder fd that
    write_project writes through: a folder that write_project would refuse (another user's, one
    others can write into, a system directory) is refused here, before anything is decided."""
    out_dir = _project_target(out_dir)
    try:
        ofd = _private_project(out_dir)
    except (FileNotFoundError, NotADirectoryError):
        ofd = None
    if ofd is None:
        return [FileNow(name=n) for n in names]
    try:
        _refuse_system_dir(out_dir, ofd)
        return [read_file(ofd, n) for n in names]
    finally:
        os.close(ofd)


def file_mode(name: str) -> int:
    return SECRET_MODE if name == "runtime.env" else FILE_MODE


def write_files(files: dict[str, str], out_dir: Path) -> list[Path]:
    """write_project without an extra check (the rendered files were re-read by render_files)."""
    return write_project(files, out_dir)


def compose_checked(project_dir: Path) -> None:
    """A `check` for write_project: `docker compose config` on the temporary project, when Compose
    is installed (FailedError when it rejects the project)."""
    from hostctl.service.compose import compose_check

    res = compose_check(project_dir)
    if res.checked and not res.ok:
        raise FailedError("docker compose config rejected the rendered project; nothing was written",
                          details=res.output.replace(str(project_dir), "<project>").splitlines()[-10:])
