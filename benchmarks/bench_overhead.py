"""What `hostctl bench`'s decode probe adds to the requests it times, next to the same requests
sent by a plain script, side by side in one run on the CPU demo. Built for a noisy machine (the
dev box is 2 cores shared with other jobs; the runtime's own speed drifts by more than the 5%
looked for): A and B alternate inside every round, their order flips each round, rounds are many
and short, and the headline is the median of per-round ratios with its interquartile range.

  A. hostctl's decode probe (hostctl.bench.probes.decode, the function `hostctl bench` runs), in
     this process: a warm-up, then --runs timed completions; the tok/s it reports;
  B. a plain httpx script: the same warm-up and the same --runs requests (same body, one
     connection), each timed with perf_counter.

The same thing is measured both ways for both sides: the client's tok/s (completion tokens the
server reported / client wall time), and the server's own time for the very same requests
(vLLM's /metrics: the change in vllm:e2e_request_latency_seconds_sum and in
vllm:generation_tokens_total across each side of a round, scraped outside the timed requests,
once the server has counted that side's requests: it records them a moment after answering).
The server's time moves with the machine's load but not with the client, so
  overhead = (A's client time / A's server time) / (B's client time / B's server time) - 1
is what hostctl's client path adds per request with the drift of the server divided out.

Also, for reference: --cli-rounds runs of the whole `hostctl bench --suite decode-only.yaml`
command (Python start, facts, plan, result file), alternating with a plain batch.

Run as root on a machine with Docker and the demo image (hostctl.images builds it), under the
shared lock on the dev box:
    flock /tmp/hostctl-docker.lock python3 benchmarks/bench_overhead.py [--rounds 30] [--runs 2]
Port 18596; Compose project hc5-benchov; everything started is removed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
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
from hostctl.bench import probes, text  # noqa: E402
from hostctl.bench.client import Api  # noqa: E402
from hostctl.bench.suites import ProbeSpec  # noqa: E402

PORT = 18596
PROJECT = "hc5-benchov"
MODEL = "tiny-moe"
RECIPE = ROOT / "runtime" / "recipes" / "demo-cpu-tiny-moe.yaml"
_METRIC = re.compile(r"^(vllm:e2e_request_latency_seconds_(?:sum|count)|vllm:generation_tokens_total)(\{[^}]*\})?"
                     r"\s+(\S+)$")


def hostctl(d: Path, env: dict, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "hostctl", *args, "--config", str(d / "hostctl.toml")],
                          capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT)


def server_counters(base: str, at_least: float = 0, wait_s: float = 10) -> tuple[float, float, float]:
    """(seconds of end-to-end request latency, requests finished, generation tokens) the server
    has counted so far. The server records a request's stats a moment after its response goes
    out, so this waits (up to wait_s) until `at_least` requests are counted: each side of a round
    is charged with exactly its own requests."""
    deadline = time.monotonic() + wait_s
    while True:
        lat = count = tok = 0.0
        for line in httpx.get(f"{base}/metrics", timeout=30, trust_env=False).text.splitlines():
            m = _METRIC.match(line)
            if m:
                name, value = m.group(1), float(m.group(3))
                if name.endswith("_sum"):
                    lat += value
                elif name.endswith("_count"):
                    count += value
                else:
                    tok += value
        if count >= at_least or time.monotonic() > deadline:
            return lat, count, tok
        time.sleep(0.05)


def side_a(api: Api, runs: int, max_tokens: int) -> tuple[list[float], int]:
    ctx = probes.ProbeContext(api=api, context=2048, max_num_seqs=2, say=lambda m: None)
    doc = probes.decode(ctx, ProbeSpec(key="decode", kind="decode", params={"runs": runs, "max_tokens": max_tokens}))
    return doc["wall_s"], sum(doc["completion_tokens"])


def side_b(c: httpx.Client, base: str, runs: int, max_tokens: int) -> tuple[list[float], int]:
    body = {"model": MODEL, "prompt": text.DECODE_PROMPT, "max_tokens": max_tokens, "temperature": 0,
            "ignore_eos": True}
    c.post(f"{base}/v1/completions", json=body).raise_for_status()  # warm-up, as the probe does
    walls, tokens = [], 0
    for _ in range(runs):
        t0 = time.perf_counter()
        r = c.post(f"{base}/v1/completions", json=body)
        walls.append(time.perf_counter() - t0)
        r.raise_for_status()
        tokens += r.json()["usage"]["completion_tokens"]
    return walls, tokens


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    if len(xs) < 2:
        return xs[0], xs[0], xs[0]
    q = statistics.quantiles(xs, n=4, method="inclusive")
    return q[0], statistics.median(xs), q[2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--runs", type=int, default=2, help="timed requests per side per round")
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--cli-rounds", type=int, default=4)
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
    rows = []  # per round: client tok/s ratio, server tok/s ratio, overhead ratio
    cli = []
    load0 = os.getloadavg()
    try:
        up = hostctl(tmp, env, "up")
        if up.returncode != 0:
            print(up.stderr[-3000:], file=sys.stderr)
            return 1
        with Api(base, MODEL) as api, httpx.Client(timeout=600, trust_env=False) as plain:
            for r in range(1, args.rounds + 1):
                got = {}
                for side in (("A", "B") if r % 2 else ("B", "A")):
                    lat0, n0, tok0 = server_counters(base)
                    walls, tokens = (side_a(api, args.runs, args.max_tokens) if side == "A"
                                     else side_b(plain, base, args.runs, args.max_tokens))
                    lat1, n1, tok1 = server_counters(base, at_least=n0 + args.runs + 1)
                    if n1 - n0 != args.runs + 1:
                        print(f"round {r} {side}: the server counted {n1 - n0:g} requests, not {args.runs + 1}",
                              file=sys.stderr)
                    # the server's counters include the warm-up request: subtract it by its share
                    # of the tokens (every request has the same max_tokens and ignore_eos)
                    share = args.runs / (args.runs + 1)
                    got[side] = {"client_s": sum(walls), "tokens": tokens, "server_s": (lat1 - lat0) * share,
                                 "server_tokens": (tok1 - tok0) * share}
                a, b = got["A"], got["B"]
                if min(a["server_s"], b["server_s"], a["server_tokens"], b["server_tokens"]) <= 0:
                    print("the server's /metrics has no vllm:e2e_request_latency_seconds_sum or "
                          "vllm:generation_tokens_total that moved: cannot measure the server's side", file=sys.stderr)
                    return 1
                client = (a["tokens"] / a["client_s"]) / (b["tokens"] / b["client_s"])
                server = (a["server_tokens"] / a["server_s"]) / (b["server_tokens"] / b["server_s"])
                over = (a["client_s"] / a["server_s"]) / (b["client_s"] / b["server_s"])
                rows.append((client, server, over))
                print(f"round {r:2d} ({'AB' if r % 2 else 'BA'}): client tok/s A/B {client:.3f}, server tok/s A/B "
                      f"{server:.3f}, (client/server time) A/B {over:.3f}; A {a['tokens'] / a['client_s']:.1f} tok/s, "
                      f"B {b['tokens'] / b['client_s']:.1f} tok/s", flush=True)
        for r in range(1, args.cli_rounds + 1):
            with httpx.Client(timeout=600, trust_env=False) as plain:
                order = ("cli", "plain") if r % 2 else ("plain", "cli")
                got = {}
                for side in order:
                    if side == "cli":
                        t0 = time.perf_counter()
                        res = hostctl(tmp, env, "bench", "--suite", str(tmp / "decode-only.yaml"), "--json",
                                      "--out", str(tmp / "results"))
                        cmd_s = time.perf_counter() - t0
                        got["cli"] = json.loads(res.stdout)["probes"][0]["median_tok_s"]
                    else:
                        walls, tokens = side_b(plain, base, args.runs, args.max_tokens)
                        got["plain"] = statistics.median([tokens / args.runs / w for w in walls])
            cli.append((got["cli"] / got["plain"], cmd_s))
            print(f"cli round {r}: `hostctl bench` decode {got['cli']:.1f} tok/s, plain {got['plain']:.1f} tok/s, "
                  f"ratio {cli[-1][0]:.3f}; the whole command {cmd_s:.1f} s", flush=True)
    finally:
        hostctl(tmp, env, "down", timeout=120)
        subprocess.run(["docker", "rm", "-f", f"{PROJECT}-runtime"], capture_output=True)
    load1 = os.getloadavg()
    print()
    print(f"{len(rows)} rounds x {args.runs} timed requests per side ({args.max_tokens} tokens each), A/B alternating "
          f"order; load average {load0[0]:.2f} at the start, {load1[0]:.2f} {load1[1]:.2f} {load1[2]:.2f} at the end "
          f"({os.cpu_count()} CPUs)")
    for i, what in enumerate(("client tok/s, hostctl probe / plain script",
                              "server tok/s for the same requests (A / B)",
                              "(client time / server time), hostctl / plain")):
        q1, med, q3 = quartiles([row[i] for row in rows])
        print(f"  {what:46s} median {med:.4f}  IQR {q1:.4f} - {q3:.4f}")
    q1, med, q3 = quartiles([row[2] for row in rows])
    print(f"hostctl's decode probe adds {(med - 1) * 100:+.2f}% per request (IQR {(q1 - 1) * 100:+.2f}% to "
          f"{(q3 - 1) * 100:+.2f}%), its server's drift divided out; goal < 5%: "
          f"{'met' if med < 1.05 else 'NOT met'}")
    if cli:
        q1, med, q3 = quartiles([c[0] for c in cli])
        print(f"whole `hostctl bench` command ({len(cli)} rounds): reported decode tok/s / plain: median {med:.4f} "
              f"(IQR {q1:.4f} - {q3:.4f}); the command takes {statistics.median([c[1] for c in cli]):.1f} s "
              f"for {args.runs + 1} requests (Python start, facts, plan, the result file)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
