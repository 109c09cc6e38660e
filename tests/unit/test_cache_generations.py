"""hostctl.cache's decisions on cache directories laid out as the runtime lays them out
(tests/cachelayout.py, written from docs/model-and-cache-formats.md) in a temporary directory:
grouping into generations, completeness, use by the plan, what a prune removes; the runtime's
checkpoint identity; the compile-cache hashes `up` reads from the runtime's log."""

from __future__ import annotations

import json
import os
import time

import pytest

import cachelayout as cl
from hostctl.cache import usage
from hostctl.cache.decide import PlanKey, generations, plan_prune
from hostctl.facts.caches import Root, scan
from hostctl.facts.checkpoint_identity import runtime_ckpt_id, runtime_inputs
from hostctl.plan.runtime import MODEL_IN_CONTAINER as MODEL


@pytest.fixture
def dirs(tmp_path):
    d = {k: tmp_path / k for k in ("planes", "store", "rank0", "compile")}
    for p in d.values():
        p.mkdir()
    return d


def roots(d) -> list[Root]:
    return [Root(kind="planes", path=str(d["planes"]), planned=True), Root(kind="store", path=str(d["store"]), planned=True),
            Root(kind="rank_store", path=str(d["rank0"]), planned=True),
            Root(kind="compile", path=str(d["compile"]), planned=True)]


def key(d, ckpt="c" * 64, world=2, compile_hashes=None, layers=None) -> PlanKey:
    return PlanKey(world=world, roots={"planes_cache": str(d["planes"]), "expert_store": str(d["store"]),
                                       "compile_cache": str(d["compile"])}, ckpt_id=ckpt,
                   ckpt_reason="test" if ckpt else "no checkpoint", compile_hashes=compile_hashes, conversion_layers=layers)


def by_kind(gens, kind):
    return [g for g in gens if g.kind == kind]


def test_planes_ranks_in_their_own_key_directories_form_one_generation(dirs):
    cl.planes(dirs["planes"], "c" * 64, world=2, layers=3)
    gens = generations(scan(roots(dirs)), key(dirs, layers=3))
    (g,) = by_kind(gens, "planes")
    assert g.ranks == [0, 1] and len(g.paths) == 2 and g.complete and g.use == "used", g.problems
    assert g.key["ckpt_id"] == "c" * 64 and "rank" not in g.key and g.world == 2


def test_planes_completeness_by_the_runtimes_rules(dirs):
    gen = cl.planes(dirs["planes"], "c" * 64, world=2, layers=3, drop=(1, 2, "planes13"))
    rank0 = gen[0] / "tp2-rank0"
    (rank0 / "layer9.sc13.bin.tmp.1234.5").write_bytes(b"x")
    g = by_kind(generations(scan(roots(dirs)), key(dirs, layers=4)), "planes")[0]
    text = "\n".join(g.problems)
    assert not g.complete
    assert "rank 1: layer 2 lacks planes13" in text and "still being written" in text and "3 of 4 layers" in text
    meta = json.loads((rank0 / "meta.json").read_text())
    (rank0 / "meta.json").write_text(json.dumps({**meta, "zero_mode": "asym"}))
    gens = by_kind(generations(scan(roots(dirs)), key(dirs)), "planes")
    assert any("does not hash to its directory" in p for g in gens for p in g.problems)


def test_packs_with_a_rank_store_copy_and_a_half_written_generation(dirs):
    current = cl.packs(dirs["store"], "c" * 64, world=2, n_layers=3)
    copies = cl.copy_rank(current, 0, dirs["rank0"])
    cl.packs(dirs["store"], "o" * 64, world=2, n_layers=3, written=1, slot_bytes=7000)
    gens = by_kind(generations(scan(roots(dirs)), key(dirs)), "pack")
    used = next(g for g in gens if g.use == "used")
    old = next(g for g in gens if g.use != "used")
    assert used.complete and sorted(c for c, _ in used.copies) == sorted(map(str, copies)), used.problems
    assert all(s.startswith(str(dirs["store"])) for _, s in used.copies)
    assert sorted(used.paths) == sorted(map(str, current + copies))
    assert not old.complete and old.use == "unused" and any("1 of 3 layers written" in p for p in old.problems)
    with open(copies[0], "ab") as f:  # a stale copy: another size than its source
        f.write(b"more")
    used = next(g for g in by_kind(generations(scan(roots(dirs)), key(dirs)), "pack") if g.use == "used")
    assert any("stale copy" in p for p in used.problems)


def test_a_pack_whose_sidecar_was_edited_or_has_no_identity(dirs):
    files = cl.packs(dirs["store"], "c" * 64, world=1, n_layers=2)
    sidecar = next(p for p in files if p.suffix == ".json")
    doc = json.loads(sidecar.read_text())
    sidecar.write_text(json.dumps({**doc, "stride": doc["stride"] * 2}))
    (g,) = by_kind(generations(scan(roots(dirs)), key(dirs, world=1)), "pack")
    assert any("does not hash to the file's key" in p for p in g.problems)
    assert any("n_layers x E x stride" in p for p in g.problems)
    sidecar.write_text(json.dumps({**doc, "ckpt_id": None}))
    (g,) = by_kind(generations(scan(roots(dirs)), key(dirs, world=1)), "pack")
    assert g.use == "unused" and "never reuses" in g.use_reason


def test_use_follows_checkpoint_and_tp_and_unknown_is_never_pruned(dirs):
    cl.planes(dirs["planes"], "c" * 64, world=2, layers=1)
    cl.planes(dirs["planes"], "c" * 64, world=1, layers=1)
    cl.packs(dirs["store"], "o" * 64, world=2, n_layers=1)
    gens = generations(scan(roots(dirs)), key(dirs))
    uses = sorted((g.kind, g.world, g.use) for g in gens)
    assert uses == [("pack", 2, "unused"), ("planes", 1, "unused"), ("planes", 2, "used")]
    assert "TP=1" in next(g for g in gens if g.world == 1).use_reason
    blind = generations(scan(roots(dirs)), key(dirs, ckpt=None))
    assert sorted(g.use for g in blind) == ["unknown", "unknown", "unused"]  # the TP mismatch is still known
    plan = plan_prune(blind, [])
    assert [g.world for g in plan.remove] == [1] and len(plan.keep) == 2


def test_compile_cache_use_comes_from_the_recorded_log_line(dirs):
    cl.compile_cache(dirs["compile"], "aaaa", world=2)
    cl.compile_cache(dirs["compile"], "bbbb", world=2, finished=False)
    unknown = by_kind(generations(scan(roots(dirs)), key(dirs)), "compile")
    assert {g.use for g in unknown} == {"unknown"} and plan_prune(unknown, []).remove == []
    gens = {g.key["hash"]: g for g in by_kind(generations(scan(roots(dirs)), key(dirs, compile_hashes=["aaaa"])), "compile")}
    assert gens["aaaa"].use == "used" and gens["aaaa"].complete and gens["aaaa"].world == 2
    assert gens["bbbb"].use == "unused" and any("did not finish" in p for p in gens["bbbb"].problems)


def test_compile_hashes_are_read_from_the_runtimes_log():
    lines = ["(VllmWorker rank=0) INFO 07-31 10:00:01 [backends.py:509] Using cache directory: "
             "/root/.cache/vllm/torch_compile_cache/3f2a9c1d0e/rank_0_0/backbone for vLLM's torch.compile",
             "(VllmWorker rank=1) INFO ... Using cache directory: /root/.cache/vllm/torch_compile_cache/3f2a9c1d0e/rank_1_0",
             "INFO a line that mentions torch_compile_cache/deadbeef/rank_0_0 but not its use"]
    assert usage.compile_hashes(lines) == ["3f2a9c1d0e"]


def test_the_runtimes_checkpoint_identity(tmp_path):
    ckpt = cl.checkpoint(tmp_path / "ckpt")
    got, _ = runtime_ckpt_id(str(ckpt), MODEL)
    assert got == cl.ckpt_id(ckpt)
    assert runtime_ckpt_id(str(ckpt), "/elsewhere")[0] != got  # the path the server is given counts
    shard = ckpt / "model-00001-of-00002.safetensors"
    st = shard.stat()
    os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
    assert runtime_ckpt_id(str(ckpt), MODEL)[0] not in (None, got)  # a touched shard is another checkpoint to the runtime
    assert runtime_ckpt_id(str(tmp_path / "nowhere"), MODEL)[0] is None


def test_things_that_are_not_generations_are_listed_and_left_alone(dirs):
    (dirs["planes"] / "v1-old").mkdir()
    (dirs["store"] / "notes.txt").write_text("mine")
    (dirs["compile"] / "triton").mkdir()
    leftover = dirs["store"] / ".hostctl-removing.base.v2.0123456789abcdef0123.rank0of1.pack"
    leftover.write_bytes(b"x" * 100)
    facts = scan(roots(dirs))
    whats = {os.path.basename(o.path): o.what for o in facts.other}
    assert set(whats) == {"v1-old", "notes.txt", "triton", leftover.name}
    plan = plan_prune(generations(facts, key(dirs)), facts.other)
    assert [o.path for o in plan.leftovers] == [str(leftover)] and plan.remove == []


def test_sizes_are_blocks_allocated(dirs):
    files = cl.packs(dirs["store"], "c" * 64, world=1, n_layers=64, written=1)
    (g,) = by_kind(generations(scan(roots(dirs)), key(dirs, world=1)), "pack")
    assert g.apparent_bytes > g.size_bytes == sum(os.stat(p).st_blocks * 512 for p in files)
    assert g.last_written <= time.time()


def test_a_pack_the_runtime_said_it_opened_is_used_whatever_the_identity_says(dirs):
    files = cl.packs(dirs["store"], "o" * 64, world=2, n_layers=2)
    pack = next(p.name for p in files if p.suffix == ".pack")
    lines = [f"(VllmWorker rank=0) INFO 07-31 [moe_w2_store.py:940] moe_w2 store[base]: PACK-FILE backend /packs/{pack} "
             "(slot 0.10 MiB, stride 8192, 2 layers x 4 experts; host RAM tier = page cache)",
             "INFO moe_w2 store[base]: TIERED backend /packs/other.v2.0123456789abcdef0123.rank1of2.pack - pinned arena"]
    assert usage.packs_opened(lines) == sorted([pack, "other.v2.0123456789abcdef0123.rank1of2.pack"])
    k = key(dirs)
    assert by_kind(generations(scan(roots(dirs)), k), "pack")[0].use == "unused"  # another checkpoint, by hostctl's reckoning
    k.packs_opened = usage.packs_opened(lines)
    (g,) = by_kind(generations(scan(roots(dirs)), k), "pack")
    assert g.use == "used" and "opened it" in g.use_reason and plan_prune([g], []).remove == []


def test_the_identity_of_an_hf_cache_snapshot_with_the_servers_revision_and_override(tmp_path, dirs):
    # An HF cache snapshot (shards are symlinks into blobs/): the runtime hashes each shard's blob
    # name, the revision the server is given (`--revision`, not the snapshot's directory name) and,
    # when VLLM_MOE_W2_CKPT_ID is set, uses that value alone (vLLM-MoET's `_ckpt_id`).
    snap = cl.hf_snapshot(tmp_path / "hub")
    plain, _ = runtime_ckpt_id(str(snap), MODEL)
    assert plain == cl.ckpt_id(snap)
    blob = os.path.basename(os.path.realpath(snap / "model-00001-of-00002.safetensors"))
    assert len(blob) == 64 and plain != cl.ckpt_id(snap, revision="x")
    rev = "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
    override, revision = runtime_inputs({"VLLM_MOE_W2_CKPT_ID": "  "}, ["--enforce-eager", f"--revision {rev}"])
    assert (override, revision) == (None, rev)  # a blank override is no override, as in the runtime
    pinned, _ = runtime_ckpt_id(str(snap), MODEL, revision=revision, override=override)
    assert pinned == cl.ckpt_id(snap, revision=rev) != plain
    assert runtime_inputs({}, ["--revision=abc"]) == (None, "abc")
    override, _ = runtime_inputs({"VLLM_MOE_W2_CKPT_ID": " snapshot-2026-07 "}, [])
    given, why = runtime_ckpt_id(str(tmp_path / "nowhere"), MODEL, override=override)
    assert given == "snapshot-2026-07" and "VLLM_MOE_W2_CKPT_ID" in why
    # planes built under the served revision's identity are the plan's; those of the plain one are not
    cl.planes(dirs["planes"], pinned, world=1, layers=2)
    cl.planes(dirs["planes"], plain, world=1, layers=2)
    gens = by_kind(generations(scan(roots(dirs)), key(dirs, ckpt=pinned, world=1, layers=2)), "planes")
    assert sorted(g.use for g in gens) == ["unused", "used"]
    assert next(g for g in gens if g.use == "used").key["ckpt_id"] == pinned
