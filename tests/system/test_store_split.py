"""`hostctl store split` on provisioned loop drives: each rank's pack, sidecar and lock copied to
the drive the plan assigns, verified, originals kept; refused on a shared filesystem; TP=2 over
two drives and TP=4 over three; and the rendered Compose binding the split files per rank."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from hostctl import cli, paths
from hostctl.facts import load_snapshot
from hostctl.plan import build_plan
from hostctl.provision.storage_part import provision_storage, storage_facts
from hostctl.provision.rankstores import split_rank_stores
from hostctl.safefs import TEMP_MARK
from hostctl.service.render import render_files

from loopdrives import check, drive_toml, sha256, write_profile
from loopdrives import host, restore_sysctls, sysroot  # noqa: F401  (fixtures)

pytestmark = pytest.mark.system
STEM = "delta.v2.3f9c1e7a52b04d86ae19"
TP2_ROLES = 'planes_cache = "d1"\nexpert_store = "d2"\nrank_stores = ["d1", "d2"]\ncompile_cache = "d1"'


def quiet(fn, *args, **kw):
    out, err = io.StringIO(), io.StringIO()
    result = fn(*args, out=out, err=err, **kw)
    return result, out.getvalue(), err.getvalue()


def make_store(store: Path, world: int, pack_bytes: int = 3 << 20) -> dict[str, str]:
    """The files vLLM-MoET's first start writes: per rank a pack, its JSON sidecar and a lock."""
    digests = {}
    for rank in range(world):
        base = store / f"{STEM}.rank{rank}of{world}"
        Path(f"{base}.pack").write_bytes(os.urandom(pack_bytes + rank))
        Path(f"{base}.json").write_text(f'{{"rank": {rank}, "world": {world}}}\n')
        Path(f"{base}.lock").write_bytes(b"")
        for ext in ("pack", "json", "lock"):
            digests[f"{base.name}.{ext}"] = sha256(Path(f"{base}.{ext}"))
    return digests


def drives(host, tmp_path, n: int) -> list[str]:
    return [drive_toml(f"d{i + 1}", host.drive("160M", f"d{i + 1}").dev, tmp_path / f"m{i + 1}") for i in range(n)]


def test_tp2_split_over_two_drives_then_rendered_binds(host, tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    cfg = write_profile(tmp_path / "p.toml", drives(host, tmp_path, 2), storage=TP2_ROLES,
                        extra=f'[runtime]\nmodel_dir = "{model}"')
    quiet(provision_storage, cfg, yes=True)
    store, rank0 = tmp_path / "m2" / "moet-store", tmp_path / "m1" / "moet-store-rank0"
    digests = make_store(store, 2)

    code = cli.main(["store", "split", "--config", str(tmp_path / "p.toml")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "rank 0 -> d1: 3 file(s) copied and verified byte for byte" in out and "originals kept" in out
    assert "rank 1 reads the shared store on d2" in out
    assert sorted(os.listdir(rank0)) == sorted(n for n in digests if ".rank0of2." in n)
    for name in os.listdir(rank0):
        assert sha256(rank0 / name) == digests[name]
        assert os.stat(rank0 / name).st_dev != os.stat(store / name).st_dev
    assert {n: sha256(store / n) for n in os.listdir(store)} == digests  # the rollback is intact

    # Re-running copies nothing.
    code = cli.main(["store", "split", "--config", str(tmp_path / "p.toml")])
    out, _ = capsys.readouterr()
    assert code == 0 and "0 file(s) copied" in out and "3 already there and unchanged" in out

    # The plan made from the host now binds rank 0's files from d1 over the shared store path.
    facts = storage_facts(cfg)
    facts.gpus = load_snapshot(paths.hosts_dir() / "pro6000x2-desktop.facts.json").gpus  # two GPUs cannot exist here
    plan = build_plan(cfg, facts)
    rs = {r.rank: r for r in plan.storage.rank_stores}
    assert rs[0].files == sorted(n for n in digests if ".rank0of2." in n) and rs[0].status.startswith("split")
    assert rs[1].shared
    compose = render_files(plan)["compose.yaml"]
    for name in rs[0].files:
        assert f'source: "{rank0}/{name}"\n        target: "/packs/{name}"' in compose
    assert f"{tmp_path / 'm2' / 'moet-store'}" in compose


def test_a_changed_original_is_copied_again(host, tmp_path):
    cfg = write_profile(tmp_path / "p.toml", drives(host, tmp_path, 2), storage=TP2_ROLES)
    quiet(provision_storage, cfg, yes=True)
    store, rank0 = tmp_path / "m2" / "moet-store", tmp_path / "m1" / "moet-store-rank0"
    make_store(store, 2)
    assert quiet(split_rank_stores, cfg)[0].error is None
    pack = store / f"{STEM}.rank0of2.pack"
    pack.write_bytes(os.urandom(pack.stat().st_size))  # a re-conversion rewrote it, same size
    dry, out, _ = quiet(split_rank_stores, cfg, dry_run=True)
    assert dry.error is None and "1 file(s) to copy" in out and "nothing was changed" in out
    assert [a.id for a in dry.actions] == [f"store/rank0/{pack.name}"] and dry.actions[0].status == "would-change"
    report, out, err = quiet(split_rank_stores, cfg)
    assert report.error is None and report.parts[0].status == "converged", err
    assert "1 file(s) copied" in out and "2 already there" in out
    assert sha256(rank0 / pack.name) == sha256(pack)
    assert not [n for n in os.listdir(rank0) if TEMP_MARK in n]


def test_tp4_over_three_drives(host, tmp_path):
    recipe = (paths.recipes_dir() / "dsv4-flash-0731-tp2-400k.yaml").read_text()
    recipe = recipe.replace("gpus: 2", "gpus: 4").replace("--tensor-parallel-size 2", "--tensor-parallel-size 4")
    (tmp_path / "tp4.yaml").write_text(recipe.replace("id: dsv4-flash-0731-tp2-400k", "id: systest-tp4"))
    cfg = write_profile(tmp_path / "p.toml", drives(host, tmp_path, 3), recipe=str(tmp_path / "tp4.yaml"),
                        storage='planes_cache = "d1"\nexpert_store = "d2"\nrank_stores = ["d1", "d2", "d3", "d1"]')
    quiet(provision_storage, cfg, yes=True)
    digests = make_store(tmp_path / "m2" / "moet-store", 4, pack_bytes=1 << 20)
    report, out, _ = quiet(split_rank_stores, cfg)
    assert report.error is None and report.document()["schema"] == "hostctl.store-split/v1"
    split = report.parts[0].first.detail.ranks
    assert {(r.rank, r.drive) for r in split if not r.shared} == {(0, "d1"), (2, "d3"), (3, "d1")}
    for rank, mount in ((0, "m1"), (2, "m3"), (3, "m1")):
        target = tmp_path / mount / f"moet-store-rank{rank}"
        assert sorted(os.listdir(target)) == sorted(n for n in digests if f".rank{rank}of4." in n)
        assert all(sha256(target / n) == digests[n] for n in os.listdir(target))
    assert "rank 1 reads the shared store on d2" in out
    assert not (tmp_path / "m2" / "moet-store-rank1").exists()


def test_refused_when_the_copy_would_share_the_stores_filesystem(host, tmp_path, capsys):
    shared = tmp_path / "m1" / "shared-store"
    cfg = write_profile(tmp_path / "p.toml", drives(host, tmp_path, 2),
                        storage=f'planes_cache = "d1"\nexpert_store = "{shared}"\nrank_stores = ["d1", "d2"]')
    quiet(provision_storage, cfg, yes=True)
    shared.mkdir()
    make_store(shared, 2)
    code = cli.main(["store", "split", "--config", str(tmp_path / "p.toml")])
    _, err = capsys.readouterr()
    assert code == 3 and "rank 0" in err and "same filesystem as the shared store" in err
    assert os.listdir(tmp_path / "m1" / "moet-store-rank0") == []
    assert (tmp_path / "m2" / "moet-store-rank1").is_dir() and os.listdir(tmp_path / "m2" / "moet-store-rank1") == []


def test_nothing_is_copied_when_a_drive_is_not_mounted_or_files_are_missing(host, tmp_path, capsys):
    cfg = write_profile(tmp_path / "p.toml", drives(host, tmp_path, 2), storage=TP2_ROLES)
    quiet(provision_storage, cfg, yes=True)
    code = cli.main(["store", "split", "--config", str(tmp_path / "p.toml")])
    _, err = capsys.readouterr()
    assert code == 1 and "no <stem>.rank0of2" in err and "the runtime's first start writes them" in err

    make_store(tmp_path / "m2" / "moet-store", 2)
    check(["umount", str(tmp_path / "m1")])
    code = cli.main(["store", "split", "--config", str(tmp_path / "p.toml")])
    _, err = capsys.readouterr()
    assert code == 1 and "not on drive d1's mount" in err
    assert not (tmp_path / "m1" / "moet-store-rank0").exists()  # nothing landed on the root filesystem


def test_the_store_owners_links_neither_redirect_nor_leak_the_copy(host, tmp_path, capsys, monkeypatch):
    """nobody ran sudo, so provision made the store folders nobody's; links nobody planted there
    (at the old partial name in a rank folder, and as a rank file of the shared store) must not make
    root overwrite or chown root's file, nor copy a root-only file into nobody's folder."""
    nobody = 65534
    monkeypatch.setenv("SUDO_UID", str(nobody))
    monkeypatch.setenv("SUDO_GID", str(nobody))
    cfg = write_profile(tmp_path / "p.toml", drives(host, tmp_path, 2), storage=TP2_ROLES)
    quiet(provision_storage, cfg, yes=True)
    store, rank0 = tmp_path / "m2" / "moet-store", tmp_path / "m1" / "moet-store-rank0"
    assert os.stat(rank0).st_uid == nobody
    make_store(store, 2)
    victim = tmp_path / "root-only" / "shadow"
    victim.parent.mkdir(mode=0o700)
    victim.write_text("root's secret\n")
    os.chmod(victim, 0o600)
    pack = f"{STEM}.rank0of2.pack"
    os.symlink(victim, rank0 / f".hostctl-partial.{pack}")
    os.lchown(rank0 / f".hostctl-partial.{pack}", nobody, nobody)
    code = cli.main(["store", "split", "--config", str(tmp_path / "p.toml")])
    _, err = capsys.readouterr()
    assert code == 0, err
    st = os.stat(victim)
    assert victim.read_text() == "root's secret\n" and (st.st_uid, st.st_mode & 0o777) == (0, 0o600)
    assert sha256(rank0 / pack) == sha256(store / pack)

    sidecar = store / f"{STEM}.rank0of2.json"
    sidecar.unlink()
    os.symlink(victim, sidecar)
    os.lchown(sidecar, nobody, nobody)
    code = cli.main(["store", "split", "--config", str(tmp_path / "p.toml")])
    _, err = capsys.readouterr()
    assert code == 3 and str(sidecar) in err and "symlink" in err
    assert "root's secret" not in (rank0 / sidecar.name).read_text()
