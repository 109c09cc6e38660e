"""The install route for a real host (README "On a real host"), from a fresh clone as a new user
would make it: the user's checkout (owned by `nobody` here, uid 65534), `sudo ./install.sh`, then
root's `hostctl provision --only system` (dry run, then the real run into a temporary sysroot, with
systemctl working offline on it). And the attack it closes: the same user's own venv with an
editable install of that checkout, behind the units' /usr/local/bin/hostctl, is refused by root's
provision (exit 3, naming a file and its owner), nothing is written and none of the user's code runs."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import ROOT, needs_root
from need import needs

# The user's Python: the system's (root's PATH may lead to a Python under /root, closed to others).
USER_PYTHON = "/usr/bin/python3"
pytestmark = [pytest.mark.system, needs_root,
              needs(shutil.which("systemctl") is not None, "systemctl not installed (apt-get install systemd)"),
              needs(shutil.which("git") is not None and shutil.which("setpriv") is not None, "git and setpriv needed"),
              needs(os.access(USER_PYTHON, os.X_OK), f"{USER_PYTHON} missing (apt-get install python3-venv)")]

NOBODY = 65534
AS_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
UNIT = "etc/systemd/system/hostctl-runtime.service"


def _run(argv, *, env=None, timeout=600, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, **kw)


@pytest.fixture(scope="module")
def base():
    # Not pytest's tmp_path: its parents are root's 0700 folders, which nobody could not enter.
    top = Path(tempfile.mkdtemp(prefix="hostctl-install-", dir="/tmp"))
    top.chmod(0o755)
    yield top
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture(scope="module")
def checkout(base) -> Path:
    """A fresh clone of this checkout's HEAD, owned by the user (nobody) as their own clone would be."""
    src = base / "home/user/hostctl"
    src.parent.mkdir(parents=True)
    head = _run(["git", "-C", ROOT, "rev-parse", "HEAD"]).stdout.strip()
    assert _run(["git", "clone", "-q", "--no-hardlinks", ROOT, src]).returncode == 0
    assert _run(["git", "-C", src, "checkout", "-q", head]).returncode == 0
    for d in (base / "home/user", base / "home"):
        os.chown(d, NOBODY, NOBODY)
    _run(["chown", "-R", f"{NOBODY}:{NOBODY}", src])
    return src


@pytest.fixture(scope="module")
def installed(base, checkout) -> Path:
    """`sudo ./install.sh`, with its two places moved into the test's folder: the link in a sysroot."""
    env = {"HOSTCTL_PREFIX": str(base / "opt/hostctl"), "HOSTCTL_BIN_DIR": str(base / "sys/usr/local/bin")}
    res = _run(["sh", checkout / "install.sh"], env=env)
    assert res.returncode == 0, res.stderr[-3000:]
    return base / "sys/usr/local/bin/hostctl"


def _not_roots_alone(top: Path) -> list[str]:
    bad = []
    for dirpath, dirnames, filenames in os.walk(top):
        for name in (".", *dirnames, *filenames):
            st = os.lstat(os.path.join(dirpath, name))
            if st.st_uid != 0 or (not stat.S_ISLNK(st.st_mode) and st.st_mode & 0o022):
                bad.append(f"{dirpath}/{name}")
    return bad


def test_install_route_from_a_fresh_clone(base, checkout, installed):
    prefix = base / "opt/hostctl"
    assert os.readlink(installed) == str(prefix / "bin/hostctl")
    assert _not_roots_alone(prefix) == []  # root's alone, the whole venv
    assert not [p for p in checkout.rglob("*") if p.lstat().st_uid == 0]  # nothing of root's left in the user's tree
    as_user = _run([*AS_NOBODY, installed, "--version"])  # the user runs the same hostctl
    assert as_user.returncode == 0 and as_user.stdout.startswith("hostctl "), as_user.stderr

    sysroot, profile = base / "sys", prefix / "share/hostctl/runtime/hosts/demo-cpu.toml"
    env = {"HOSTCTL_SYSROOT": str(sysroot)}
    dry = _run([installed, "provision", "--only", "system", "--dry-run", "--config", profile], env=env, cwd=base)
    assert dry.returncode == 0, dry.stderr
    assert f"would: create /{UNIT}" in dry.stdout and not (sysroot / "etc").exists()

    real = _run([installed, "provision", "--only", "system", "--config", profile], env=env, cwd=base)
    assert real.returncode == 0, real.stderr
    unit = (sysroot / UNIT).read_text()
    assert "ExecStart=/usr/local/bin/hostctl " in unit
    enabled = _run(["systemctl", f"--root={sysroot}", "is-enabled", "hostctl-runtime.service"])
    assert enabled.stdout.strip() == "enabled"

    doctor = _run([installed, "doctor", "--json", "--config", profile], env=env, cwd=base)
    check = next(c for c in json.loads(doctor.stdout)["checks"] if c["id"] == "system.boot_code")
    assert check["status"] == "pass", check


def test_install_refuses_a_normal_account(base, checkout):
    res = _run([*AS_NOBODY, "sh", checkout / "install.sh"], env={"HOSTCTL_PREFIX": str(base / "home/user/opt")})
    assert res.returncode == 3 and "expected to run as root, found uid 65534" in res.stderr
    assert not (base / "home/user/opt").exists()


def test_units_pointed_at_the_users_editable_venv_are_refused(base, checkout, installed):
    """The README's old route (the user's venv, `pip install -e .`), made by the user, behind the
    units' path: root's provision refuses it and runs none of it."""
    venv, home = base / "home/user/hc", base / "home/user"
    user_env = {"HOME": str(home), "PIP_NO_CACHE_DIR": "1"}
    made = _run([*AS_NOBODY, USER_PYTHON, "-m", "venv", venv], env=user_env)
    assert made.returncode == 0, made.stderr
    res = _run([*AS_NOBODY, venv / "bin/python", "-m", "pip", "install", "-q", "-e", checkout], env=user_env,
               cwd=home)
    assert res.returncode == 0, res.stderr[-3000:]
    marker = base / "ran-as-root"
    init = checkout / "hostctl/__init__.py"  # the user's edit: code that proves it ran, and as whom
    init.write_text(init.read_text() + f"\nimport os\nif os.geteuid() == 0:\n    open({str(marker)!r}, 'w').close()\n")

    sysroot = base / "attack"
    (sysroot / "usr/local/bin").mkdir(parents=True)
    os.symlink(venv / "bin/hostctl", sysroot / "usr/local/bin/hostctl")
    profile = base / "opt/hostctl/share/hostctl/runtime/hosts/demo-cpu.toml"
    for dry in (["--dry-run"], []):
        res = _run([installed, "provision", "--only", "system", *dry, "--config", profile],
                   env={"HOSTCTL_SYSROOT": str(sysroot)}, cwd=base)
        assert res.returncode == 3, res.stdout + res.stderr
        assert "owned by nobody (uid 65534)" in res.stderr and (str(venv) in res.stderr or str(checkout) in res.stderr)
        assert "install.sh" in res.stderr and "ln -s" not in res.stderr
    assert not (sysroot / "etc").exists() and not marker.exists()
