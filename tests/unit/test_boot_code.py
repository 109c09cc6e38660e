"""The code root runs at boot is root's alone (issue 26, class 7): the pure decision on the
chain's facts (hostctl/provision/boot_code.py), the reader on real trees (hostctl/facts/
executable.py), and provision's system and gpu parts and doctor refusing or reporting a unit
that would call a hostctl another user (`nobody`, uid 65534) can change."""

from __future__ import annotations

import io
import os
import shutil
import stat
import sys
from pathlib import Path

import pytest

from conftest import needs_root
from hostctl import examples, paths
from hostctl.doctor.checks import all_checks
from hostctl.doctor.registry import CheckContext, run_checks
from hostctl.errors import EXIT_REFUSED, FailedError, RefusedError
from hostctl.facts.executable import (EDITABLE, ENVIRONMENT, INTERPRETER, SITE, STDLIB, InstallPath, ExecChain,
                                      read_exec_chain)
from hostctl.plan import build_plan
from hostctl.provision import boot_code, parts
from need import missing, needs

NOBODY = 65534
REG, DIR, LNK = stat.S_IFREG, stat.S_IFDIR, stat.S_IFLNK
needs_systemctl = needs(shutil.which("systemctl") is not None, "systemctl not installed (apt-get install systemd)")


def chain(*entries: tuple[str, int, int, int], euid: int = 0) -> ExecChain:
    return ExecChain(path="/usr/local/bin/hostctl", euid=euid,
                     entries=[InstallPath(path=p, role=ENVIRONMENT, uid=uid, gid=gid, mode=mode) for p, uid, gid, mode in entries],
                     users={0: "root", NOBODY: "nobody", 1000: "alice"}, groups={0: "root", 100: "users"})


ROOT_CHAIN = (("/", 0, 0, DIR | 0o755), ("/usr/local/bin/hostctl", 0, 0, LNK | 0o777),
              ("/opt/hostctl/bin/hostctl", 0, 0, REG | 0o755))


# ---------------------------------------------------------------- the decision (pure)


def test_a_chain_root_owns_and_only_root_can_write_may_be_called():
    assert boot_code.problem(chain(*ROOT_CHAIN)) is None
    # a sticky world-writable folder (/tmp) lets others add names, not replace root's
    assert boot_code.problem(chain(*ROOT_CHAIN, ("/tmp", 0, 0, DIR | stat.S_ISVTX | 0o777))) is None
    # group root may write: its members are root's already
    assert boot_code.problem(chain(*ROOT_CHAIN, ("/opt/hostctl", 0, 0, DIR | 0o775))) is None


@pytest.mark.parametrize("entry, who", [
    (("/opt/hostctl/lib/python3.11/site-packages/hostctl/cli.py", NOBODY, NOBODY, REG | 0o644),
     "owned by nobody (uid 65534)"),
    (("/opt/hostctl/bin", 0, 0, DIR | 0o777), "writable by every user (mode 0777)"),
    (("/opt/hostctl/bin/python3", 0, 100, REG | 0o775), "writable by group users (gid 100, mode 0775)"),
    (("/home/alice/hc/bin/hostctl", 1000, 1000, LNK | 0o777), "owned by alice (uid 1000)"),
])
def test_anything_another_user_can_change_is_refused_naming_path_and_owner(entry, who):
    err = boot_code.problem(chain(*ROOT_CHAIN, entry))
    assert isinstance(err, RefusedError) and err.exit_code == EXIT_REFUSED
    assert f"{entry[0]} ({ENVIRONMENT}): {who}" in err.details
    assert "install.sh" in err.fix and "ln -s" not in err.fix


def test_provisions_own_account_is_trusted_but_no_other():
    mine = ("/home/ci/hostctl/cli.py", 1000, 1000, REG | 0o644)
    assert boot_code.problem(chain(*ROOT_CHAIN, mine, euid=1000)) is None
    assert isinstance(boot_code.problem(chain(*ROOT_CHAIN, mine, euid=0)), RefusedError)


def test_many_findings_are_counted_not_all_listed():
    many = [(f"/home/alice/hc/f{i}.py", 1000, 1000, REG | 0o644) for i in range(9)]
    err = boot_code.problem(chain(*ROOT_CHAIN, *many))
    assert len(err.details) == boot_code.SHOWN + 1 and err.details[-1] == "... and 4 more"


def test_missing_fails_and_an_unfollowable_chain_is_refused():
    missing = ExecChain(path="/usr/local/bin/hostctl", euid=0, missing="/opt/hostctl/bin/hostctl")
    err = boot_code.problem(missing)
    assert type(err) is FailedError and "/opt/hostctl/bin/hostctl is missing on the way" in err.message
    assert "install.sh" in err.fix
    odd = ExecChain(path="/usr/local/bin/hostctl", euid=0, unreadable="more than 40 links on the way")
    assert isinstance(boot_code.problem(odd), RefusedError)


# ---------------------------------------------------------------- real trees, provision, doctor


def _venv(top: Path) -> Path:
    """A venv-shaped tree as `python3 -m venv` + `pip install` leave it: bin/python linking to this
    machine's interpreter, pyvenv.cfg, the console script whose #! names bin/python, the package."""
    (top / "bin").mkdir(parents=True)
    (top / "pyvenv.cfg").write_text(f"home = {Path(sys.executable).resolve().parent}\n")
    os.symlink(Path(sys.executable).resolve(), top / "bin/python")
    script = top / "bin/hostctl"
    script.write_text(f"#!{top}/bin/python\nimport sys\nfrom hostctl.cli import main\nsys.exit(main())\n")
    script.chmod(0o755)
    site = top / "lib/python3.11/site-packages"
    (site / "hostctl").mkdir(parents=True)
    (site / "hostctl/__init__.py").write_text("")
    (site / "hostctl/cli.py").write_text("def main():\n    return 0\n")
    return site


@pytest.fixture
def sysroot(tmp_path, monkeypatch):
    root = tmp_path / "root"
    (root / "usr/local/bin").mkdir(parents=True)
    monkeypatch.setenv(paths.SYSROOT_ENV, str(root))
    return root


def _point_units_at(sysroot: Path, venv: Path) -> None:
    os.symlink(venv / "bin/hostctl", sysroot / "usr/local/bin/hostctl")


def _provision(only: str, profile: str = "demo-cpu"):
    config, facts = examples.load(profile)
    err = io.StringIO()
    report = parts.provision(config, only=only, dry_run=False, facts=lambda c: facts, out=io.StringIO(), err=err)
    return report, err.getvalue()


@needs_root
@needs_systemctl
def test_root_owned_venv_is_installed_by_the_system_part(sysroot, tmp_path):
    _venv(tmp_path / "opt/hostctl")
    _point_units_at(sysroot, tmp_path / "opt/hostctl")
    report, _ = _provision("system")
    report.raise_for_error()
    assert (sysroot / "etc/systemd/system/hostctl-runtime.service").is_file()


@needs_root
@pytest.mark.parametrize("plant", ["package file", "venv folder", "interpreter"])
def test_a_unit_pointed_at_a_venv_nobody_can_change_is_refused_and_nothing_written(sysroot, tmp_path, plant):
    venv = tmp_path / "home/user/hc"
    site = _venv(venv)
    victim = {"package file": site / "hostctl/cli.py", "venv folder": venv / "lib",
              "interpreter": venv / "bin/python"}[plant]
    if plant == "interpreter":  # the user's own python in place of the link
        victim.unlink()
        shutil.copy(Path(sys.executable).resolve(), victim)
    os.lchown(victim, NOBODY, NOBODY)
    _point_units_at(sysroot, venv)
    report, _ = _provision("system")
    with pytest.raises(RefusedError) as exc:
        report.raise_for_error()
    assert exc.value.exit_code == EXIT_REFUSED
    assert any(d.startswith(f"{victim} (") and d.endswith("owned by nobody (uid 65534)") for d in exc.value.details)
    assert not (sysroot / "etc").exists()


@needs_root
def test_an_editable_install_of_a_checkout_nobody_owns_is_refused(sysroot, tmp_path):
    venv = tmp_path / "hc"
    site = _venv(venv)
    shutil.rmtree(site / "hostctl")
    src = tmp_path / "home/user/hostctl/hostctl"
    src.mkdir(parents=True)
    (src / "cli.py").write_text("def main():\n    return 0\n")
    os.chown(src / "cli.py", NOBODY, NOBODY)
    # what setuptools' editable install writes: a .pth that imports a finder holding MAPPING
    (site / "__editable__.hostctl-0.1.0.pth").write_text("import __editable___hostctl_0_1_0_finder; "
                                                          "__editable___hostctl_0_1_0_finder.install()\n")
    (site / "__editable___hostctl_0_1_0_finder.py").write_text(f"MAPPING: dict[str, str] = {{'hostctl': '{src}'}}\n")
    _point_units_at(sysroot, venv)
    found = boot_code.writable_by_others(read_exec_chain(paths.INSTALLED_HOSTCTL))
    assert [(w.path, w.role) for w in found] == [(str(src / "cli.py"), EDITABLE)]
    report, _ = _provision("system")
    with pytest.raises(RefusedError):
        report.raise_for_error()
    assert not (sysroot / "etc").exists()


@needs_root
def test_a_pth_path_into_a_folder_nobody_owns_is_refused(sysroot, tmp_path):
    site = _venv(tmp_path / "hc")
    shutil.rmtree(site / "hostctl")
    legacy = tmp_path / "home/user/src"  # `setup.py develop` style: the checkout itself on sys.path
    (legacy / "hostctl").mkdir(parents=True)
    os.chown(legacy, NOBODY, NOBODY)
    (site / "hostctl.pth").write_text(f"{legacy}\n")
    _point_units_at(sysroot, tmp_path / "hc")
    found = boot_code.writable_by_others(read_exec_chain(paths.INSTALLED_HOSTCTL))
    assert str(legacy) in [w.path for w in found]
    # a root-owned folder on sys.path holding a module of theirs (it would shadow typer)
    os.chown(legacy, 0, 0)
    (legacy / "typer.py").write_text("")
    os.chown(legacy / "typer.py", NOBODY, NOBODY)
    found = boot_code.writable_by_others(read_exec_chain(paths.INSTALLED_HOSTCTL))
    assert [w.path for w in found] == [str(legacy / "typer.py")]


@needs_root
def test_the_shebang_interpreter_is_followed(sysroot, tmp_path):
    venv = tmp_path / "hc"
    _venv(venv)
    _point_units_at(sysroot, venv)
    chain_ = read_exec_chain(paths.INSTALLED_HOSTCTL)
    roles = {e.path: e.role for e in chain_.entries}
    # bin/python is a link out of the venv: its target is read as the interpreter, and so is the
    # folder it lies in, up to /
    real = Path(sys.executable).resolve()
    assert roles[str(venv / "bin/python")] == roles[str(real)] == roles[str(real.parent)] == INTERPRETER


@needs_root
def test_a_link_in_the_package_to_a_file_nobody_owns_is_followed(sysroot, tmp_path):
    site = _venv(tmp_path / "hc")  # as setuptools' strict editable mode leaves it: a farm of links
    theirs = tmp_path / "home/user/cli.py"
    theirs.parent.mkdir(parents=True)
    theirs.write_text("def main():\n    return 0\n")
    os.chown(theirs, NOBODY, NOBODY)
    (site / "hostctl/cli.py").unlink()
    os.symlink(theirs, site / "hostctl/cli.py")
    _point_units_at(sysroot, tmp_path / "hc")
    found = boot_code.writable_by_others(read_exec_chain(paths.INSTALLED_HOSTCTL))
    assert str(theirs) in [w.path for w in found]


def _grant_write_by_acl(path: Path, uid: int) -> None:
    """`setfacl -m u:UID:rw PATH`, written as the kernel's xattr (no acl tools needed)."""
    import struct

    undefined = 0xFFFFFFFF  # the id field of entries that name no one
    entries = [(0x01, 6, undefined), (0x02, 6, uid), (0x04, 4, undefined), (0x10, 6, undefined), (0x20, 4, undefined)]
    os.setxattr(path, "system.posix_acl_access",
                struct.pack("<I", 2) + b"".join(struct.pack("<HHI", *e) for e in entries))


@needs_root
def test_a_package_file_an_acl_lets_nobody_write_is_refused(sysroot, tmp_path):
    site = _venv(tmp_path / "hc")
    _point_units_at(sysroot, tmp_path / "hc")
    victim = site / "hostctl/cli.py"  # root:root, but the ACL grants nobody write (mode shows 0664)
    try:
        _grant_write_by_acl(victim, NOBODY)
    except OSError as exc:
        missing(f"the temporary folder's filesystem takes no ACL: {exc}")
    found = boot_code.writable_by_others(read_exec_chain(paths.INSTALLED_HOSTCTL))
    assert [w.path for w in found] == [str(victim)] and "access ACL" in found[0].who


@needs_root
def test_env_with_options_in_the_shebang_is_refused_as_unknown(sysroot, tmp_path):
    _venv(tmp_path / "hc")
    (tmp_path / "hc/bin/hostctl").write_text("#!/usr/bin/env -S python3 -E\nimport hostctl\n")
    _point_units_at(sysroot, tmp_path / "hc")
    err = boot_code.problem(read_exec_chain(paths.INSTALLED_HOSTCTL))
    assert isinstance(err, RefusedError) and "not known before it runs" in err.message


@needs_root
def test_a_venv_with_system_site_packages_reads_the_base_site_too(sysroot, tmp_path):
    _venv(tmp_path / "hc")
    cfg = tmp_path / "hc/pyvenv.cfg"
    cfg.write_text(cfg.read_text() + "include-system-site-packages = true\n")
    _point_units_at(sysroot, tmp_path / "hc")
    base = Path(sys.executable).resolve().parent.parent
    sites = {e.path for e in read_exec_chain(paths.INSTALLED_HOSTCTL).entries if e.role == SITE}
    assert any(p.startswith(f"{base}/lib/python3") and "-packages" in p for p in sites), sorted(sites)[:5]


@needs_root
def test_the_gpu_part_writes_no_power_unit_behind_a_hostctl_nobody_can_change(sysroot, tmp_path):
    site = _venv(tmp_path / "hc")
    os.chown(site / "hostctl/cli.py", NOBODY, NOBODY)
    _point_units_at(sysroot, tmp_path / "hc")
    report, _ = _provision("gpu", profile="pro6000x2-desktop")
    with pytest.raises(RefusedError):
        report.raise_for_error()
    assert not (sysroot / "etc/systemd/system/hostctl-power.service").exists()


@needs_root
def test_doctor_reports_a_boot_hostctl_nobody_can_change(sysroot, tmp_path):
    site = _venv(tmp_path / "hc")
    _point_units_at(sysroot, tmp_path / "hc")
    check = next(c for c in all_checks() if c.id == "system.boot_code")
    _, facts = examples.load("demo-cpu")

    def status():
        ctx = CheckContext(facts=facts, boot_code=read_exec_chain(paths.INSTALLED_HOSTCTL))
        return run_checks(ctx, [check])[0].result

    assert status().status == "pass"
    os.chown(site / "hostctl/cli.py", NOBODY, NOBODY)
    r = status()
    assert r.status == "fail" and f"{site / 'hostctl/cli.py'}" in r.evidence.observed and "nobody" in r.evidence.observed
    assert "install.sh" in r.fix
    assert run_checks(CheckContext(facts=facts), [check])[0].result.status == "skip"  # a snapshot: not read


@needs_root
def test_render_warns_before_units_that_would_run_code_nobody_can_change(sysroot, tmp_path, capsys):
    from hostctl import cli

    site = _venv(tmp_path / "hc")
    _point_units_at(sysroot, tmp_path / "hc")
    argv = ["render", "--config", str(paths.hosts_dir() / "demo-cpu.toml"), "--out", str(tmp_path / "out")]
    assert cli.main(argv) == 0
    assert "can be changed by someone other than root" not in capsys.readouterr().err
    os.chown(site / "hostctl/cli.py", NOBODY, NOBODY)
    assert cli.main(argv) == 0  # render installs nothing: it says so, and still writes the project
    err = capsys.readouterr().err
    assert f"{site / 'hostctl/cli.py'}" in err and "owned by nobody (uid 65534)" in err and "install.sh" in err


def _base_python(top: Path) -> Path:
    """A base Python as uv/pyenv leave one in a user's home: bin/python3.11 (this machine's
    binary, copied) and lib/python3.11 with the landmark os.py and a sitecustomize.py."""
    (top / "bin").mkdir(parents=True)
    shutil.copy(Path(sys.executable).resolve(), top / "bin/python3.11")
    lib = top / "lib/python3.11"
    (lib / "encodings").mkdir(parents=True)
    for name in ("os.py", "site.py", "encodings/__init__.py", "sitecustomize.py"):
        (lib / name).write_text("")
    return lib


def _copies_venv(top: Path, base: Path) -> Path:
    """`base/bin/python3.11 -m venv --copies top`: the venv's python is a copy, so only
    pyvenv.cfg's home says which standard library it runs."""
    site = _venv(top)
    (top / "bin/python").unlink()
    shutil.copy(base / "bin/python3.11", top / "bin/python")
    (top / "pyvenv.cfg").write_text(f"home = {base}/bin\ninclude-system-site-packages = false\n"
                                    f"executable = {base}/bin/python3.11\n")
    return site


@needs_root
def test_a_copies_venv_on_a_base_python_nobody_owns_is_refused_and_nothing_written(sysroot, tmp_path):
    base = tmp_path / "home/user/.pyenv/3.11"
    lib = _base_python(base)
    for path in (base, *base.rglob("*")):
        os.lchown(path, NOBODY, NOBODY)
    _copies_venv(tmp_path / "opt/hostctl", base)  # root's own venv, root-owned all through
    _point_units_at(sysroot, tmp_path / "opt/hostctl")
    report, _ = _provision("system")
    with pytest.raises(RefusedError) as exc:
        report.raise_for_error()
    assert exc.value.exit_code == EXIT_REFUSED
    assert any(d.startswith(f"{base} (") and d.endswith("owned by nobody (uid 65534)") for d in exc.value.details)
    found = {w.path for w in boot_code.writable_by_others(read_exec_chain(paths.INSTALLED_HOSTCTL))}
    assert {str(base / "bin/python3.11"), str(lib / "sitecustomize.py")} <= found
    assert not (sysroot / "etc").exists()


@needs_root
def test_a_module_nobody_owns_anywhere_in_a_root_owned_stdlib_is_refused(sysroot, tmp_path):
    base = tmp_path / "usr"
    lib = _base_python(base)
    _copies_venv(tmp_path / "opt/hostctl", base)
    _point_units_at(sysroot, tmp_path / "opt/hostctl")
    assert boot_code.problem(read_exec_chain(paths.INSTALLED_HOSTCTL)) is None  # root's all through
    (base / "lib/libpython3.11.so.1.0").write_text("")  # what a shared build loads (RUNPATH prefix/lib)
    for name in ("sitecustomize.py", "encodings/__init__.py", "../libpython3.11.so.1.0"):
        os.chown(lib / name, NOBODY, NOBODY)
    found = boot_code.writable_by_others(read_exec_chain(paths.INSTALLED_HOSTCTL))
    assert sorted((w.path, w.role) for w in found) == [(str(base / "lib/libpython3.11.so.1.0"), STDLIB),
                                                       (str(lib / "encodings/__init__.py"), STDLIB),
                                                       (str(lib / "sitecustomize.py"), STDLIB)]


@needs_root
def test_a_pth_import_line_is_refused_naming_the_file_unless_setuptools_or_virtualenv_wrote_it(sysroot, tmp_path):
    site = _venv(tmp_path / "hc")
    _point_units_at(sysroot, tmp_path / "hc")
    # the lines setuptools and virtualenv write, with their modules in the site directory: known
    (site / "_distutils_hack").mkdir()
    (site / "_distutils_hack/__init__.py").write_text("")
    (site / "distutils-precedence.pth").write_text(
        "import os; var = 'SETUPTOOLS_USE_DISTUTILS'; enabled = os.environ.get(var, 'local') == 'local'; "
        "enabled and __import__('_distutils_hack').add_shim(); \n")
    (site / "_virtualenv.py").write_text("")
    (site / "_virtualenv.pth").write_text("import _virtualenv\n")
    assert boot_code.problem(read_exec_chain(paths.INSTALLED_HOSTCTL)) is None
    # a root-owned .pth whose import line puts nobody's folder first on sys.path
    theirs = tmp_path / "home/user/shared"
    (theirs / "hostctl").mkdir(parents=True)
    (theirs / "hostctl/cli.py").write_text("def main():\n    return 0\n")
    for path in (theirs, *theirs.rglob("*")):
        os.chown(path, NOBODY, NOBODY)
    (site / "zz-devtools.pth").write_text(f"import sys; sys.path.insert(0, {str(theirs)!r})\n")
    report, _ = _provision("system")
    with pytest.raises(RefusedError) as exc:
        report.raise_for_error()
    assert exc.value.exit_code == EXIT_REFUSED and str(site / "zz-devtools.pth") in exc.value.message
    assert not (sysroot / "etc").exists()


@needs_root
def test_a_module_nobody_owns_beside_the_real_script_is_refused(sysroot, tmp_path):
    _venv(tmp_path / "hc")
    scripts = tmp_path / "scripts"  # root's folder, where the console script really lies
    scripts.mkdir()
    (tmp_path / "hc/bin/hostctl").rename(scripts / "hostctl")
    os.symlink(scripts / "hostctl", tmp_path / "hc/bin/hostctl")
    _point_units_at(sysroot, tmp_path / "hc")
    assert boot_code.problem(read_exec_chain(paths.INSTALLED_HOSTCTL)) is None
    (scripts / "typer.py").write_text("")  # first on sys.path: it shadows the real typer
    os.chown(scripts / "typer.py", NOBODY, NOBODY)
    found = boot_code.writable_by_others(read_exec_chain(paths.INSTALLED_HOSTCTL))
    assert [w.path for w in found] == [str(scripts / "typer.py")]
