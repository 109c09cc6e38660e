"""doctor's collective across hosts, the parts decided without a process: its rendezvous port,
its deadline's validation, and the cases where no rank runs (replicas; no Python with torch).
The runs themselves are tests/system/test_cluster_collective.py."""

import pytest

from hostctl.cluster import collective
from hostctl.cluster.commands import load
from hostctl.cluster.profile import parse_cluster
from hostctl.errors import InputError
from test_cluster import multinode, replicas, write_cluster


def test_the_rendezvous_is_beside_the_master_port_never_past_65535():
    assert collective.rendezvous_port(29501) == 29511
    assert collective.rendezvous_port(65530) == 65520


@pytest.mark.parametrize("value", [4, 3601])
def test_a_deadline_out_of_range_is_bad_input_naming_the_field(value):
    with pytest.raises(InputError) as exc:
        parse_cluster(multinode(collective_timeout_s=value), "cluster.toml")
    assert exc.value.exit_code == 2 and "collective_timeout_s" in " ".join([exc.value.message, *exc.value.details])


def test_replicas_run_no_collective(tmp_path, monkeypatch):
    monkeypatch.setenv("HC_TEST_KEY", "a-key-for-tests")
    cp = load(write_cluster(tmp_path, replicas()), None)[1]
    r = collective.collective_check(cp, "r1")
    assert (r["id"], r["status"]) == ("cluster.collective", "skip")


def test_no_python_with_torch_is_a_warning_that_says_why(tmp_path, monkeypatch):
    monkeypatch.setenv("HOSTCTL_TORCH_PYTHON", str(tmp_path / "no-such-python"))
    cp = load(write_cluster(tmp_path, multinode()), None)[1]
    r = collective.collective_check(cp, "follow")
    assert r["status"] == "warn" and r["observed"]["verdict"] == "inconclusive"
    assert "no-such-python" in r["summary"]
