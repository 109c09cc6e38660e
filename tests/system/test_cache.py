"""`hostctl cache list|verify|prune` on real files on two loop-mounted ext4 drives, with two
generations of every cache laid out the way the runtime lays them out (tests/cachelayout.py,
written from docs/model-and-cache-formats.md): the current one, built from this checkpoint at
TP=2 (with rank 0's packs copied to its own drive, as `store split` leaves them), and an older
one from another checkpoint, half built. The compile cache's use comes from a runtime log line
recorded as `up` records it.
"""

from __future__ import annotations

import hashlib
import json
import os
import pty
import subprocess
import sys
import time
from pathlib import Path

import pytest

import cachelayout as cl
from conftest import needs_compose
from loopdrives import check, host, restore_sysctls, sysroot  # noqa: F401  (fixtures)
from need import need

def _tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def caches(tmp_path, host):
    mounts = {}
    for name in ("ssd1", "ssd2"):
        drive = host.drive("96MiB", name)
        check(["mkfs.ext4", "-q", "-F", "-m", "0", drive.dev])
        mnt = tmp_path / "mnt" / name
        mnt.mkdir(parents=True)
        check(["mount", drive.dev, str(mnt)])
        mounts[name] = (drive, mnt)
    ckpt = cl.checkpoint(tmp_path / "ckpt")
    recipe = {"id": "cachetest", "model": "/opt/unused", "served_name": "t", "requires": {"gpus": 2},
              "context": 4096, "load_timeout_s": 60, "image": "hostctl/cachetest:1",
              "serve_args": ["--tensor-parallel-size 2"], "storage": ["planes_cache", "expert_store"],
              "conversion": {"layers": 4}}
    (tmp_path / "recipe.yaml").write_text(json.dumps(recipe))
    drives = "".join(f'[[drives]]\nname = "{n}"\nidentity = "path:{d.dev}"\nmountpoint = "{m}"\n'
                     for n, (d, m) in mounts.items())
    profile = tmp_path / "hostctl.toml"
    profile.write_text('name = "cachetest"\nrecipe = "recipe.yaml"\n[runtime]\n'
                       f'model_dir = "{ckpt}"\nproject = "cachetest"\n[storage]\nplanes_cache = "ssd1"\nexpert_store = "ssd2"\n'
                       'rank_stores = ["ssd1", "ssd2"]\ncompile_cache = "ssd1"\n' + drives)
    ssd1, ssd2 = mounts["ssd1"][1], mounts["ssd2"][1]
    current, old = cl.ckpt_id(ckpt), hashlib.sha256(b"the checkpoint before a re-download").hexdigest()
    layout = {
        "planes_current": cl.planes(ssd1 / "moet-planes", current, world=2, layers=4),
        "planes_old": cl.planes(ssd1 / "moet-planes", old, world=2, layers=4, drop=(1, 3, "sc2")),
        "packs_current": cl.packs(ssd2 / "moet-store", current, world=2, n_layers=4),
        "packs_old": cl.packs(ssd2 / "moet-store", old, world=2, n_layers=4, written=2, slot_bytes=6000),
        "compile_current": cl.compile_cache(ssd1 / "compile-cache", "a1b2c3d4e5", world=2),
        "compile_old": cl.compile_cache(ssd1 / "compile-cache", "0ld0ld0ld0", world=2, finished=False),
    }
    layout["copies"] = cl.copy_rank(layout["packs_current"], 0, ssd1 / "moet-store-rank0")
    (ssd1 / "compile-cache" / "triton").mkdir()
    (ssd1 / "compile-cache" / "triton" / "kernel.cubin").write_bytes(os.urandom(10000))
    os.sync()  # ext4 settles a sparse file's blocks (its extent tree) at writeback: sizes are stable after it
    # `up` records what the ready runtime said about its compile cache (hostctl/cache/usage.py).
    from hostctl.cache.act import record_ready
    from hostctl.config import load_config
    from hostctl.facts import collect_storage
    from hostctl.plan import build_plan, path_requests

    config = load_config(profile)
    record_ready(config, build_plan(config, collect_storage(path_requests(config))),
                 ["INFO [backends.py:409] Using cache directory: /root/.cache/vllm/torch_compile_cache/a1b2c3d4e5/"
                  "rank_0_0 for vLLM's torch.compile"])
    return {"profile": profile, "ssd1": ssd1, "ssd2": ssd2, "ckpt": ckpt, **layout}


def hostctl(args, stdin: str = "", timeout: float = 120):
    return subprocess.run([sys.executable, "-m", "hostctl", *args], capture_output=True, text=True, input=stdin,
                          timeout=timeout)


def listed(c) -> dict[str, dict]:
    res = hostctl(["cache", "list", "--json", "--config", str(c["profile"])])
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["schema"] == "hostctl.cache/v1" and doc["plan"]["world"] == 2
    return {g["id"]: g for g in doc["generations"]}, doc


def test_list_names_every_generation_its_key_size_completeness_and_use(caches):
    gens, doc = listed(caches)
    by_kind = {k: [g for g in gens.values() if g["kind"] == k] for k in ("planes", "pack", "compile")}
    assert {k: len(v) for k, v in by_kind.items()} == {"planes": 2, "pack": 2, "compile": 2}
    current = cl.ckpt_id(caches["ckpt"])
    assert doc["plan"]["ckpt_id"] == current
    for kind in ("planes", "pack"):
        used = [g for g in by_kind[kind] if g["use"] == "used"]
        unused = [g for g in by_kind[kind] if g["use"] == "unused"]
        assert len(used) == 1 and len(unused) == 1, by_kind[kind]
        assert used[0]["key"]["ckpt_id"] == current and used[0]["complete"], used[0]["problems"]
        assert used[0]["last_used"]  # recorded by the `up` above
        assert not unused[0]["complete"] and "another checkpoint" in unused[0]["use_reason"]
        assert unused[0]["last_used"] is None
    planes_old = next(g for g in by_kind["planes"] if g["use"] == "unused")
    assert any("layer 3 lacks sc2" in p for p in planes_old["problems"])
    assert sorted(planes_old["paths"]) == sorted(str(p) for p in caches["planes_old"])
    pack_old = next(g for g in by_kind["pack"] if g["use"] == "unused")
    assert any("2 of 4 layers written" in p for p in pack_old["problems"])
    pack_now = next(g for g in by_kind["pack"] if g["use"] == "used")
    assert sorted(c["copy"] for c in pack_now["copies"]) == sorted(str(p) for p in caches["copies"])
    # sizes are blocks allocated (what removal frees): the sparse packs count only written rows
    assert pack_now["size_bytes"] == sum(os.stat(p).st_blocks * 512 for p in caches["packs_current"] + caches["copies"])
    assert pack_now["size_bytes"] < pack_now["apparent_bytes"] or pack_now["size_bytes"] > 0
    compile_ = {g["key"]["hash"]: g for g in by_kind["compile"]}
    assert compile_["a1b2c3d4e5"]["use"] == "used" and compile_["a1b2c3d4e5"]["complete"]
    assert compile_["0ld0ld0ld0"]["use"] == "unused" and not compile_["0ld0ld0ld0"]["complete"]
    assert any("triton" in o["path"] for o in doc["other"])  # listed, never a generation
    text = hostctl(["cache", "list", "--config", str(caches["profile"])])
    assert text.returncode == 0 and "USED by the plan" in text.stdout and "INCOMPLETE" in text.stdout


def test_verify_checks_completeness_and_copies_byte_for_byte(caches):
    ok = hostctl(["cache", "verify", "--config", str(caches["profile"])])
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert "every generation the plan uses is complete" in ok.stdout
    assert "INCOMPLETE" in ok.stdout  # the old generation is reported, but does not fail the plan
    copy = next(p for p in caches["copies"] if p.suffix == ".pack")
    with open(copy, "r+b") as f:  # same size, one byte off: only a byte comparison finds it
        f.seek(100)
        b = f.read(1)
        f.seek(100)
        f.write(bytes([b[0] ^ 1]))
    bad = hostctl(["cache", "verify", "--json", "--config", str(caches["profile"])])
    assert bad.returncode == 1
    doc = json.loads(bad.stdout)
    assert not doc["ok"] and len(doc["failing"]) == 1 and doc["failing"][0].startswith("pack:")
    assert any(str(copy) in p and "differs" in p and "at byte 100" in p for p in doc["copies"][doc["failing"][0]])


def test_prune_dry_run_shows_the_space_each_frees_and_removes_nothing(caches):
    before = _tree(caches["ssd1"]) | _tree(caches["ssd2"])
    res = hostctl(["cache", "prune", "--dry-run", "--json", "--config", str(caches["profile"])])
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["schema"] == "hostctl.cache-prune/v1" and doc["dry_run"] and doc["ok"]
    assert doc["parts"][0]["status"] == "would-change"
    remove = [a["id"].removeprefix("cache/") for a in doc["actions"] if a["status"] == "would-change"]
    assert all(a["destructive"] and a["consent"] == "yes" for a in doc["actions"] if a["status"] == "would-change")
    gens, _ = listed(caches)
    unused = {i for i, g in gens.items() if g["use"] == "unused"}
    assert set(remove) == unused and len(unused) == 3
    freed = next(n["data"] for n in doc["warnings"] if n["id"] == "cache/freed")
    assert all(freed["size_bytes"][i] == gens[i]["size_bytes"] > 0 for i in remove), (freed, gens)
    assert freed["freed_bytes"] == sum(freed["size_bytes"].values())
    text = hostctl(["cache", "prune", "--dry-run", "--config", str(caches["profile"])])
    assert text.stdout.count("would remove") == 3 and "frees" in text.stdout
    assert _tree(caches["ssd1"]) | _tree(caches["ssd2"]) == before


def test_prune_needs_consent_and_refuses_without_a_terminal(caches):
    before = _tree(caches["ssd1"]) | _tree(caches["ssd2"])
    res = hostctl(["cache", "prune", "--config", str(caches["profile"])])
    assert res.returncode == 3 and "not a terminal" in res.stderr
    assert _tree(caches["ssd1"]) | _tree(caches["ssd2"]) == before


def _prune_at_a_terminal(profile: Path, answer: str) -> tuple[int, str]:
    master, slave = pty.openpty()
    try:
        proc = subprocess.Popen([sys.executable, "-m", "hostctl", "cache", "prune", "--config", str(profile)],
                                stdin=slave, stdout=subprocess.PIPE, stderr=slave, text=True)
        os.close(slave)
        slave = -1
        seen = b""
        deadline = time.monotonic() + 60
        while b"Type prune to continue" not in seen and time.monotonic() < deadline:
            try:
                seen += os.read(master, 4096)
            except OSError:
                break
        os.write(master, answer.encode() + b"\n")
        out, _ = proc.communicate(timeout=60)
        return proc.returncode, out
    finally:
        if slave >= 0:
            os.close(slave)
        os.close(master)


def test_prune_removes_only_what_the_plan_does_not_use(caches):
    kept = {p: hashlib.sha256(p.read_bytes()).hexdigest() for key in ("packs_current", "copies")
            for p in caches[key]}
    kept_dirs = [p for key in ("planes_current",) for p in caches[key]] + [caches["compile_current"]]
    kept_trees = {d: _tree(d) for d in kept_dirs}
    # an interrupted earlier prune left this behind: finished now
    leftover = caches["ssd1"] / "moet-planes" / "v2" / ".hostctl-removing.0123456789abcdef0123"
    (leftover / "tp2-rank0").mkdir(parents=True)
    (leftover / "tp2-rank0" / "layer0.sc2.bin").write_bytes(os.urandom(50000))

    code, out = _prune_at_a_terminal(caches["profile"], "no")
    assert code == 3 and all(p.exists() for p in caches["planes_old"])

    st = [os.statvfs(caches[k]) for k in ("ssd1", "ssd2")]
    free_before = sum(s.f_bavail * s.f_frsize for s in st)
    code, out = _prune_at_a_terminal(caches["profile"], "prune")
    assert code == 0, out
    assert out.count("removed") == 4  # three generations and the leftover
    for p in caches["planes_old"] + caches["packs_old"] + [caches["compile_old"], leftover]:
        assert not p.exists(), p
    assert not list(caches["ssd1"].rglob(".hostctl-removing.*")) and not list(caches["ssd2"].rglob(".hostctl-removing.*"))
    for p, digest in kept.items():
        assert hashlib.sha256(p.read_bytes()).hexdigest() == digest
    for d, tree in kept_trees.items():
        assert _tree(d) == tree
    st = [os.statvfs(caches[k]) for k in ("ssd1", "ssd2")]
    assert sum(s.f_bavail * s.f_frsize for s in st) > free_before
    gens, _ = listed(caches)
    assert {g["use"] for g in gens.values()} == {"used"} and len(gens) == 3
    again = hostctl(["cache", "prune", "--yes", "--config", str(caches["profile"])])
    assert again.returncode == 0 and "nothing to prune" in again.stdout


def test_prune_yes_without_a_checkpoint_identity_keeps_planes_and_packs(caches):
    os.rename(caches["ckpt"], caches["ckpt"].with_name("moved"))  # the plan's checkpoint cannot be read
    res = hostctl(["cache", "prune", "--yes", "--json", "--config", str(caches["profile"])])
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [a["id"] for a in doc["actions"] if a["status"] == "changed"] == ["cache/compile:0ld0ld0ld0"]
    assert all(p.exists() for p in caches["planes_old"] + caches["packs_old"])
    kept = [a for a in doc["actions"] if a["status"] in ("ok", "skipped") and not a["id"].startswith("cache/compile:")]
    assert kept and {a["status"] for a in kept} == {"skipped"} and all("unknown" in a["reason"] for a in kept)


@needs_compose
def test_prune_refuses_while_the_runtime_runs(caches):
    images = subprocess.run(["docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "hostctl/debian-base"],
                            capture_output=True, text=True).stdout.split()
    need(images, "no hostctl/debian-base image (.ci/run builds it)")
    name = f"hostctl-cachetest-{os.getpid()}"
    before = _tree(caches["ssd1"]) | _tree(caches["ssd2"])
    run = ["docker", "run", "-d", "--rm", "--network", "none", "--name", name,
           "--label", "io.hostctl.profile=cachetest", images[0], "sleep", "120"]
    started = subprocess.run(run, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    try:
        res = hostctl(["cache", "prune", "--yes", "--config", str(caches["profile"])])
        assert res.returncode == 3 and "runtime is running" in res.stderr and name in res.stderr
        assert _tree(caches["ssd1"]) | _tree(caches["ssd2"]) == before
        dry = hostctl(["cache", "prune", "--dry-run", "--config", str(caches["profile"])])
        assert dry.returncode == 0 and "would remove" in dry.stdout
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60)
