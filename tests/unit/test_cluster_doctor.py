"""doctor's cross-host checks on member facts snapshots (the NIC speed, MTU and clock checks
cannot fail on one machine), and the facts read through the MemberReader interface."""

import pytest

from hostctl.cluster import doctor
from hostctl.cluster.commands import load
from hostctl.cluster.doctor import MemberFacts, NicFacts
from test_cluster import multinode, replicas, write_cluster


@pytest.fixture
def pp(tmp_path):
    return load(write_cluster(tmp_path, multinode()), None)[1]


@pytest.fixture
def reps(tmp_path, monkeypatch):
    monkeypatch.setenv("HC_TEST_KEY", "a-key-for-tests")
    return load(write_cluster(tmp_path, replicas()), None)[1]


def member(name, **over):
    base = dict(member=name, clock_offset_s=0.01, image_id="sha256:" + "a" * 64, recipe_sha256="r" * 64,
                nic=NicFacts(name="enp5s0", operstate="up", speed_mbps=25000, mtu=9000))
    base.update(over)
    return MemberFacts(**base)


def by_id(results):
    return {r["id"]: r for r in results}


def test_healthy_hosts_pass(pp):
    r = by_id(doctor.checks(pp, [member("lead"), member("follow")]))
    assert {v["status"] for v in r.values()} <= {"pass", "skip"}
    assert r["cluster.clock"]["status"] == "pass" and r["cluster.mtu"]["status"] == "pass"


def test_another_image_on_one_host_fails_and_names_it(pp):
    r = by_id(doctor.checks(pp, [member("lead"), member("follow", image_id="sha256:" + "b" * 64)]))
    assert r["cluster.image"]["status"] == "fail" and "follow: bbbbbbbbbbbb" in r["cluster.image"]["summary"]


def test_an_unknown_image_is_a_warning_not_a_pass(pp):
    r = by_id(doctor.checks(pp, [member("lead"), member("follow", image_id=None)]))
    assert r["cluster.image"]["status"] == "warn" and "follow" in r["cluster.image"]["summary"]


def test_recipe_and_manifest_differences_fail(pp):
    r = by_id(doctor.checks(pp, [member("lead", model_manifest_sha256="1" * 64),
                                 member("follow", recipe_sha256="x" * 64, model_manifest_sha256="2" * 64)]))
    assert r["cluster.recipe"]["status"] == "fail" and r["cluster.model"]["status"] == "fail"


@pytest.mark.parametrize("offset,status", [(0.4, "pass"), (0.99, "pass"), (1.3, "fail"), (-2.0, "fail")])
def test_clocks_within_a_second(pp, offset, status):
    r = by_id(doctor.checks(pp, [member("lead", clock_offset_s=0.0), member("follow", clock_offset_s=offset)]))
    assert r["cluster.clock"]["status"] == status


def test_nic_down_slow_and_mtu_mismatch(pp):
    r = by_id(doctor.checks(pp, [member("lead", nic=NicFacts(name="enp5s0", operstate="down", mtu=9000)),
                                 member("follow", nic=NicFacts(name="enp5s0", operstate="up", speed_mbps=1000,
                                                               mtu=1500))]))
    assert r["cluster.nic.lead"]["status"] == "fail" and "down" in r["cluster.nic.lead"]["summary"]
    assert r["cluster.nic.follow"]["status"] == "warn" and "1000 Mb/s" in r["cluster.nic.follow"]["summary"]
    assert r["cluster.mtu"]["status"] == "fail" and "follow 1500" in r["cluster.mtu"]["summary"]


def test_a_missing_interface_fails(pp):
    r = by_id(doctor.checks(pp, [member("lead", nic=NicFacts(name="eth9")), member("follow")]))
    assert r["cluster.nic.lead"]["status"] == "fail" and "socket_ifname" in r["cluster.nic.lead"]["fix"]


def test_a_slow_nic_is_fine_for_replicas(reps):
    slow = NicFacts(name="eth0", operstate="up", speed_mbps=1000, mtu=1500)
    r = by_id(doctor.checks(reps, [member(n, nic=slow) for n in ("gw", "r1", "r2")]))
    assert r["cluster.nic.r1"]["status"] == "pass"


class FakeRemote:
    """A snapshot of another host behind the MemberReader interface (what Target gives over SSH)."""

    def __init__(self, files, clock):
        self.files, self.clock = files, clock

    def run(self, argv):
        if argv[0] == "date":
            return 0, f"{self.clock}\n"
        if argv[:3] == ["docker", "image", "inspect"]:
            return 0, "sha256:" + "c" * 64 + "\n"
        return 127, ""

    def read_bytes(self, path):
        return self.files.get(path)


def test_read_member_through_a_reader(pp):
    import time

    files = {"/sys/class/net/lo/operstate": b"up\n", "/sys/class/net/lo/speed": b"-1\n",
             "/sys/class/net/lo/mtu": b"1500\n"}
    f = doctor.read_member(pp.member("follow"), "lo", FakeRemote(files, time.time() + 5))
    assert f.nic.operstate == "up" and f.nic.speed_mbps is None and f.nic.mtu == 1500
    assert 4.5 < f.clock_offset_s < 5.5 and f.image_id.endswith("c" * 12)
    r = by_id(doctor.checks(pp, [doctor.read_member(pp.member("lead"), "lo", doctor.LocalMemberReader()), f]))
    assert r["cluster.clock"]["status"] == "fail"
