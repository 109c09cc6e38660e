"""SSH targets from a profile or the command line, attacked as another local user would: a
planted ssh config with a ProxyCommand (owned by `nobody`), an option smuggled into the user or
the host in every position where an `@` splits them, and a password in the URL. Judged by
effect, with the real ssh: no marker file from a ProxyCommand or from an ssh run at all, no
password in any output. Nothing here reaches a network: every target is 127.0.0.1 port 1 (or a
name ssh never gets to resolve)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hostctl import sshtarget
from hostctl.errors import InputError, RefusedError
from hostile_inputs import SSH_BENIGN, SSH_HOSTILE
from need import need
from test_cluster import multinode, write_cluster

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "runtime" / "hosts" / "demo-cpu.toml"
NOBODY = 65534


@pytest.fixture
def ssh_bin():
    found = shutil.which("ssh")
    need(found is not None, "the ssh client (openssh-client) is not installed")
    need(os.geteuid() == 0, "planting files owned by nobody needs root")
    return found


def hostctl(*args: str, cwd: Path, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hostctl", *args], cwd=cwd, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, timeout=120, env={**os.environ, **(env or {}),
                                                                      "PYTHONPATH": str(ROOT)})


def planted_config(d: Path, marker: Path, *, owner: int = NOBODY, mode: int = 0o644) -> Path:
    """An ssh config whose ProxyCommand leaves `marker` behind if ssh ever reads it."""
    cfg = d / "ssh_config"
    cfg.write_text(f"Host *\n  ProxyCommand touch {marker}\n  BatchMode yes\n")
    os.chown(cfg, owner, owner)
    os.chmod(cfg, mode)
    return cfg


@pytest.fixture
def attacker_dir(tmp_path):
    """A folder like /tmp: root's, sticky, every user may add files (the attacker's go there)."""
    d = tmp_path / "shared"
    d.mkdir()
    d.chmod(0o1777)
    return d


@pytest.fixture
def nobodys_dir(attacker_dir):
    """A folder of the attacker's own (nobody's), in the shared one."""
    d = attacker_dir / "nobody"
    d.mkdir()
    os.chown(d, NOBODY, NOBODY)
    return d


# ---------------------------------------------------------------- the parser


@pytest.mark.parametrize("spec", SSH_HOSTILE)
def test_every_hostile_target_is_refused_naming_the_field(spec):
    with pytest.raises(InputError) as exc:
        sshtarget.parse(spec, "hosts[1].ssh")
    assert exc.value.exit_code == 2 and exc.value.message.startswith("hosts[1].ssh: ")
    assert "PASSWORD" not in exc.value.message + (exc.value.fix or "")


@pytest.mark.parametrize("spec", SSH_BENIGN)
def test_benign_targets_parse_and_come_back_as_written(spec):
    t = sshtarget.parse(spec, "--host")
    assert t.display() == spec.rstrip("/")


def test_the_argv_puts_user_port_and_host_where_ssh_reads_no_option():
    t = sshtarget.parse("ssh://ops@gpu-box:2222", "--host")
    argv = sshtarget.ssh_argv(t, "cat -- /etc/hostname", control_path="/run/x/master")
    assert argv[-7:] == ["-l", "ops", "-p", "2222", "--", "gpu-box", "cat -- /etc/hostname"]


# ---------------------------------------------------------------- options smuggled in the target

# On main these passed the check (urllib and testinfra split them differently, or testinfra
# percent-decoded a '-' back) and ssh ran with the text in an option's place.
SMUGGLED = ["ssh://u@-oProxyCommand=id@127.0.0.1", "ssh://u@%2doProxyCommand=id", "ssh://%2doUser=x@127.0.0.1",
            "ssh://a@b@127.0.0.1:1"]


@pytest.mark.parametrize("spec", SMUGGLED)
def test_an_option_in_the_user_or_host_is_refused_before_any_ssh_runs(spec, ssh_bin, tmp_path):
    # A wrapper first on PATH leaves a marker whenever ssh is started at all, then runs the real one.
    wrap = tmp_path / "bin"
    wrap.mkdir()
    ran = tmp_path / "ssh-ran"
    (wrap / "ssh").write_text(f"#!/bin/sh\ntouch {ran}\nexec {ssh_bin} \"$@\"\n")
    (wrap / "ssh").chmod(0o755)
    p = hostctl("verify", "--config", str(DEMO), "--host", spec, cwd=tmp_path,
                env={"PATH": f"{wrap}:{os.environ['PATH']}"})
    assert p.returncode == 2, p.stdout + p.stderr
    assert "--host" in p.stderr
    assert not ran.exists(), "ssh was started"


# ---------------------------------------------------------------- a planted ssh config


def test_verify_never_reads_an_ssh_config_from_the_url(ssh_bin, attacker_dir, tmp_path):
    marker = tmp_path / "MARKER"
    cfg = planted_config(attacker_dir, marker)
    p = hostctl("verify", "--config", str(DEMO), "--host", f"ssh://root@127.0.0.1:1?ssh_config={cfg}", cwd=tmp_path)
    assert not marker.exists(), "root ran the ProxyCommand of nobody's ssh config"
    assert p.returncode == 2 and "--host" in p.stderr and "query" in p.stderr, p.stderr


@pytest.mark.parametrize("where", ["file", "folder", "world-writable"])
def test_verify_refuses_an_ssh_config_another_user_could_write(where, ssh_bin, attacker_dir, nobodys_dir, tmp_path):
    marker = tmp_path / "MARKER"
    if where == "file":  # nobody's file in the shared folder
        cfg = planted_config(attacker_dir, marker)
        named, owner = cfg, "nobody (uid 65534)"
    elif where == "folder":  # root's file in nobody's folder: nobody can swap it for another
        cfg = planted_config(nobodys_dir, marker, owner=0)
        named, owner = nobodys_dir, "nobody (uid 65534)"
    else:  # root's file, but every user may write it
        (tmp_path / "own").mkdir()
        cfg = planted_config(tmp_path / "own", marker, owner=0, mode=0o666)
        named, owner = cfg, "-rw-rw-rw-"
    p = hostctl("verify", "--config", str(DEMO), "--host", "ssh://root@127.0.0.1:1", "--ssh-config", str(cfg),
                cwd=tmp_path)
    assert not marker.exists(), "root ran the ProxyCommand of an ssh config another user could write"
    assert p.returncode == 3, p.stdout + p.stderr
    assert f"--ssh-config: {named}" in p.stderr and owner in p.stderr, p.stderr


def test_an_ssh_config_of_root_is_used(ssh_bin, tmp_path):
    """The positive control of the tests above: the marker does appear when the config is trusted."""
    (tmp_path / "own").mkdir(mode=0o700)
    marker = tmp_path / "MARKER"
    cfg = planted_config(tmp_path / "own", marker, owner=0, mode=0o600)
    p = hostctl("verify", "--config", str(DEMO), "--host", "ssh://root@127.0.0.1:1", "--ssh-config", str(cfg),
                cwd=tmp_path)
    assert p.returncode == 1 and "cannot reach ssh://root@127.0.0.1:1" in p.stderr, p.stderr
    assert marker.exists()


def doctor_cluster(tmp_path: Path, **follower) -> subprocess.CompletedProcess:
    doc = multinode(api_key_env="HC_TEST_KEY")  # a key: the API is reachable beyond this machine
    doc["hosts"][1].update(address="10.0.0.2", **follower)
    return hostctl("doctor", "--cluster", str(write_cluster(tmp_path, doc)), cwd=tmp_path,
                   env={"HC_TEST_KEY": "a-key-for-tests"})


def test_doctor_cluster_never_reads_an_ssh_config_from_the_url(ssh_bin, attacker_dir, tmp_path):
    marker = tmp_path / "MARKER"
    cfg = planted_config(attacker_dir, marker)
    p = doctor_cluster(tmp_path, ssh=f"ssh://root@127.0.0.1:1?ssh_config={cfg}")
    assert not marker.exists(), "doctor --cluster ran the ProxyCommand of nobody's ssh config"
    assert p.returncode == 2 and "hosts[1].ssh" in p.stderr, p.stderr


def test_doctor_cluster_refuses_a_members_ssh_config_owned_by_another_user(ssh_bin, attacker_dir, tmp_path):
    marker = tmp_path / "MARKER"
    cfg = planted_config(attacker_dir, marker)
    p = doctor_cluster(tmp_path, ssh="ssh://root@127.0.0.1:1", ssh_config=str(cfg))
    assert not marker.exists(), "doctor --cluster ran the ProxyCommand of nobody's ssh config"
    assert p.returncode == 3 and str(cfg) in p.stderr and "nobody" in p.stderr and "follow.ssh_config" in p.stderr, \
        p.stdout + p.stderr


def test_trusted_config_names_the_path_and_owner(attacker_dir, tmp_path):
    cfg = planted_config(attacker_dir, tmp_path / "m")
    with pytest.raises(RefusedError) as exc:
        sshtarget.trusted_config(str(cfg), "--ssh-config")
    assert exc.value.exit_code == 3 and str(cfg) in exc.value.message and "nobody (uid 65534)" in exc.value.message


# ---------------------------------------------------------------- no password shown


@pytest.mark.parametrize("args", [["verify", "--json"], ["verify"]])
def test_a_password_in_the_url_is_never_shown(args, ssh_bin, tmp_path):
    p = hostctl(*args, "--config", str(DEMO), "--host", "ssh://admin:PASSWORD@127.0.0.1:1", cwd=tmp_path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert "PASSWORD" not in p.stdout + p.stderr
    assert "password" in p.stderr  # says why, without it
