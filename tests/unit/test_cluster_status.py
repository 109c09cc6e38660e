"""`status --cluster`'s pure part: vllm-router's /workers read as backends with their health, the
hostctl.cluster-status/v1 document and its verdict from readings, which members are read here.
The live replica test (tests/system/test_cluster_live.py) reads the same from real containers."""

from pathlib import Path

from hostctl import cli
from hostctl.cluster.plan import build_cluster_plan, load_members
from hostctl.cluster.profile import load_cluster
from hostctl.cluster.run import Backend, parse_backends
from hostctl.cluster.status import SCHEMA, Reading, document, here, text
from test_cluster import CLUSTERS, multinode, replicas, write_cluster

# GET /workers of vllm-router 0.1.17 (image hostctl/vllm-router), measured here with one worker
# killed: the router keeps listing it and only marks it unhealthy.
WORKERS = {"workers": [
    {"url": "http://127.0.0.1:8201", "model_id": "unknown", "worker_type": "regular", "is_healthy": True, "load": 0},
    {"url": "http://127.0.0.1:8202", "model_id": "unknown", "worker_type": "regular", "is_healthy": False, "load": 0}],
    "total": 2, "stats": {"regular_count": 2}}


def plan_of(path: Path):
    cluster = load_cluster(path)
    return build_cluster_plan(cluster, load_members(cluster, path), lambda m: (None, "no facts"))


def test_workers_read_as_backends_with_their_health():
    assert parse_backends(WORKERS) == [Backend(url="http://127.0.0.1:8201", healthy=True), Backend(url="http://127.0.0.1:8202", healthy=False)]
    # an unknown shape (another router version, an error page) reads as none, not as a crash
    for doc in ({"urls": ["http://x:1"]}, [], None, {"workers": [{"is_healthy": True}, "x"]}):
        assert parse_backends(doc) == []
    # health must be said: a row without is_healthy is not counted healthy
    assert parse_backends({"workers": [{"url": "http://a:1"}]}) == [Backend(url="http://a:1", healthy=False)]


def test_a_dead_replica_makes_the_cluster_not_ok(tmp_path):
    cp = plan_of(write_cluster(tmp_path, replicas()))
    running = Reading(reached=True, state="running", healthy=True)
    readings = {"gw": Reading(reached=True, state="running", healthy=True, backends=parse_backends(WORKERS)),
                "r1": running, "r2": Reading(reached=True, state="exited", exit_code=137)}
    doc = document(cp, readings, "cluster.toml")
    assert doc["schema"] == SCHEMA == "hostctl.cluster-status/v1" and doc["ok"] is False
    gw, r1, r2 = doc["members"]
    assert gw["backends"] == [{"url": "http://127.0.0.1:8201", "member": "r1", "healthy": True},
                              {"url": "http://127.0.0.1:8202", "member": "r2", "healthy": False}]
    assert (r1["state"], r1["healthy"]) == ("running", True)
    assert (r2["state"], r2["exit_code"], r2["container"]) == ("exited", 137, "hc-pair-r2-runtime")
    words = text(doc)
    assert "backend http://127.0.0.1:8202 (r2): UNHEALTHY" in words and "exit code 137" in words

    # every member serving and both backends healthy: ok
    healthy = [Backend(url=b.url, healthy=True) for b in parse_backends(WORKERS)]
    ok = document(cp, {**readings, "r2": running, "gw": Reading(reached=True, state="running", healthy=True,
                                                                 backends=healthy)}, "cluster.toml")
    assert ok["ok"] is True
    # a router with no backend answers no request; one whose /workers did not answer is not ok either
    for backends in ([], None):
        gw_only = {"gw": Reading(reached=True, state="running", healthy=True, backends=backends)}
        assert document(cp, gw_only, "cluster.toml")["ok"] is False


def test_members_elsewhere_are_named_with_the_command_to_run_there():
    path = CLUSTERS / "pro6000x2-pair.toml"
    cp = plan_of(path)
    assert not any(here(mp, None) for mp in cp.members)  # private addresses, not this machine
    assert [here(mp, "desk-b") for mp in cp.members] == [False, True]  # --member: this machine is that one
    doc = document(cp, {mp.member.name: Reading(reached=False) for mp in cp.members}, "c.toml")
    assert doc["members"][1]["note"] == "on 192.168.10.12: run `hostctl status --cluster c.toml --member desk-b` there"
    assert doc["ok"] is False  # nothing read here is nothing known to serve


def test_a_follower_without_an_api_is_ok_when_running(tmp_path):
    cp = plan_of(write_cluster(tmp_path, multinode()))
    doc = document(cp, {"lead": Reading(reached=True, state="running", healthy=True),
                        "follow": Reading(reached=True, state="running")}, "c.toml")
    assert doc["ok"] is True and doc["members"][1]["endpoint"] is None and "headless" in text(doc)


def test_status_cluster_names_a_wrong_member(tmp_path, capsys):
    code = cli.main(["status", "--cluster", str(write_cluster(tmp_path, replicas())), "--member", "nope"])
    assert code == 2 and "--member: 'nope' is not a host" in capsys.readouterr().err


def test_a_replica_whose_engine_does_not_work_is_not_ok_though_it_answers(tmp_path):
    """A frozen engine answers /health (and so stays in vllm-router's pool): status judges its
    engine and says so, not "not answering"."""
    cp = plan_of(write_cluster(tmp_path, replicas()))
    backends = [Backend(url=b.url, healthy=True) for b in parse_backends(WORKERS)]
    readings = {"gw": Reading(reached=True, state="running", healthy=True, backends=backends),
                "r1": Reading(reached=True, state="running", healthy=True, engine_working=True),
                "r2": Reading(reached=True, state="running", healthy=False, engine_working=False,
                              reason="its engine does not work: the canary did not complete")}
    doc = document(cp, readings, "cluster.toml")
    assert doc["ok"] is False
    _, r1, r2 = doc["members"]
    assert r1["engine_working"] is True and (r2["healthy"], r2["engine_working"]) == (False, False)
    words = text(doc)
    assert "health: ok, engine NOT WORKING" in words and "the canary did not complete" in words
    assert "not answering" not in words
