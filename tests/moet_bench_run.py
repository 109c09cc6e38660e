"""vLLM-MoET's own `runner/bench.py` run against the demo runtime that `hostctl up` serves, and its
result set beside `hostctl bench`'s for the same recipe and suite (tests/system/test_moet_bench_run.py,
benchmarks/moet_bench_side_by_side.py).

What bench.py needs, given without changing the copy (it is read-only, and nothing of it is copied
here):
- its bench folder (recipes/, suites/, models.yaml, results/) is its runner's parent as
  os.path.abspath sees it (bench/runner/common.py: BENCH_DIR), so a temporary folder whose `runner`
  is a symlink to the copy's runner is a bench folder of its own;
- the demo's recipe under an id `<model>/<config>` (bench/runner/common.py: load_recipe wants the
  file's `id` to be that id) and `model` a name of the models file, as vLLM-MoET's recipes name it;
- a box: a venv runtime whose `venv/bin/vllm` is a small script written here that records its argv
  and execs `hostctl up --foreground` for a demo profile on the port bench.py asked for, so hostctl
  serves it through its whole gate; bench.py stops it with SIGINT to its process group
  (bench/runner/serverctl.py: Server.stop), and hostctl then takes the project down;
- the model on the host with a valid `.vllm-moet-snapshot.json` (bench/runner/common.py: compat,
  model_snapshot_error): the demo model is taken out of the image, the marker written by hostctl's
  own writer (hostctl.model.manifest.write_marker);
- `nvidia-smi`, which bench.py calls before the boot, for its fingerprint and at teardown: this
  machine has no GPU, so a stand-in that prints nothing is on PATH for bench.py's process only
  (a fake only for what this place cannot have; the fake `vllm` puts the real PATH back).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
DEMO_RECIPE = ROOT / "runtime" / "recipes" / "demo-cpu-tiny-moe.yaml"
MODEL_IN_IMAGE = "/opt/hostctl/models/tiny-moe"
MODEL_NAME = "tiny-moe"  # the models-file name vLLM-MoET's recipe gives as `model`
RECIPE_ID = "tiny-moe/demo-cpu"
BOX_ID = "demo-cpu-hostctl"
MOET_PORT = 8123  # vLLM-MoET's default (bench/runner/common.py: DEFAULT_PORT)
PROJECT = "moet-run"  # a Compose project of this test's own, never the shared demo's
RELEASE = "hostctl-demo"

# The numbers each probe kind reports in both runners' results, shown side by side.
NUMBERS = {"decode": ("median_tok_s", "min_tok_s", "max_tok_s"), "prefill": ("median_tok_s",),
           "arithmetic": ("score", "of"), "coherence": ("degenerate", "of")}


def moet_recipe() -> dict:
    """The demo recipe as vLLM-MoET names a recipe: only `id` and `model` differ (hostctl serves the
    unchanged demo recipe, whose model is a path inside its image)."""
    data = yaml.safe_load(DEMO_RECIPE.read_text())
    data.update(id=RECIPE_ID, model=MODEL_NAME)
    return data


def extract_model(image: str, dest: Path) -> Path:
    """The demo model out of the image (a created, never started, container; removed after)."""
    cid = subprocess.run(["docker", "create", image], capture_output=True, text=True, check=True).stdout.strip()
    try:
        subprocess.run(["docker", "cp", f"{cid}:{MODEL_IN_IMAGE}", str(dest)], capture_output=True, check=True)
    finally:
        subprocess.run(["docker", "rm", "-f", cid], capture_output=True)
    return dest


def write_snapshot_marker(model_dir: Path, repo: str, revision: str) -> Path:
    """vLLM-MoET's snapshot marker, written by hostctl's writer from a manifest of the files' hashes."""
    from hostctl.facts.hashing import digests
    from hostctl.facts.manifest import Manifest, ManifestFile
    from hostctl.model.manifest import write_marker

    files = []
    for p in sorted(model_dir.iterdir()):
        if p.is_file() and not p.name.startswith("."):
            d = digests(str(p))
            files.append(ManifestFile(name=p.name, size=d.size, sha256=d.sha256))
    marker = write_marker(model_dir, Manifest(repo=repo, revision=revision, complete=True, files=files))
    assert marker is not None, f"hostctl wrote no marker for {model_dir}: {[f.name for f in files]}"
    return marker


@dataclass
class MoetBench:
    """A bench folder of its own for the copy's runner, and a box for the demo."""

    root: Path  # the bench folder (BENCH_DIR)
    box: Path
    argv_file: Path  # what bench.py ran as `vllm serve ...`
    log_dir: Path
    fake_bin: Path  # nvidia-smi's stand-in

    def result_path(self) -> Path:
        return self.root / "results" / RELEASE / BOX_ID / (RECIPE_ID.replace("/", "__") + ".json")

    def log_path(self) -> Path:
        return self.log_dir / RELEASE / (RECIPE_ID.replace("/", "__") + ".log")


def make_bench(tmp: Path, copy: Path, model_dir: Path, *, repo: str, revision: str, profile: Path,
               sysroot: Path) -> MoetBench:
    root = tmp / "bench"
    (root / "recipes" / MODEL_NAME).mkdir(parents=True)
    (root / "runner").symlink_to(copy / "runner", target_is_directory=True)
    (root / "suites").symlink_to(copy / "suites", target_is_directory=True)
    (root / "recipes" / f"{RECIPE_ID}.yaml").write_text(yaml.safe_dump(moet_recipe(), sort_keys=False))
    (root / "models.yaml").write_text(yaml.safe_dump(
        {"models": {MODEL_NAME: {"hf_repo": repo, "revision": revision, "approx_gb": 0}}}))
    venv = tmp / "venv" / "bin"
    venv.mkdir(parents=True)
    # envinfo.collect asks the box venv's python for package versions: the test's own interpreter
    # answers (it has no vllm, so the fingerprint says None for it).
    (venv / "python").symlink_to(sys.executable)
    argv_file = tmp / "vllm-argv.json"
    vllm = venv / "vllm"
    vllm.write_text(
        f"#!{sys.executable}\n"
        "# vLLM-MoET's box runs `<venv>/bin/vllm serve MODEL --served-model-name X --port P ...`: record\n"
        "# that, then let hostctl serve the demo on that port through its whole gate.\n"
        "import json, os, sys\n"
        f"open({str(argv_file)!r}, 'w').write(json.dumps(sys.argv[1:]))\n"
        f"env = dict(os.environ, PATH={os.environ.get('PATH', '')!r}, HOSTCTL_SYSROOT={str(sysroot)!r})\n"
        f"os.chdir({str(ROOT)!r})\n"
        f"os.execve({sys.executable!r}, [{sys.executable!r}, '-m', 'hostctl', 'up', '--foreground', '--config', "
        f"{str(profile)!r}], env)\n")
    vllm.chmod(0o755)
    fake_bin = tmp / "fake-bin"
    fake_bin.mkdir()
    smi = fake_bin / "nvidia-smi"
    smi.write_text("#!/bin/sh\n# No GPU here: bench.py's GPU memory checks see no GPU in use.\nexit 0\n")
    smi.chmod(0o755)
    log_dir = tmp / "logs"
    box = tmp / "box.yaml"
    box.write_text(yaml.safe_dump({
        "id": BOX_ID, "runtime": "venv", "venv": str(tmp / "venv"), "gpus": {"count": 0, "vram_gb": 0},
        "host_ram_gb": 0, "models": {MODEL_NAME: str(model_dir)}, "log_dir": str(log_dir), "env": {}}))
    return MoetBench(root=root, box=box, argv_file=argv_file, log_dir=log_dir, fake_bin=fake_bin)


def run_moet(b: MoetBench, suite: str, *, timeout: float = 900) -> tuple[int, str]:
    """bench.py run; (exit code, its output)."""
    env = dict(os.environ, PATH=f"{b.fake_bin}:{os.environ.get('PATH', '')}", PYTHONDONTWRITEBYTECODE="1",
               VLLM_MOET_RESERVATION_DIR=str(b.root / "reservations"))
    p = subprocess.run([sys.executable, str(b.root / "runner" / "bench.py"), "run", "--recipe", RECIPE_ID,
                        "--box", str(b.box), "--release", RELEASE, "--suite", suite, "--port", str(MOET_PORT)],
                       capture_output=True, text=True, env=env, timeout=timeout, cwd=b.root)
    return p.returncode, p.stdout + p.stderr


def moet_status(probe: dict) -> str:
    return probe.get("status", "?")


def side_by_side(hostctl_doc: dict, moet_doc: dict) -> list[dict]:
    """One row per probe of the suite, in its order: each runner's status and numbers."""
    rows = []
    moet_probes = moet_doc.get("probes", {})
    for p in hostctl_doc["probes"]:
        m = moet_probes.get(p["key"], {})
        rows.append({"key": p["key"], "kind": p["kind"], "hostctl": p["status"], "vllm_moet": moet_status(m),
                     "hostctl_numbers": numbers(p["kind"], p), "vllm_moet_numbers": numbers(p["kind"], m),
                     "hostctl_reason": p.get("reason"), "vllm_moet_error": moet_error(m)})
    return rows


def numbers(kind: str, probe: dict) -> dict:
    """The headline numbers both results carry for this kind (batch_decode: aggregate tok/s per level)."""
    if kind == "batch_decode":
        return {f"c={n} tok/s": lv.get("aggregate_tok_s") for n, lv in (probe.get("levels") or {}).items()}
    return {f: probe[f] for f in NUMBERS.get(kind, ()) if probe.get(f) is not None}


def moet_error(m: dict) -> str | None:
    """What vLLM-MoET recorded as the failure: the probe's error, else its needle cases' errors."""
    if m.get("error"):
        return m["error"]
    errs = [c["error"] for c in m.get("cases") or [] if c.get("error")]
    return "; ".join(errs) if errs else None


def table(rows: list[dict]) -> str:
    def nums(d: dict) -> str:
        return ", ".join(f"{k} {v}" for k, v in d.items()) or "-"

    out = [f"{'probe':<12} {'hostctl':<9} {'vLLM-MoET':<10} {'hostctl numbers':<48} vLLM-MoET numbers"]
    for r in rows:
        out.append(f"{r['key']:<12} {r['hostctl']:<9} {r['vllm_moet']:<10} {nums(r['hostctl_numbers']):<48} "
                   f"{nums(r['vllm_moet_numbers'])}")
    for r in rows:
        if r["hostctl_reason"] or r["vllm_moet_error"]:
            out.append(f"  {r['key']}: hostctl: {r['hostctl_reason'] or '-'}")
            out.append(f"  {r['key']}: vLLM-MoET: {(r['vllm_moet_error'] or '-')[:300]}")
    return "\n".join(out) + "\n"


def load_json(path: Path) -> dict:
    return json.loads(path.read_text())
