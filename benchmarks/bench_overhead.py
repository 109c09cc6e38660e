"""What `hostctl bench`'s decode probe adds to the requests it times, side by side in one run, on
the CPU demo:

  A. `hostctl bench --suite decode-only.yaml --json` (one decode probe: 1 warm-up + N runs of the
     same greedy completion); its per-request wall times and tok/s from the result file;
  B. a plain httpx script sending exactly the same requests (same body, same prompt, one
     connection), timed with perf_counter around each request.

Rounds alternate A and B against one running runtime. Printed: the median tok/s of each, the
ratio A/B and hostctl's overhead per request in % (goal: < 5%), plus the whole `hostctl bench`
command's wall time (Python start, facts, plan and the result file included) for reference. On a
shared 2-core machine the speed drifts from round to round by more than the difference looked
for, so the headline is the median of the per-round paired ratios (A and B of one round ran
back to back), next to the ratio of the pooled medians.

Run as root on a machine with Docker and the demo image (hostctl.images builds it):
    python3 benchmarks/bench_overhead.py [--rounds 3] [--runs 5] [--max-tokens 128]
Port 18596; Compose project hc5-benchov; everything started is removed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hostctl import images  # noqa: E402
from hostctl.bench import text  # noqa: E402

PORT = 18596
PROJECT = "hc5-benchov"
RECIPE = ROOT / "runtime" / "recipes" / "demo-cpu-tiny-moe.yaml"


def hostctl(d: Path, env: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hostctl", *args, "--config", str(d / "hostctl.toml")],
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


def plain(base: str, model: str, runs: int, max_tokens: int) -> list[tuple[float, int]]:
    """The same requests as the decode probe, from a plain script: (wall s, completion tokens)."""
    body = {"model": model, "prompt": text.DECODE_PROMPT, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}
    out = []
    with httpx.Client(timeout=600, trust_env=False) as c:
        c.post(f"{base}/v1/completions", json=body).raise_for_status()  # warm-up, as the probe does
        for _ in range(runs):
            t0 = time.perf_counter()
            r = c.post(f"{base}/v1/completions", json=body)
            wall = time.perf_counter() - t0
            r.raise_for_status()
            out.append((wall, r.json()["usage"]["completion_tokens"]))
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--max-tokens", type=int, default=128)
    args = ap.parse_args()

    images.ensure_demo()
    tmp = Path(tempfile.mkdtemp(prefix="hostctl-benchov-"))
    (tmp / "sysroot").mkdir()
    (tmp / "cache").mkdir()
    (tmp / "recipe.yaml").write_text(RECIPE.read_text())
    (tmp / "hostctl.toml").write_text("\n".join([
        f'name = "{PROJECT}"', 'recipe = "recipe.yaml"', "[storage]", f'compile_cache = "{tmp / "cache"}"',
        "[runtime]", f'project = "{PROJECT}"', f"api_port = {PORT}"]) + "\n")
    (tmp / "decode-only.yaml").write_text(yaml.safe_dump(
        {"id": "decode-only", "probes": [{"kind": "decode", "runs": args.runs, "max_tokens": args.max_tokens}]}))
    env = dict(os.environ, HOSTCTL_SYSROOT=str(tmp / "sysroot"))
    base = f"http://127.0.0.1:{PORT}"
    a_tok, b_tok, a_wall, b_wall, a_cmd, paired = [], [], [], [], [], []
    try:
        up = hostctl(tmp, env, "up")
        if up.returncode != 0:
            print(up.stderr[-3000:], file=sys.stderr)
            return 1
        for r in range(1, args.rounds + 1):
            t0 = time.perf_counter()
            res = hostctl(tmp, env, "bench", "--suite", str(tmp / "decode-only.yaml"), "--json", "--out",
                          str(tmp / "results"))
            a_cmd.append(time.perf_counter() - t0)
            probe = json.loads(res.stdout)["probes"][0]
            a_tok += probe["samples_tok_s"]
            a_wall += probe["wall_s"]
            rows = plain(base, "tiny-moe", args.runs, args.max_tokens)
            b_wall += [w for w, _ in rows]
            b_tok += [n / w for w, n in rows]
            paired.append(statistics.median(probe["samples_tok_s"]) / statistics.median([n / w for w, n in rows]))
            print(f"round {r}: hostctl bench median {statistics.median(probe['samples_tok_s']):.1f} tok/s, "
                  f"plain script median {statistics.median([n / w for w, n in rows]):.1f} tok/s "
                  f"(hostctl bench command {a_cmd[-1]:.1f} s)", flush=True)
    finally:
        hostctl(tmp, env, "down", timeout=120)
        subprocess.run(["docker", "rm", "-f", f"{PROJECT}-runtime"], capture_output=True)
    ma, mb = statistics.median(a_tok), statistics.median(b_tok)
    wa, wb = statistics.median(a_wall), statistics.median(b_wall)
    print()
    print(f"{'':28}{'hostctl bench decode':>22}{'plain httpx script':>22}")
    print(f"{'median output tok/s':28}{ma:>22.2f}{mb:>22.2f}")
    print(f"{'median wall per request (s)':28}{wa:>22.4f}{wb:>22.4f}")
    print(f"{'requests measured':28}{len(a_tok):>22}{len(b_tok):>22}")
    pr = statistics.median(paired)
    print(f"per-round ratios hostctl/plain: {', '.join(f'{r:.3f}' for r in paired)}")
    print(f"median paired ratio hostctl/plain (tok/s): {pr:.4f}: hostctl adds {(1 / pr - 1) * 100:+.2f}% per request "
          "(goal < 5%)")
    print(f"pooled: ratio of medians {ma / mb:.4f}; median wall per request {(wa - wb) / wb * 100:+.2f}%")
    print(f"whole `hostctl bench` command, median: {statistics.median(a_cmd):.2f} s for {args.runs + 1} requests "
          "(includes Python start, facts, plan, the result file)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
