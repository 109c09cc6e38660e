"""`hostctl model pull|verify` end to end: the real huggingface_hub (plain HTTP path, Xet off)
against a loopback hub serving a tiny repository made here (hubserver.py), hostctl run as a
separate process. Covers a clean pull through a models file, a pull killed mid-file and resumed,
a corrupt shard found by the full verify, a filesystem too small (a loop-mounted ext4), a branch
name refused, and a token that appears in no output, file, state or support bundle.

huggingface_hub's Xet path (hf_xet) is not exercised here: the loopback hub sends no Xet headers.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

from hubserver import Hub, Repo
from loopdrives import check, host, restore_sysctls, sysroot  # noqa: F401  (fixtures)

MIB = 1024 * 1024
REPO_ID = "test-org/tiny-moe"


def make_repo(big: int = 5 * MIB + 7) -> Repo:
    rnd = os.urandom
    shards = {"model-00001-of-00002.safetensors": rnd(3 * MIB + 123), "model-00002-of-00002.safetensors": rnd(big)}
    index = {"metadata": {"total_size": sum(map(len, shards.values()))},
             "weight_map": {"layers.0.w": "model-00001-of-00002.safetensors",
                            "layers.1.w": "model-00002-of-00002.safetensors",
                            "layers.1.b": "model-00002-of-00002.safetensors"}}
    files = {"config.json": json.dumps({"model_type": "mixtral", "num_hidden_layers": 2}).encode(),
             "model.safetensors.index.json": json.dumps(index, indent=2).encode(),
             "tokenizer.json": json.dumps({"version": "1.0", "vocab": list(range(300))}).encode(),
             "README.md": b"# tiny\n", **shards}
    return Repo(REPO_ID, files, lfs=set(shards))


def write_config(tmp: Path, model_dir: Path, *, model: str = "TinyMoE", revision: str | None = None,
                 models_revision: str | None = None, repo: Repo | None = None) -> Path:
    """A profile and recipe naming the model; with `model` a registry name, a models file too."""
    recipe = {"id": "tiny", "model": model, "served_name": "tiny", "requires": {"gpus": 0}, "context": 2048,
              "load_timeout_s": 60, "image": "hostctl/none:0"}
    if revision is not None:
        recipe["revision"] = revision
    (tmp / "recipe.yaml").write_text(json.dumps(recipe))
    lines = ['name = "modeltest"', 'recipe = "recipe.yaml"', "[runtime]", f'model_dir = "{model_dir}"']
    if repo is not None:
        (tmp / "models.yaml").write_text(json.dumps(
            {"models": {"TinyMoE": {"hf_repo": repo.repo_id, "revision": models_revision or repo.commit, "approx_gb": 0.01}}}))
        lines.append('models_file = "models.yaml"')
    (tmp / "hostctl.toml").write_text("\n".join(lines) + "\n")
    return tmp / "hostctl.toml"


def env_for(hub: Hub, tmp: Path, token: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_") and "proxy" not in k.lower()}
    env.update({"HF_ENDPOINT": hub.url, "HF_HUB_DISABLE_XET": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
                "HF_HOME": str(tmp / "hf-home"), "NO_PROXY": "127.0.0.1,localhost", "PYTHONUNBUFFERED": "1"})
    if token:
        env["HF_TOKEN"] = token
    return env


def hostctl(args: list[str], env: dict, timeout: float = 120, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hostctl", *args], env=env, capture_output=True, text=True,
                          timeout=timeout, input=stdin if stdin is not None else "")


def marker_digest_independent(model_dir: Path) -> str:
    """vLLM-MoET's manifest_sha256, written from docs/model-and-cache-formats.md and re-hashing
    every shard from disk (not hostctl's code)."""
    h = hashlib.sha256(b"vllm-moet-model-manifest-v1\0")
    h.update(hashlib.sha256((model_dir / "config.json").read_bytes()).digest())
    raw = (model_dir / "model.safetensors.index.json").read_bytes()
    h.update(hashlib.sha256(raw).digest())
    for name in sorted(set(json.loads(raw)["weight_map"].values())):
        data = (model_dir / name).read_bytes()
        h.update(json.dumps({"name": name, "size": len(data), "content_sha256": hashlib.sha256(data).hexdigest()},
                            sort_keys=True, separators=(",", ":")).encode())
    return h.hexdigest()


@pytest.fixture
def repo() -> Repo:
    return make_repo()


def test_clean_pull_through_a_models_file_then_verify(tmp_path, repo):
    model_dir = tmp_path / "models" / "TinyMoE"
    cfg = write_config(tmp_path, model_dir, repo=repo)
    with Hub(repo) as hub:
        env = env_for(hub, tmp_path)
        res = hostctl(["model", "pull", "--config", str(cfg), "--json"], env)
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["schema"] == "hostctl.model/v1" and doc["action"] == "pull" and doc["ok"]
        assert doc["commit"] == repo.commit and doc["model"]["kind"] == "registry"
        assert doc["model"]["revision_source"].endswith("models.yaml revision")
        assert {f["name"]: f["status"] for f in doc["files"]} == {n: "downloaded" for n in repo.files}
        assert doc["downloaded_bytes"] == sum(map(len, repo.files.values()))
        assert not hub.requests(contains="revision/main")  # the commit was asked for, never a branch
        for name, data in repo.files.items():
            assert (model_dir / name).read_bytes() == data
        manifest = json.loads((model_dir / ".hostctl-model.json").read_text())
        assert manifest["complete"] and manifest["revision"] == repo.commit and manifest["repo"] == REPO_ID
        by_name = {f["name"]: f for f in manifest["files"]}
        for name, data in repo.files.items():
            assert by_name[name]["size"] == len(data) and by_name[name]["sha256"] == hashlib.sha256(data).hexdigest()
        marker = json.loads((model_dir / ".vllm-moet-snapshot.json").read_text())
        assert marker == {"schema": 2, "repo": REPO_ID, "revision": repo.commit,
                          "manifest_sha256": marker_digest_independent(model_dir)}

        # A second pull asks the hub for the file list and downloads nothing.
        before = len(hub.requests("GET", "/resolve/"))
        again = hostctl(["model", "pull", "--config", str(cfg), "--json"], env)
        assert again.returncode == 0, again.stderr
        assert {f["status"] for f in json.loads(again.stdout)["files"]} == {"kept"}
        assert len(hub.requests("GET", "/resolve/")) == before

    # Offline from here on: the hub is gone.
    quick = hostctl(["model", "verify", "--quick", "--config", str(cfg)], env)
    assert quick.returncode == 0, quick.stdout + quick.stderr
    full = hostctl(["model", "verify", "--config", str(cfg), "--json"], env)
    assert full.returncode == 0, full.stdout + full.stderr
    verdict = json.loads(full.stdout)["verdict"]
    assert verdict["ok"] and verdict["level"] == "full"
    assert {f["status"] for f in verdict["files"]} == {"ok"} and len(verdict["files"]) == len(repo.files)
    assert json.loads((model_dir / ".hostctl-model.json").read_text())["verified_full_at"]


def test_a_killed_pull_resumes_where_it_stopped(tmp_path):
    # huggingface_hub writes a download in 10 MiB pieces: the shard must be larger for a kill to leave part of it.
    repo = make_repo(big=26 * MIB + 7)
    model_dir = tmp_path / "ckpt"
    cfg = write_config(tmp_path, model_dir, model=REPO_ID, revision=repo.commit)
    big = "model-00002-of-00002.safetensors"
    with Hub(repo) as hub:
        env = env_for(hub, tmp_path)
        hub.throttle_bps = 6 * MIB
        proc = subprocess.Popen([sys.executable, "-m", "hostctl", "model", "pull", "--config", str(cfg)], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        partial = model_dir / ".cache" / "huggingface" / "download"
        deadline = time.monotonic() + 60
        got = 0
        try:
            while time.monotonic() < deadline:
                sizes = [p.stat().st_size for p in partial.glob(f"*.{repo.etag(big)}.incomplete")] if partial.is_dir() else []
                got = max(sizes, default=0)
                if got >= 10 * MIB:
                    break
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.05)
            else:
                pytest.fail("the download never got going")
            proc.send_signal(signal.SIGKILL)  # no chance to clean up: as a power cut or OOM kill
        finally:
            proc.wait(timeout=30)
        assert proc.returncode == -signal.SIGKILL
        assert not (model_dir / big).exists()
        manifest = json.loads((model_dir / ".hostctl-model.json").read_text())
        assert manifest["complete"] is False  # a half-done pull never looks finished
        left = max(p.stat().st_size for p in partial.glob(f"*.{repo.etag(big)}.incomplete"))
        assert left >= got >= 10 * MIB and left < len(repo.files[big])

        hub.throttle_bps = None
        res = hostctl(["model", "pull", "--config", str(cfg), "--json"], env)
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        resumed = [r for r in hub.requests("GET", big) if r.range]
        assert resumed and resumed[-1].range == f"bytes={left}-" and resumed[-1].status == 206
        assert doc["downloaded_bytes"] < sum(map(len, repo.files.values()))  # the partial bytes were not fetched again
        assert (model_dir / big).read_bytes() == repo.files[big]
        assert json.loads((model_dir / ".hostctl-model.json").read_text())["complete"] is True
        assert hostctl(["model", "verify", "--config", str(cfg)], env).returncode == 0


def test_full_verify_finds_a_corrupt_shard_quick_finds_a_short_one(tmp_path, repo):
    model_dir = tmp_path / "ckpt"
    cfg = write_config(tmp_path, model_dir, model=REPO_ID, revision=repo.commit)
    with Hub(repo) as hub:
        env = env_for(hub, tmp_path)
        assert hostctl(["model", "pull", "--config", str(cfg)], env).returncode == 0
    shard = model_dir / "model-00001-of-00002.safetensors"
    with open(shard, "r+b") as f:  # one flipped byte, same size: only a hash can tell
        f.seek(2 * MIB)
        b = f.read(1)
        f.seek(2 * MIB)
        f.write(bytes([b[0] ^ 0xFF]))
    assert hostctl(["model", "verify", "--quick", "--config", str(cfg)], env).returncode == 0
    full = hostctl(["model", "verify", "--config", str(cfg), "--json"], env)
    assert full.returncode == 1
    files = {f["name"]: f for f in json.loads(full.stdout)["verdict"]["files"]}
    assert files[shard.name]["status"] == "corrupt"
    assert {f["status"] for n, f in files.items() if n != shard.name} == {"ok"}
    text = hostctl(["model", "verify", "--config", str(cfg)], env)
    assert text.returncode == 1 and shard.name in text.stdout and "corrupt" in text.stdout
    # Once found, the corruption fails the quick verify too (so `up`), and the next pull fetches that file again.
    assert hostctl(["model", "verify", "--quick", "--config", str(cfg)], env).returncode == 1
    with Hub(repo) as hub:
        env = env_for(hub, tmp_path)
        fixed = hostctl(["model", "pull", "--config", str(cfg), "--json"], env)
        assert fixed.returncode == 0, fixed.stderr
        statuses = {f["name"]: f["status"] for f in json.loads(fixed.stdout)["files"]}
        assert statuses[shard.name] == "downloaded" and set(statuses.values()) == {"downloaded", "kept"}
        assert [r.path.rsplit("/", 1)[-1] for r in hub.requests("GET", "/resolve/")] == [shard.name]
    assert shard.read_bytes() == repo.files[shard.name]
    assert hostctl(["model", "verify", "--config", str(cfg)], env).returncode == 0

    other = model_dir / "model-00002-of-00002.safetensors"
    with open(other, "r+b") as f:
        f.truncate(MIB)
    (model_dir / "tokenizer.json").unlink()
    quick = hostctl(["model", "verify", "--quick", "--config", str(cfg), "--json"], env)
    assert quick.returncode == 1
    files = {f["name"]: f["status"] for f in json.loads(quick.stdout)["verdict"]["files"]}
    assert files[other.name] == "wrong_size" and files["tokenizer.json"] == "missing"


def test_too_little_space_is_refused_before_the_first_byte(tmp_path, repo, host):
    drive = host.drive("8MiB", "small")
    check(["mkfs.ext4", "-q", "-F", "-m", "0", drive.dev])
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    check(["mount", drive.dev, str(mnt)])
    free = os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize
    assert free < sum(map(len, repo.files.values()))
    model_dir = mnt / "ckpt"
    cfg = write_config(tmp_path, model_dir, model=REPO_ID, revision=repo.commit)
    with Hub(repo) as hub:
        res = hostctl(["model", "pull", "--config", str(cfg)], env_for(hub, tmp_path))
        assert res.returncode == 1, res.stderr
        assert "not enough space" in res.stderr
        assert f"({free} bytes) free" in res.stderr
        assert f"({sum(map(len, repo.files.values()))} bytes) more" in res.stderr
        assert not hub.requests(contains="/resolve/")  # not one byte was asked for
    assert not model_dir.exists()
    dry = None
    with Hub(repo) as hub:
        dry = hostctl(["model", "pull", "--dry-run", "--config", str(cfg)], env_for(hub, tmp_path))
    assert dry.returncode == 1 and "not enough space" in dry.stderr


def test_a_branch_name_is_refused_unless_revision_pins_a_commit(tmp_path, repo):
    model_dir = tmp_path / "ckpt"
    cfg = write_config(tmp_path, model_dir, model=REPO_ID, revision="main")
    with Hub(repo) as hub:
        env = env_for(hub, tmp_path)
        res = hostctl(["model", "pull", "--config", str(cfg)], env)
        assert res.returncode == 2, res.stderr
        assert "branch or tag name" in res.stderr and "--revision" in res.stderr
        bad = hostctl(["model", "pull", "--config", str(cfg), "--revision", "main"], env)
        assert bad.returncode == 2 and "--revision 'main'" in bad.stderr
        assert hub.log == [] and not model_dir.exists()  # refused before anything was asked or written
        ok = hostctl(["model", "pull", "--config", str(cfg), "--revision", repo.commit, "--json"], env)
        assert ok.returncode == 0, ok.stderr
        assert json.loads(ok.stdout)["model"]["revision_source"] == "--revision"
    # a registry entry pinned to a branch is refused the same way
    cfg2 = write_config(tmp_path, tmp_path / "ckpt2", repo=repo, models_revision="main")
    with Hub(repo) as hub:
        res = hostctl(["model", "pull", "--config", str(cfg2)], env_for(hub, tmp_path))
        assert res.returncode == 2 and "models.yaml revision 'main'" in res.stderr


def test_the_token_never_appears_in_output_files_state_or_bundle(tmp_path, repo, monkeypatch):
    token = "hf_" + os.urandom(16).hex()
    model_dir = tmp_path / "ckpt"
    cfg = write_config(tmp_path, model_dir, model=REPO_ID, revision=repo.commit)
    state = Path(os.environ["HOSTCTL_SYSROOT"])
    with Hub(repo, token=token) as hub:
        denied = hostctl(["model", "pull", "--config", str(cfg)], env_for(hub, tmp_path))
        assert denied.returncode == 1 and "gated" in denied.stderr and "HF_TOKEN" in denied.stderr
        env = env_for(hub, tmp_path, token)
        outputs = []
        for args in (["model", "pull", "--config", str(cfg), "--dry-run"], ["model", "pull", "--config", str(cfg)],
                     ["model", "pull", "--config", str(cfg), "--json"], ["model", "verify", "--config", str(cfg), "--json"]):
            res = hostctl(args, env)
            assert res.returncode == 0, res.stderr
            outputs += [res.stdout, res.stderr]
        assert json.loads(outputs[-4])["token_source"] == "HF_TOKEN"  # where the token came from, not what it is (a key named "token" would be redacted)
        served = hub.requests(contains="/resolve/")
        assert served and all(r.authorized for r in served)  # the token was used for every file
        bundle = tmp_path / "support.tar.gz"
        doc = hostctl(["doctor", "--config", str(cfg), "--bundle", str(bundle)], env, timeout=180)
        outputs += [doc.stdout, doc.stderr]
    assert bundle.is_file()
    for text in outputs:
        assert token not in text
    scanned = 0
    for root in (model_dir, state, tmp_path / "hf-home"):
        for p in root.rglob("*"):
            if p.is_file():
                assert token.encode() not in p.read_bytes(), p
                scanned += 1
    with tarfile.open(bundle) as tar:
        for member in tar.getmembers():
            if member.isfile():
                assert token.encode() not in tar.extractfile(member).read(), member.name
                scanned += 1
    assert scanned > len(repo.files)


def test_the_recipes_extra_models_are_pulled_into_models_dir_with_the_model(tmp_path, repo):
    # vLLM-MoET's recipes name a drafter in requires.extra_models (a models-file name, served as
    # {model:NAME}); pull fetches it at its pin into runtime.models_dir/NAME with the model, one hub.
    draft = Repo("test-org/tiny-moe-draft", {"config.json": b'{"model_type": "eagle"}',
                                            "model.safetensors": os.urandom(2 * MIB + 5)}, lfs={"model.safetensors"})
    model_dir, models_dir = tmp_path / "models" / "TinyMoE", tmp_path / "extra"
    cfg = write_config(tmp_path, model_dir, repo=repo)
    recipe = json.loads((tmp_path / "recipe.yaml").read_text())
    recipe["requires"]["extra_models"] = ["TinyMoE-draft"]
    (tmp_path / "recipe.yaml").write_text(json.dumps(recipe))
    models = json.loads((tmp_path / "models.yaml").read_text())
    models["models"]["TinyMoE-draft"] = {"hf_repo": draft.repo_id, "revision": draft.commit, "approx_gb": 0.01}
    (tmp_path / "models.yaml").write_text(json.dumps(models))
    cfg.write_text(cfg.read_text() + f'models_dir = "{models_dir}"\n')
    with Hub(repo, also=(draft,)) as hub:
        env = env_for(hub, tmp_path)
        dry = hostctl(["model", "pull", "--dry-run", "--config", str(cfg), "--json"], env)
        assert dry.returncode == 0, dry.stderr
        assert [x["commit"] for x in json.loads(dry.stdout)["extra_models"]] == [draft.commit]
        assert not (models_dir / "TinyMoE-draft").exists()  # a dry run writes nothing
        res = hostctl(["model", "pull", "--config", str(cfg), "--json"], env)
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["commit"] == repo.commit and doc["skipped"] is None
        (x,) = doc["extra_models"]
        assert x["model"]["model"] == "TinyMoE-draft" and x["commit"] == draft.commit
        assert x["dir"] == str(models_dir / "TinyMoE-draft")
        assert {f["name"]: f["status"] for f in x["files"]} == {n: "downloaded" for n in draft.files}
        for name, data in draft.files.items():
            assert (models_dir / "TinyMoE-draft" / name).read_bytes() == data
        manifest = json.loads((models_dir / "TinyMoE-draft" / ".hostctl-model.json").read_text())
        assert manifest["complete"] and manifest["repo"] == draft.repo_id and manifest["revision"] == draft.commit
        assert hub.requests("GET", f"/{draft.repo_id}/resolve/{draft.commit}/")
        again = hostctl(["model", "pull", "--config", str(cfg), "--json"], env)
        assert {f["status"] for f in json.loads(again.stdout)["extra_models"][0]["files"]} == {"kept"}
        # A name the models file does not have is bad input naming the field; nothing is fetched.
        recipe["requires"]["extra_models"] = ["TinyMoE-draft", "Nope"]
        (tmp_path / "recipe.yaml").write_text(json.dumps(recipe))
        before = len(hub.log)
        bad = hostctl(["model", "pull", "--config", str(cfg)], env)
        assert bad.returncode == 2 and "requires.extra_models[1]: 'Nope'" in bad.stderr, bad.stderr
        assert len(hub.log) == before
