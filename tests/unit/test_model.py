"""hostctl.model without a hub: models files, how a recipe's model resolves and which revision
pins it, the pull's space arithmetic, the verify verdicts, hashing, the snapshot marker's digest,
`up`'s preflight and doctor's model.checkpoint check."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostctl import paths
from hostctl.config import load_config
from hostctl.doctor.checks.model import checkpoint as checkpoint_check
from hostctl.doctor.registry import CheckContext
from hostctl.errors import InputError
from hostctl.facts import load_snapshot
from hostctl.facts import hashing
from hostctl.facts.checkpoint import probe_checkpoint
from hostctl.model.hub import RemoteFile, RemoteSnapshot
from hostctl.facts.manifest import Manifest, ManifestFile
from hostctl.model.manifest import marker_digest, write_manifest
from hostctl.model.pull import plan_pull
from hostctl.model.registry import load_models, parse_models
from hostctl.model.resolve import load_ref
from hostctl.model.verify import judge
from hostctl.service import preflight
from tests.need import needs

HOSTS = paths.hosts_dir()
PIN = "9e165c30e2704aec5d9d593cce3eebd58bbef1cb"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def config_with(tmp_path: Path, recipe: dict, runtime: str = "", models: dict | None = None):
    base = {"id": "t", "served_name": "t", "requires": {"gpus": 0}, "context": 1024, "load_timeout_s": 60,
            "image": "img:1"}
    (tmp_path / "r.yaml").write_text(json.dumps({**base, **recipe}))
    if models is not None:
        (tmp_path / "models.yaml").write_text(json.dumps({"models": models}))
        runtime += '\nmodels_file = "models.yaml"'
    (tmp_path / "h.toml").write_text(f'name = "t"\nrecipe = "r.yaml"\n[runtime]\n{runtime}\n')
    return load_config(tmp_path / "h.toml")


# ---------------------------------------------------------------- models file and resolution


def test_the_bundled_models_file_pins_the_revision_vllm_moet_pins():
    models = load_models(paths.resource_root() / "runtime" / "models.yaml")
    entry = models["DeepSeek-V4-Flash-0731"]
    assert (entry.hf_repo, entry.revision, entry.approx_gb) == ("deepseek-ai/DeepSeek-V4-Flash-0731", PIN, 156)


@pytest.mark.parametrize("host", ["pro6000x2-desktop", "pro6000x1-mapped", "pro6000x1-resident"])
def test_bundled_gpu_recipes_resolve_through_the_models_file_to_their_pin(host):
    cfg = load_config(HOSTS / f"{host}.toml")
    assert cfg.recipe.revision == PIN
    ref = load_ref(cfg)
    assert ref.kind == "registry" and ref.repo == "deepseek-ai/DeepSeek-V4-Flash-0731"
    assert ref.revision == PIN and ref.pin_problem is None and ref.model_dir == cfg.profile.runtime.model_dir


def test_the_demo_model_is_inside_the_image():
    ref = load_ref(load_config(HOSTS / "demo-cpu.toml"))
    assert ref.kind == "image" and not ref.on_host and "inside the runtime image" in ref.describe()


def test_a_models_file_in_vllm_moets_format_is_read_unchanged(tmp_path):
    text = """
models:
  Big-MoE:
    # a comment, and a key hostctl does not use
    hf_repo: org/Big-MoE
    revision: 6976c7ff1b30a1b2cb7805021b8ba4684041f136
    approx_gb: 149
    notes: kept by its owner
  Drafter:
    hf_repo: other/drafter
    revision: 4ad05cb906e07bc93c4c40f9e24613e5c61f3a3c
    approx_gb: 4
"""
    (tmp_path / "m.yaml").write_text(text)
    models = load_models(tmp_path / "m.yaml")
    assert set(models) == {"Big-MoE", "Drafter"} and models["Drafter"].approx_gb == 4


@pytest.mark.parametrize("spec, field", [({"revision": COMMIT}, "models.X.hf_repo"),
                                          ({"hf_repo": "no-slash"}, "models.X.hf_repo"),
                                          ({"hf_repo": "a/b", "approx_gb": "big"}, "models.X.approx_gb")])
def test_a_bad_models_file_names_the_field(spec, field):
    with pytest.raises(InputError) as e:
        parse_models({"models": {"X": spec}}, "m.yaml")
    assert e.value.exit_code == 2 and any(d.startswith(field) for d in e.value.details)


def test_resolution_order_path_then_registry_then_repository(tmp_path):
    models = {"Tiny": {"hf_repo": "org/tiny", "revision": COMMIT}}
    assert load_ref(config_with(tmp_path, {"model": "/in/image"}, models=models)).kind == "image"
    local = load_ref(config_with(tmp_path, {"model": "/in/image"}, 'model_dir = "/srv/m"'))
    assert local.kind == "local" and local.on_host and not local.pullable
    reg = load_ref(config_with(tmp_path, {"model": "Tiny"}, 'model_dir = "/srv/m"', models=models))
    assert (reg.kind, reg.repo, reg.revision) == ("registry", "org/tiny", COMMIT)
    hub = load_ref(config_with(tmp_path, {"model": "org/other", "revision": COMMIT.upper()}, 'model_dir = "/srv/m"'))
    assert (hub.kind, hub.repo, hub.revision, hub.revision_source) == ("hub", "org/other", COMMIT, "recipe revision")
    with pytest.raises(InputError) as e:
        load_ref(config_with(tmp_path, {"model": "Nowhere"}, models=models))
    assert e.value.exit_code == 2 and "Tiny" in e.value.details[0]


def test_which_revision_counts_and_branches_never_pin(tmp_path):
    other = "f" * 40
    cfg = config_with(tmp_path, {"model": "org/m", "revision": COMMIT}, f'model_revision = "{other}"')
    ref = load_ref(cfg)
    assert ref.revision == other and ref.revision_source == "profile runtime.model_revision" and ref.notes
    assert load_ref(cfg, "a" * 40).revision_source == "--revision"
    branch = load_ref(config_with(tmp_path, {"model": "org/m", "revision": "main"}))
    assert branch.revision is None and "branch or tag name" in branch.pin_problem and "--revision" in branch.pin_fix
    pinned_by_cli = load_ref(config_with(tmp_path, {"model": "org/m", "revision": "main"}), COMMIT)
    assert pinned_by_cli.revision == COMMIT and pinned_by_cli.pin_problem is None
    assert "no pinned revision" in load_ref(config_with(tmp_path, {"model": "org/m"})).pin_problem
    with pytest.raises(InputError, match="differs from the pin"):
        load_ref(config_with(tmp_path, {"model": "M", "revision": other}, models={"M": {"hf_repo": "o/m", "revision": COMMIT}}))


# ---------------------------------------------------------------- the pull's arithmetic


def _snapshot(*files: tuple[str, int]) -> RemoteSnapshot:
    return RemoteSnapshot(repo="org/m", commit=COMMIT, files=[RemoteFile(name=n, size=s, lfs_sha256=hashlib.sha256(n.encode()).hexdigest(), blob_id=None) for n, s in files])


def test_space_needed_counts_partials_and_files_already_there(tmp_path):
    snap = _snapshot(("a.safetensors", 1000), ("b.safetensors", 500), ("config.json", 10))
    (tmp_path / "b.safetensors").write_bytes(b"x" * 400)  # a wrong, shorter copy: replaced in place
    cp = probe_checkpoint(str(tmp_path))
    plan = plan_pull(snap, cp, {"a.safetensors": 300}, (str(tmp_path), 1300))
    assert plan.todo == ["a.safetensors", "b.safetensors", "config.json"]
    assert plan.need_bytes == (1000 - 300) + (500 - 400) + 10 and not plan.short
    assert plan_pull(snap, cp, {}, (str(tmp_path), 1000)).short


def test_files_checked_by_an_earlier_pull_are_kept(tmp_path):
    snap = _snapshot(("a.safetensors", 3))
    (tmp_path / "a.safetensors").write_bytes(b"abc")
    f = snap.files[0]
    m = Manifest(repo="org/m", revision=COMMIT, files=[ManifestFile(name=f.name, size=3, lfs=True, hub_sha256=f.lfs_sha256,
                                                                    sha256="x")])
    write_manifest(tmp_path, m)
    assert plan_pull(snap, probe_checkpoint(str(tmp_path)), {}, (str(tmp_path), 0)).kept == ["a.safetensors"]
    write_manifest(tmp_path, m.model_copy(update={"revision": "e" * 40}))  # another revision: nothing is kept
    assert plan_pull(snap, probe_checkpoint(str(tmp_path)), {}, (str(tmp_path), 10)).todo == ["a.safetensors"]


# ---------------------------------------------------------------- verify verdicts


def _checkpoint(tmp_path: Path, manifest: bool = True) -> Path:
    files = {"config.json": b"{}", "model.safetensors.index.json": json.dumps({"weight_map": {"w": "s1.safetensors",
                                                                                              "v": "s2.safetensors"}}).encode(),
             "s1.safetensors": b"1" * 100, "s2.safetensors": b"2" * 200}
    tmp_path.mkdir(parents=True, exist_ok=True)
    for n, d in files.items():
        (tmp_path / n).write_bytes(d)
    if manifest:
        write_manifest(tmp_path, Manifest(repo="org/m", revision=COMMIT, complete=True, files=[
            ManifestFile(name=n, size=len(d), sha256=hashlib.sha256(d).hexdigest()) for n, d in files.items()]))
    return tmp_path


def _ref(tmp_path, revision=COMMIT):
    return load_ref(config_with(tmp_path, {"model": "org/m", "revision": revision}, f'model_dir = "{tmp_path}"'))


def test_quick_and_full_verdicts(tmp_path):
    d = _checkpoint(tmp_path / "ckpt")
    ref = _ref(d)
    assert judge(ref, probe_checkpoint(str(d)), "quick").ok
    (d / "s2.safetensors").write_bytes(b"2" * 199 + b"X")
    cp = probe_checkpoint(str(d))
    assert judge(ref, cp, "quick").ok  # same size: only the full level can tell
    full = judge(ref, cp, "full", {n: hashlib.sha256((d / n).read_bytes()).hexdigest() for n in cp.sizes})
    assert not full.ok and [f.name for f in full.bad_files] == ["s2.safetensors"] and full.bad_files[0].status == "corrupt"
    (d / "s1.safetensors").unlink()
    quick = judge(ref, probe_checkpoint(str(d)), "quick")
    assert not quick.ok and quick.bad_files[0].status == "missing" and "hostctl model pull" in quick.fix
    other = judge(_ref(d, "e" * 40), probe_checkpoint(str(d)), "quick")
    assert any("pins " + "e" * 40 in p for p in other.problems)


def test_a_hand_placed_checkpoint_is_checked_for_presence_and_warned_about(tmp_path):
    d = _checkpoint(tmp_path / "ckpt", manifest=False)
    v = judge(_ref(d), probe_checkpoint(str(d)), "quick")
    assert v.ok and "not pulled by hostctl" in v.warnings[0] and "adopts" in v.fix
    (d / "config.json").unlink()
    assert "config.json is missing" in judge(_ref(d), probe_checkpoint(str(d)), "quick").problems


def test_an_unfinished_pull_never_verifies(tmp_path):
    d = _checkpoint(tmp_path / "ckpt")
    m = Manifest.model_validate_json((d / ".hostctl-model.json").read_text())
    write_manifest(d, m.model_copy(update={"complete": False}))
    v = judge(_ref(d), probe_checkpoint(str(d)), "quick")
    assert not v.ok and any("did not finish" in p for p in v.problems)


# ---------------------------------------------------------------- hashing and the marker


def test_digests_across_many_chunks_match_hashlib_and_git(tmp_path, monkeypatch):
    monkeypatch.setattr(hashing, "CHUNK", 1000)
    data = os.urandom(10_500)
    p = tmp_path / "f"
    p.write_bytes(data)
    seen = []
    d = hashing.digests(str(p), seen.append, blob_id=True)
    assert d.sha256 == hashlib.sha256(data).hexdigest() and sum(seen) == len(data) == d.size
    assert d.blob_id == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert hashing.read_only(str(p)) == len(data)


def test_a_read_error_reaches_the_caller(tmp_path):
    with pytest.raises(IsADirectoryError):
        hashing.digests(str(tmp_path))


def test_marker_digest_without_an_index_covers_the_weight_files():
    config = b"{}"
    shards = [("b.safetensors", 2, "bb"), ("a.safetensors", 1, "aa")]
    h = hashlib.sha256(b"vllm-moet-model-manifest-v1\0" + hashlib.sha256(config).digest())
    for name, size, sha in sorted(shards):
        h.update(json.dumps({"name": name, "size": size, "content_sha256": sha}, sort_keys=True, separators=(",", ":")).encode())
    assert marker_digest(config, None, shards) == h.hexdigest()


# ---------------------------------------------------------------- preflight and doctor


def test_preflight_says_the_demo_model_has_nothing_to_verify():
    said = []
    assert preflight.check_model(load_config(HOSTS / "demo-cpu.toml"), said.append) == []
    assert said == ["model: /opt/hostctl/models/tiny-moe is inside the image, nothing to verify"]


def test_preflight_fails_on_a_missing_shard_and_passes_a_whole_checkpoint(tmp_path):
    d = _checkpoint(tmp_path / "ckpt")
    cfg = config_with(tmp_path, {"model": "org/m", "revision": COMMIT}, f'model_dir = "{d}"')
    said = []
    assert preflight.check_model(cfg, said.append) == [] and "quick verify passed" in said[-1]
    (d / "s2.safetensors").unlink()
    failures = preflight.check_model(cfg)
    assert [f.id for f in failures] == ["model-checkpoint"] and "s2.safetensors: missing" in failures[0].details


def _doctor(cfg, cp=None):
    facts = load_snapshot(HOSTS / "demo-cpu.facts.json")
    return checkpoint_check(CheckContext(facts=facts, config=cfg, checkpoint=cp))


def test_doctor_model_checkpoint(tmp_path):
    assert _doctor(load_config(HOSTS / "demo-cpu.toml")).status == "skip"
    assert "inside the runtime image" in _doctor(load_config(HOSTS / "demo-cpu.toml")).summary
    d = _checkpoint(tmp_path / "ckpt")
    cfg = config_with(tmp_path, {"model": "org/m", "revision": COMMIT}, f'model_dir = "{d}"')
    r = _doctor(cfg, probe_checkpoint(str(d)))
    assert r.status == "warn" and "never fully verified" in r.summary and r.fix == "hostctl model verify"
    m = Manifest.model_validate_json((d / ".hostctl-model.json").read_text())
    write_manifest(d, m.model_copy(update={"verified_full_at": "2026-07-31T10:00:00+00:00"}))
    r = _doctor(cfg, probe_checkpoint(str(d)))
    assert r.status == "pass" and "2026-07-31" in r.summary
    other = config_with(tmp_path, {"model": "org/m", "revision": "e" * 40}, f'model_dir = "{d}"')
    r = _doctor(other, probe_checkpoint(str(d)))
    assert r.status == "fail" and "revision" in r.summary
    assert _doctor(cfg, None).status == "skip"  # a snapshot carries no checkpoint reading


def test_the_model_and_cache_commands_load_no_huggingface_hub_until_a_pull():
    code = ("import sys\nfrom hostctl.cli import main\n"
            "for argv in (['--help'], ['model', '--help'], ['cache', '--help'], ['model', 'pull', '--help']):\n"
            "    main(argv)\n"
            "print(sorted(m for m in sys.modules if m.startswith('huggingface_hub')))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_a_full_verify_marks_what_it_found_corrupt_and_clears_it_once_restored(tmp_path):
    from hostctl.model.verify import recorded

    d = _checkpoint(tmp_path / "ckpt")
    ref = _ref(d)
    good = (d / "s2.safetensors").read_bytes()
    (d / "s2.safetensors").write_bytes(b"Z" * len(good))
    cp = probe_checkpoint(str(d))
    hashes = {n: hashlib.sha256((d / n).read_bytes()).hexdigest() for n in cp.sizes}
    v = judge(ref, cp, "full", hashes)
    m = recorded(cp.manifest, "full", "2026-08-01T00:00:00+00:00", v)
    assert m.file("s2.safetensors").corrupt_since and m.verified_full_at is None
    write_manifest(d, m)
    quick = judge(ref, probe_checkpoint(str(d)), "quick")
    assert not quick.ok and quick.bad_files[0].line().startswith("s2.safetensors: corrupt")
    snap = RemoteSnapshot(repo="org/m", commit=COMMIT, files=[RemoteFile(name="s2.safetensors", size=len(good), lfs_sha256="h" * 64, blob_id=None)])
    with_hub = m.model_copy(update={"files": [f.model_copy(update={"hub_sha256": "h" * 64, "lfs": True}) for f in m.files]})
    for corrupt, kept in ((None, ["s2.safetensors"]), ("2026-08-01T00:00:00+00:00", [])):
        entry = with_hub.file("s2.safetensors").model_copy(update={"corrupt_since": corrupt})
        with_hub.put(entry)
        write_manifest(d, with_hub)
        assert plan_pull(snap, probe_checkpoint(str(d)), {}, (str(d), 10**9)).kept == kept
    (d / "s2.safetensors").write_bytes(good)
    cp = probe_checkpoint(str(d))
    hashes = {n: hashlib.sha256((d / n).read_bytes()).hexdigest() for n in cp.sizes}
    v = judge(ref, cp, "full", hashes)
    assert v.ok
    assert recorded(cp.manifest, "full", "2026-08-02T00:00:00+00:00", v).file("s2.safetensors").corrupt_since is None


def test_progress_shows_the_file_and_the_whole_run_at_a_terminal_and_a_line_per_file_elsewhere():
    import io

    from hostctl.model.progress import Progress

    class Tty(io.StringIO):
        def isatty(self):
            return True

    tty, log = Tty(), io.StringIO()
    for stream in (tty, log):
        p = Progress(stream, "downloading", 2, 3 * 1024**2)
        p.start("a.safetensors", 1024**2)
        p.add(1024**2)
        p.finish("checked")
        p.start("b.safetensors", 2 * 1024**2, already=1024**2)
        p.add(1024**2)
        p.finish("checked")
    last = tty.getvalue().rsplit("\r", 1)[-1]
    assert "[2/2] downloading b.safetensors 2 MiB/2 MiB | all 2 MiB/3 MiB" in last
    assert log.getvalue().splitlines() == ["[1/2] downloading a.safetensors (1 MiB)", "[1/2] a.safetensors: checked",
                                           "[2/2] downloading b.safetensors (2 MiB, resuming at 1 MiB)",
                                           "[2/2] b.safetensors: checked"]


@pytest.mark.parametrize("command", [["model", "pull"], ["model", "verify"], ["cache", "list"], ["cache", "verify"],
                                     ["cache", "prune", "--dry-run"]])
def test_model_and_cache_commands_read_this_host_and_refuse_a_snapshot(command, capsys):
    from hostctl.cli import main

    code = main(command + ["--config", str(HOSTS / "demo-cpu.toml"), "--facts", str(HOSTS / "demo-cpu.facts.json")])
    assert code == 2 and "acts on this host" in capsys.readouterr().err


# ---------------------------------------------------------------- names from outside (issue 26 class 2)


def test_a_manifest_naming_a_file_outside_fails_verify_and_is_not_read(tmp_path):
    d = _checkpoint(tmp_path / "ckpt")
    secret = tmp_path / "secret"
    secret.write_bytes(b"root only")
    doc = json.loads((d / ".hostctl-model.json").read_text())
    doc["files"].append({"name": "../secret", "size": 9, "sha256": hashlib.sha256(b"root only").hexdigest()})
    (d / ".hostctl-model.json").write_text(json.dumps(doc))
    cp = probe_checkpoint(str(d))
    assert cp.manifest is None and cp.manifest_unsafe and "../secret" not in cp.sizes
    v = judge(_ref(d), cp, "full", {})
    assert not v.ok and any("'../secret'" in p for p in v.problems) and ".hostctl-model.json" in v.fix
    assert all(f.name != "../secret" for f in v.files)


def test_an_index_naming_a_shard_outside_is_an_index_problem(tmp_path):
    d = _checkpoint(tmp_path / "ckpt", manifest=False)
    (tmp_path / "secret").write_bytes(b"root only")
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {"w": "/etc/passwd", "v": "../secret"}}))
    cp = probe_checkpoint(str(d))
    assert cp.shards is None and "'../secret'" in (cp.index_error or "")  # the first bad name, in order
    assert set(cp.sizes) == {"config.json"}
    assert not judge(_ref(d), cp, "quick").ok


def test_every_file_checked_is_said_only_when_each_one_was(tmp_path):
    from hostctl.model.pull import PullReport

    snap = _snapshot(("a.safetensors", 3), ("b.safetensors", 3))
    plan = plan_pull(snap, probe_checkpoint(str(tmp_path)), {}, (str(tmp_path), 10**6))
    report = PullReport(ref=_ref(tmp_path), dry_run=False, plan=plan, statuses={"a.safetensors": "downloaded"})
    assert "every file checked" not in report.text() and "b.safetensors" in report.text()
    report.statuses["b.safetensors"] = "adopted"
    assert "every file checked" in report.text()


@needs(os.geteuid() == 0, "needs root: the checkpoint is chowned to another user")
def test_a_checkpoint_the_user_owns_is_probed_at_boot_when_only_root_is_trusted(tmp_path, monkeypatch):
    monkeypatch.delenv("SUDO_UID", raising=False)  # as the runtime unit runs `up`
    d = _checkpoint(tmp_path / "ckpt")
    ref = _ref(d)  # the profile itself is root's
    for p in [d, *d.iterdir()]:
        if p.suffix != ".toml" and p.suffix != ".yaml":
            os.lchown(p, 65534, 65534)
    cp = probe_checkpoint(str(d))
    assert not cp.refused and cp.manifest is not None and set(cp.sizes) >= {"s1.safetensors", "s2.safetensors"}
    assert judge(ref, cp, "quick").ok
