"""`hostctl store split`'s pure decision on what read_split saw: a copy action per file not yet
copied, nothing for a rank that reads the shared store, a refusal onto the shared store's own
filesystem, and nothing copied when any rank lacks its files, its mount or the room."""

from __future__ import annotations

import pytest

from hostctl.act.actions import Action
from hostctl.errors import FailedError, InputError
from hostctl.provision.rankstores import RankRead, SplitRead, decide

FILES = ["s.rank0of2.json", "s.rank0of2.lock", "s.rank0of2.pack"]


def rank0(**kw) -> RankRead:
    base = dict(rank=0, drive="d1", host_dir="/m1/moet-store-rank0", shared=False, files=FILES,
                sizes={"s.rank0of2.json": 10, "s.rank0of2.lock": 0, "s.rank0of2.pack": 1000}, drive_mount="/m1",
                mount_target="/m1", is_dir=True, dev=1, free=10_000)
    return RankRead(**(base | kw))


def snap(*ranks: RankRead, **kw) -> SplitRead:
    shared = RankRead(rank=1, drive="d2", host_dir="/m2/moet-store", shared=True)
    return SplitRead(**({"profile": "p", "world": 2, "store": "/m2/moet-store", "store_is_dir": True,
                         "rank_stores": True, "ranks": [*ranks, shared]} | kw))


def copy(r: RankRead, name: str) -> Action:
    return Action(step=f"store/rank{r.rank}/{name}", describe=f"copy {name}", run=lambda: None)


def test_one_copy_per_missing_or_changed_file():
    d = decide(snap(rank0(same=["s.rank0of2.lock"])), copy)
    assert [a.id for a in d.actions] == ["store/rank0/s.rank0of2.json", "store/rank0/s.rank0of2.pack"]
    assert not d.refusals and not any(a.destructive for a in d.actions)


def test_all_copied_and_bound_is_settled():
    d = decide(snap(rank0(same=FILES, bound=FILES)), copy)
    assert not d.actions and [s.id for s in d.settled] == ["store/rank0"]


def test_all_copied_but_not_bound_fails():
    with pytest.raises(FailedError, match="does not bind"):
        decide(snap(rank0(same=FILES, bound=[], status="not split yet")), copy)


def test_refused_on_the_shared_stores_filesystem():
    d = decide(snap(rank0(same_fs=True)), copy)
    assert not d.actions and "same filesystem as the shared store" in d.refusals[0].reason


@pytest.mark.parametrize("ranks, says", [
    (dict(files=[], sizes={}), "no <stem>.rank0of2"),
    (dict(mount_target="/", is_dir=False), "not on drive d1's mount"),
    (dict(free=100), "drive d1 has"),
])
def test_nothing_is_copied_when_anything_is_wrong(ranks, says):
    with pytest.raises(FailedError) as exc:
        decide(snap(rank0(**ranks)), copy)
    assert says in " ".join([exc.value.message, *exc.value.details])


def test_no_expert_store_or_no_rank_drives_is_bad_input():
    with pytest.raises(InputError, match="no expert store"):
        decide(snap(store=None), copy)
    with pytest.raises(InputError, match="assigns no drives"):
        decide(snap(rank_stores=False), copy)
