"""Each member's systemd unit (hostctl-<cluster>-<member>.service), rendered for every bundled
cluster profile: its start and stop are that member's `up`/`down --cluster ABS_PATH --member
NAME` (a replica's `up --foreground`, supervised), ordered after docker and the network, and
`systemd-analyze verify` accepts it."""

import shlex
import shutil
import subprocess

import pytest

from conftest import needs_systemd_analyze
from hostctl import cli
from hostctl.cluster.plan import build_cluster_plan, load_members
from hostctl.cluster.profile import load_cluster
from hostctl.cluster.render import member_unit
from hostctl.errors import InputError
from test_cluster import CLUSTERS, replicas, write_cluster

EXAMPLES = sorted(p.name for p in CLUSTERS.glob("*.toml") if "[[hosts]]" in p.read_text())


def units(path, hostctl_bin):
    cluster = load_cluster(path)
    cp = build_cluster_plan(cluster, load_members(cluster, path), lambda m: (None, "no facts"))
    return cp, [member_unit(cp, mp, path, hostctl_bin) for mp in cp.members]


def keys(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            k, _, v = line.partition("=")
            out.setdefault(k, []).append(v)
    return out


def test_the_examples_are_found():
    assert {"demo-replicas.toml", "demo-pp2.toml", "pro6000x2-pair.toml"} <= set(EXAMPLES)


@pytest.mark.parametrize("name", EXAMPLES)
def test_each_member_starts_and_stops_its_own_part(name):
    path = CLUSTERS / name
    cp, rendered = units(path, "/usr/local/bin/hostctl")
    assert [n for n, _ in rendered] == [f"hostctl-{cp.cluster.name}-{mp.member.name}.service" for mp in cp.members]
    for mp, (_, text) in zip(cp.members, rendered):
        k = keys(text)
        me = ["--cluster", str(path), "--member", mp.member.name]
        replica = mp.member.role == "replica"
        assert shlex.split(k["ExecStart"][0]) == ["/usr/local/bin/hostctl", "up", *me, *(["--foreground"] * replica)]
        assert shlex.split(k["ExecStop"][0]) == ["/usr/local/bin/hostctl", "down", *me]
        assert k["Requires"] == ["docker.service"] and k["After"] == ["docker.service network-online.target"]
        if replica:
            # supervised as one host's unit: READY=1 after its gate and join, restarted after a death
            assert k["Type"] == ["notify"] and k["Restart"] == ["on-failure"] and k["StartLimitBurst"] == ["3"]
            assert int(k["WatchdogSec"][0]) > mp.config.recipe.hang_timeout_s
        else:
            # not supervised after ready: the unit stays active while the containers run
            assert k["Type"] == ["oneshot"] and k["RemainAfterExit"] == ["yes"] and "Restart" not in k
        # a follower's order on its leader is its own wait for the master port, not a unit's
        assert not any("hostctl-" in v for v in k["After"] + k.get("Requires", []) + k.get("Wants", []))
        start = int(k["TimeoutStartSec"][0])
        if mp.config is not None:
            assert start > mp.config.recipe.load_timeout_s  # the model load and the gate fit


@needs_systemd_analyze
@pytest.mark.parametrize("name", EXAMPLES)
def test_systemd_accepts_every_member_unit(name, tmp_path):
    hostctl = shutil.which("hostctl") or shutil.which("python3")
    _, rendered = units(CLUSTERS / name, hostctl)
    for file, text in rendered:
        (tmp_path / file).write_text(text)
    res = subprocess.run(["systemd-analyze", "verify", "--man=no", *sorted(str(p) for p in tmp_path.iterdir())],
                         capture_output=True, text=True)
    assert res.returncode == 0 and res.stderr.strip() == "", res.stderr


def test_a_path_with_spaces_and_percent_is_quoted(tmp_path):
    odd = tmp_path / "my 100% cluster"
    odd.mkdir()
    path = write_cluster(odd, replicas(hosts=[h for h in replicas()["hosts"]]))
    _, rendered = units(path, "/opt/host ctl/hostctl")
    text = rendered[0][1]
    assert shlex.split(keys(text)["ExecStart"][0].replace("%%", "%")) == [
        "/opt/host ctl/hostctl", "up", "--cluster", str(path), "--member", "gw"]
    assert "%%" in text  # systemd's specifier sign, doubled


def test_a_path_with_a_line_break_is_refused(tmp_path):
    path = write_cluster(tmp_path, replicas())
    cluster = load_cluster(path)
    cp = build_cluster_plan(cluster, load_members(cluster, path), lambda m: (None, "no facts"))
    with pytest.raises(InputError):
        member_unit(cp, cp.members[0], tmp_path / "a\nExecStartPre=/bin/evil", "/usr/local/bin/hostctl")


def test_render_cluster_writes_the_units_with_the_absolute_profile_path(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("hostctl.service.compose.compose_available",
                        lambda: type("R", (), {"ok": False, "why": lambda self: "not in unit tests"})())
    monkeypatch.chdir(tmp_path)
    write_cluster(tmp_path, replicas())
    code = cli.main(["render", "--cluster", "cluster.toml", "--out", "out", "--hostctl-bin", "/opt/hc/bin/hostctl"])
    assert code == 0, capsys.readouterr().err
    for m in ("gw", "r1", "r2"):
        text = (tmp_path / "out" / m / f"hostctl-pair-{m}.service").read_text()
        assert f"ExecStart=/opt/hc/bin/hostctl up --cluster {tmp_path / 'cluster.toml'} --member {m}" in text
        assert f"ExecStop=/opt/hc/bin/hostctl down --cluster {tmp_path / 'cluster.toml'} --member {m}\n" in text


def test_only_a_replica_is_supervised(tmp_path, capsys):
    # a router, leader or follower started again alone is refused before anything starts
    code = cli.main(["up", "--cluster", str(write_cluster(tmp_path, replicas())), "--member", "gw", "--foreground"])
    assert code == 2 and "--foreground: a router is not supervised; only a replica is" in capsys.readouterr().err


def test_a_leader_is_not_supervised(tmp_path, capsys):
    from test_cluster import multinode

    code = cli.main(["up", "--cluster", str(write_cluster(tmp_path, multinode())), "--member", "lead", "--foreground"])
    assert code == 2 and "--foreground: a leader is not supervised" in capsys.readouterr().err
