"""Names from outside are data, not paths (issue 26, class 2): a hub on 127.0.0.1 that lists file
names leaving the model folder, links planted in the model folder (by nobody, uid 65534, and by
the folder's own user), a manifest edited to name a file outside, an index naming one and a cache
folder holding a name made of terminal escapes. hostctl runs as root in its own process against
the real huggingface_hub; every test asserts by effect: the files outside the model folder are
byte for byte what they were, nothing new appears outside it, and nothing inside it is deleted.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from pathlib import Path

import pytest

from hubserver import Hub, Repo
from need import need
from test_model_pull import REPO_ID, env_for, hostctl, make_repo, write_config

NOBODY = 65534
SECRET = "hubpassw0rd"  # the endpoint's userinfo: never shown


@pytest.fixture(autouse=True)
def _root(monkeypatch):
    need(os.geteuid() == 0, "needs root: the planted links are chowned to nobody")
    monkeypatch.delenv("SUDO_UID", raising=False)


def _tree(root: Path, skip: tuple[Path, ...] = ()) -> dict[str, str]:
    """Every entry under root (but `skip`): a file's sha256, a link's target, a folder's mode."""
    out = {}
    for dirpath, dirs, files in os.walk(root):
        here = Path(dirpath)
        dirs[:] = [d for d in dirs if here / d not in skip]
        for name in dirs + files:
            p = here / name
            st = os.lstat(p)
            out[str(p)] = (f"link {os.readlink(p)}" if stat.S_ISLNK(st.st_mode) else
                           hashlib.sha256(p.read_bytes()).hexdigest() if stat.S_ISREG(st.st_mode) else
                           f"dir {st.st_mode:o}")
    return out


def _setup(tmp_path: Path, extra: dict[str, bytes]):
    """A repository with the usual files plus `extra`, a victim file outside the model folder, a
    model folder holding one earlier file, and a profile naming it."""
    repo = make_repo(big=1024)
    repo.files.update(extra)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").write_text("root's file outside the model folder\n")
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "x").write_text("another file outside the model folder\n")
    model_dir = tmp_path / "models" / "TinyMoE"
    model_dir.mkdir()
    (model_dir / "notes.txt").write_text("the user's own file: never deleted\n")
    cfg = write_config(tmp_path, model_dir, repo=repo)
    return repo, model_dir, cfg


def _env(hub: Hub, tmp_path: Path) -> dict:
    env = env_for(hub, tmp_path)
    env["HF_ENDPOINT"] = hub.url.replace("http://", f"http://hubuser:{SECRET}@")
    return env


@pytest.mark.parametrize("hostile", ["../../outside/x", "{outside}/x", "a/../../x", "a\\..\\x", "ok/\x1b[2Jx"],
                         ids=["parent", "absolute", "parent-in-the-middle", "backslash", "escape"])
def test_a_listing_naming_a_file_outside_the_model_folder_is_refused_whole(tmp_path, hostile):
    name = hostile.format(outside=tmp_path / "outside")
    repo, model_dir, cfg = _setup(tmp_path, {name: b"the hub's payload\n"})
    before = _tree(tmp_path, skip=(tmp_path / "hf-home",))
    with Hub(repo) as hub:
        res = hostctl(["model", "pull", "--config", str(cfg)], _env(hub, tmp_path))
        out = res.stdout + res.stderr
        assert _tree(tmp_path, skip=(tmp_path / "hf-home",)) == before, out  # nothing written, replaced or deleted
        assert res.returncode == 3, out
        assert not hub.requests(contains="/resolve/")  # not one file was asked for
        for args in (["model", "pull", "--dry-run", "--config", str(cfg)], ["model", "pull", "--json", "--config", str(cfg)]):
            again = hostctl(args, _env(hub, tmp_path))
            assert again.returncode == 3, again.stdout + again.stderr
            assert SECRET not in again.stdout + again.stderr
    # the bad name, and where it came from (the password masked)
    assert repr(name) in res.stderr and f"127.0.0.1:{hub.server.server_address[1]}" in res.stderr
    assert SECRET not in out and "\x1b" not in out
    assert "every file checked" not in out


@pytest.mark.parametrize("link, listed", [("sub", "sub/x"), (".cache", None)], ids=["into-a-file's-folder", "hf-bookkeeping"])
@pytest.mark.parametrize("owner", [NOBODY, 0], ids=["nobody's-link", "the-user's-own-link"])
def test_a_file_through_a_link_in_the_model_folder_is_refused(tmp_path, link, listed, owner):
    repo, model_dir, cfg = _setup(tmp_path, {listed: b"the hub's payload\n"} if listed else {})
    os.symlink(tmp_path / "outside", model_dir / link)
    os.lchown(model_dir / link, owner, owner)
    before = _tree(tmp_path, skip=(tmp_path / "hf-home",))
    with Hub(repo) as hub:
        res = hostctl(["model", "pull", "--config", str(cfg)], _env(hub, tmp_path))
    out = res.stdout + res.stderr
    assert _tree(tmp_path, skip=(tmp_path / "hf-home",)) == before, out
    assert res.returncode == 3, out
    assert str(model_dir / link) in res.stderr and ("nobody" if owner else "root") in res.stderr
    assert "every file checked" not in out


def _pulled(tmp_path: Path):
    repo, model_dir, cfg = _setup(tmp_path, {})
    with Hub(repo) as hub:
        res = hostctl(["model", "pull", "--config", str(cfg)], _env(hub, tmp_path))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "every file checked" in res.stdout
    return repo, model_dir, cfg


def test_a_manifest_edited_to_name_a_file_outside_is_not_used(tmp_path):
    repo, model_dir, cfg = _pulled(tmp_path)
    victim = tmp_path / "outside" / "x"
    os.chmod(victim, 0o600)
    data = victim.read_bytes()
    manifest = model_dir / ".hostctl-model.json"
    doc = json.loads(manifest.read_text())
    doc["files"].append({"name": "../../outside/x", "size": len(data), "lfs": False,
                         "sha256": hashlib.sha256(data).hexdigest()})  # a guess at root's file, to be confirmed
    manifest.write_text(json.dumps(doc))
    before = _tree(tmp_path / "outside")

    res = hostctl(["model", "verify", "--json", "--config", str(cfg)], env_for_offline(tmp_path))
    assert res.returncode == 1, res.stdout + res.stderr
    verdict = json.loads(res.stdout)["verdict"]
    assert not any(".." in f["name"] for f in verdict["files"])  # root's file was neither stat'ed nor hashed
    assert any(".hostctl-model.json" in p and "'../../outside/x'" in p for p in verdict["problems"])

    with Hub(repo) as hub:
        pull = hostctl(["model", "pull", "--config", str(cfg)], _env(hub, tmp_path))
    assert pull.returncode == 0, pull.stdout + pull.stderr
    assert "warning:" in pull.stdout and "'../../outside/x'" in pull.stdout
    assert "../../outside/x" not in manifest.read_text()  # the new manifest holds only the hub's names
    assert _tree(tmp_path / "outside") == before and victim.read_bytes() == data
    assert hostctl(["model", "verify", "--config", str(cfg)], env_for_offline(tmp_path)).returncode == 0


@pytest.mark.parametrize("owner", [NOBODY, 0], ids=["nobody's-link", "the-user's-own-link"])
def test_verify_follows_no_link_in_the_model_folder(tmp_path, owner):
    repo, model_dir, cfg = _pulled(tmp_path)
    victim = tmp_path / "outside" / "x"
    os.chmod(victim, 0o600)
    (model_dir / "tokenizer.json").unlink()
    os.symlink(victim, model_dir / "tokenizer.json")
    os.lchown(model_dir / "tokenizer.json", owner, owner)
    res = hostctl(["model", "verify", "--json", "--config", str(cfg)], env_for_offline(tmp_path))
    assert res.returncode == 1, res.stdout + res.stderr
    verdict = json.loads(res.stdout)["verdict"]
    tok = next(f for f in verdict["files"] if f["name"] == "tokenizer.json")
    assert tok["found_size"] is None and tok["found_sha256"] is None  # root's file was not read through the link
    assert any("refused" in p and "tokenizer.json" in p for p in verdict["problems"])


def env_for_offline(tmp_path: Path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update({"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf-home")})
    return env


def test_cache_list_and_prune_use_no_outside_name_and_print_no_escape(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("root's\n")
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text("{}")
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "../outside/secret"}}))
    planes = tmp_path / "planes"
    hostile = planes / "v2" / "k\x1b]0;pwned\x07\x1b[2J"
    (hostile / "tp1-rank0").mkdir(parents=True)
    (hostile / "tp1-rank0" / "meta.json").write_text(json.dumps({"rank": 0, "ckpt_id": "x"}))
    (tmp_path / "recipe.yaml").write_text(json.dumps(
        {"id": "tiny", "model": REPO_ID, "revision": "0" * 40, "served_name": "tiny", "requires": {"gpus": 0},
         "context": 2048, "load_timeout_s": 60, "image": "hostctl/none:0"}))
    cfg = tmp_path / "hostctl.toml"
    cfg.write_text(f'name = "hubnames"\nrecipe = "recipe.yaml"\n[runtime]\nmodel_dir = "{ckpt}"\n'
                   f'[storage]\nplanes_cache = "{planes}"\n')
    before = _tree(tmp_path)
    env = env_for_offline(tmp_path)
    listed = hostctl(["cache", "list", "--json", "--config", str(cfg)], env)
    doc = json.loads(listed.stdout)
    assert doc["plan"]["ckpt_id"] is None and "'../outside/secret'" in doc["plan"]["ckpt_reason"]
    assert not any("\x1b" in json.dumps(g, ensure_ascii=False) for g in doc["generations"])
    for args in (["cache", "list"], ["cache", "prune", "--dry-run"], ["cache", "prune", "--yes"]):
        res = hostctl([*args, "--config", str(cfg)], env)
        assert "\x1b" not in res.stdout + res.stderr, args
    assert _tree(tmp_path) == before  # the named folder is neither removed nor renamed
