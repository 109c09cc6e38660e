"""vLLM-MoET's own `runner/bench.py` and `hostctl bench`, the same recipe (the CPU demo) and the same
suite (vLLM-MoET's, from ../shared/vllm-moet-bench), one after the other on this machine: each
probe's verdict and numbers side by side.

  1. hostctl: `hostctl up` of the demo (port 18597, Compose project hc5-moetsbs), `hostctl bench
     --suite <the copy's suite file>`, `hostctl down`;
  2. vLLM-MoET: bench.py run in a bench folder of its own whose box's `vllm` is `hostctl up
     --foreground` on port 8123 (project hc5-moet-run); bench.py boots, benches and stops it
     (tests/moet_bench_run.py says what bench.py needs and how it gets it).

Run as root on a machine with Docker and the demo image (hostctl.images builds it), under the
shared lock on the dev box:
    flock /tmp/hostctl-docker.lock python3 benchmarks/moet_bench_side_by_side.py [--suite quick]
Everything started is removed; the two results are kept under --keep DIR when given.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "system"))

import moet_bench_run as mb  # noqa: E402
import moet_runner  # noqa: E402
from hostctl import images  # noqa: E402
from runtime_fixtures import Host  # noqa: E402

HOSTCTL_PORT = 18597


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", default="quick", help="a suite of the copy (bench/suites/NAME.yaml)")
    ap.add_argument("--keep", type=Path, help="copy both result files here")
    args = ap.parse_args()
    copy = moet_runner.bench_dir()
    suite_file = copy / "suites" / f"{args.suite}.yaml"
    image = images.ensure_demo()
    image_id = subprocess.run(["docker", "image", "inspect", "--format", "{{.Id}}", image], capture_output=True,
                              text=True, check=True).stdout.strip()
    with tempfile.TemporaryDirectory(prefix="moet-sbs-") as t:
        tmp = Path(t)
        (tmp / "hostctl").mkdir()
        h = Host(tmp / "hostctl", "moetsbs", HOSTCTL_PORT)
        t0 = time.monotonic()
        try:
            rc, _, err, _ = h.run("up", timeout=600)
            if rc != 0:
                print(f"hostctl up failed (rc {rc}):\n{err[-3000:]}", file=sys.stderr)
                return 1
            rc, out, err, secs = h.run("bench", "--suite", str(suite_file), "--json", "--out",
                                       str(tmp / "hostctl-results"), timeout=1800)
            mine = json.loads(out)
        finally:
            h.run("down", timeout=300)
            h.cleanup()
        hostctl_s = time.monotonic() - t0
        (tmp / "moet").mkdir()
        host = Host(tmp / "moet", mb.PROJECT, mb.MOET_PORT)
        repo, revision = "hostctl/demo-tiny-moe", image_id.split(":", 1)[1][:40]
        model = mb.extract_model(image, tmp / "models-tiny-moe")
        mb.write_snapshot_marker(model, repo, revision)
        b = mb.make_bench(tmp, copy, model, repo=repo, revision=revision, profile=host.profile, sysroot=host.sysroot)
        t0 = time.monotonic()
        try:
            rc_m, log = mb.run_moet(b, args.suite, timeout=3600)
        finally:
            host.cleanup()
        moet_s = time.monotonic() - t0
        if not b.result_path().exists():
            print(f"bench.py wrote no result (rc {rc_m}):\n{log[-3000:]}", file=sys.stderr)
            return 1
        theirs = mb.load_json(b.result_path())
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            shutil.copy(b.result_path(), args.keep / "vllm-moet.json")
            (args.keep / "hostctl.json").write_text(json.dumps(mine, indent=2) + "\n")
    print(f"suite: vLLM-MoET's {args.suite} ({suite_file.relative_to(copy.parent)}), recipe: the CPU demo "
          f"(runtime/recipes/demo-cpu-tiny-moe.yaml; as {mb.RECIPE_ID} for bench.py), image {image_id[:19]}")
    print(f"hostctl bench: {mine['status']} (exit {rc}; bench {secs:.0f} s, up+bench+down {hostctl_s:.0f} s)")
    print(f"vLLM-MoET bench.py: {theirs['status']} (exit {rc_m}; load {theirs.get('load_time_s')} s through "
          f"hostctl up --foreground, boot+bench+stop {moet_s:.0f} s)")
    print()
    print(mb.table(mb.side_by_side(mine, theirs)), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
