"""What `hostctl up` costs beyond starting the runtime, side by side in one run, on the CPU demo:

  A. `hostctl up` until it exits 0 (preflight, render, compose up, watch, /health,
     /v1/models, smoke suite); its own smoke time is read from the state it records.
  B. the same rendered project with plain `docker compose up -d --wait` and then a curl-style
     loop on /health (B1), and plain `docker compose up -d` plus the loop (B2) -- the fastest
     a person can learn the server answers, without checking any answer.

  overhead = A - smoke(A) - B2 (medians over the runs, alternating A, B1, B2): what hostctl
  adds beyond the smoke requests themselves. vLLM's own start varies by a few seconds from
  run to run on a 2-core machine, so the spread is printed too.

Then the time from the container's death to `up` exiting with its diagnosis, for an
entrypoint that exits at once and for an OOM kill (engine `die` event timestamp vs. the
moment `up` exits).

Run as root on a machine with Docker and the demo image:
    python3 benchmarks/up_overhead.py [--runs N] [--death-only]
Ports 18580-18589; Compose projects hc5-bench*; everything started is removed.
"""

from __future__ import annotations

import json
import os
import shutil
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

RECIPE = ROOT / "runtime" / "recipes" / "demo-cpu-tiny-moe.yaml"


def make_host(tmp: Path, name: str, port: int, *, recipe: dict | None = None, image: str | None = None,
              container_ram: str | None = None) -> dict:
    d = tmp / name
    (d / "sysroot").mkdir(parents=True)
    (d / "cache").mkdir()
    (d / "recipe.yaml").write_text(yaml.safe_dump(recipe or yaml.safe_load(RECIPE.read_text()), sort_keys=False))
    lines = [f'name = "hc5-{name}"', 'recipe = "recipe.yaml"', "[memory]",
             *([f'container_ram = "{container_ram}"'] if container_ram else []),
             "[storage]", f'compile_cache = "{d / "cache"}"', "[runtime]", f'project = "hc5-{name}"', f"api_port = {port}"]
    if image:
        lines.append(f'image = "{image}"')
    (d / "hostctl.toml").write_text("\n".join(lines) + "\n")
    return {"dir": d, "project": f"hc5-{name}", "port": port, "env": dict(os.environ, HOSTCTL_SYSROOT=str(d / "sysroot"))}


def hostctl(h: dict, *args: str) -> tuple[int, str, str, float, float]:
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "hostctl", *args, "--config", str(h["dir"] / "hostctl.toml")],
                       capture_output=True, text=True, env=h["env"], cwd=ROOT)
    return p.returncode, p.stdout, p.stderr, time.monotonic() - t0, time.time()


def wait_health(port: int, limit: float = 300) -> float:
    t0 = time.monotonic()
    with httpx.Client(timeout=2, trust_env=False) as c:
        while time.monotonic() - t0 < limit:
            try:
                if c.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                    return time.monotonic() - t0
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
    raise RuntimeError("not healthy in time")


def compose(project_dir: Path, project: str, *args: str) -> float:
    t0 = time.monotonic()
    subprocess.run(["docker", "compose", "--project-name", project, "--project-directory", str(project_dir),
                    "-f", str(project_dir / "compose.yaml"), *args], check=True, capture_output=True)
    return time.monotonic() - t0


def run_hostctl(h: dict) -> dict:
    rc, out, err, took, _ = hostctl(h, "up")
    if rc != 0:
        raise RuntimeError(f"hostctl up failed:\n{err}")
    service = json.loads((h["dir"] / "sysroot/var/lib/hostctl/service.json").read_text())
    smoke = json.loads((h["dir"] / "sysroot/var/lib/hostctl/last-smoke.json").read_text())
    smoke_s = sum(r["latency_s"] for r in smoke["results"])
    hostctl(h, "down")
    return {"total_s": took, "smoke_s": smoke_s, "health_s": service["timings"].get("health_s"),
            "kv": service.get("kv")}


def run_plain(h: dict, wait: bool) -> float:
    project_dir = h["dir"] / "sysroot/var/lib/hostctl/project"
    t0 = time.monotonic()
    compose(project_dir, h["project"], "up", "-d", *(["--wait", "--wait-timeout", "300"] if wait else []))
    wait_health(h["port"])
    took = time.monotonic() - t0
    compose(project_dir, h["project"], "down", "--timeout", "30")
    return took


def die_to_exit(h: dict, container: str) -> tuple[float, str]:
    import docker

    since = time.time() - 1
    rc, _out, err, _took, ended = hostctl(h, "up")
    assert rc == 1, err
    dc = docker.from_env()
    events = dc.events(since=int(since), until=int(ended) + 1, decode=True,
                       filters={"type": "container", "container": container, "event": "die"})
    died = [e["timeNano"] / 1e9 for e in events]
    dc.close()
    cause = next((line for line in err.splitlines() if line.startswith("error: hostctl up failed")), "?")
    return ended - died[-1], cause


def main(argv: list[str]) -> int:
    runs = int(argv[argv.index("--runs") + 1]) if "--runs" in argv else 2
    only_death = "--death-only" in argv
    tag = images.ensure_demo()
    print(f"image {tag}", file=sys.stderr)
    tmp = Path(tempfile.mkdtemp(prefix="hc5-bench-"))
    rows = []
    try:
        h = make_host(tmp, "bench", 18580)
        run_hostctl(h)  # warm-up: page cache, image layers (not counted); renders the project B reuses
        a, b1, b2 = [], [], []
        for _ in range(0 if only_death else runs):
            a.append(run_hostctl(h))
            b1.append(run_plain(h, wait=True))
            b2.append(run_plain(h, wait=False))
            print(f"run: hostctl {a[-1]['total_s']:.2f} s (smoke {a[-1]['smoke_s']:.2f}), "
                  f"compose --wait {b1[-1]:.2f} s, compose + loop {b2[-1]:.2f} s", file=sys.stderr, flush=True)
        med = lambda xs: sorted(xs)[len(xs) // 2] if xs else float("nan")  # noqa: E731
        a_total = med([r["total_s"] for r in a])
        a_smoke = med([r["smoke_s"] for r in a])
        rows.append(("hostctl up -> exit 0 (ready, smoke passed)", a_total))
        rows.append(("  of which smoke requests", a_smoke))
        rows.append(("  of which to /health ok (from compose up)", med([r["health_s"] for r in a])))
        rows.append(("  spread of hostctl up over runs (max - min)", (max(r["total_s"] for r in a) - min(r["total_s"] for r in a)) if a else float("nan")))
        rows.append(("docker compose up -d --wait + /health loop", med(b1)))
        rows.append(("docker compose up -d + /health loop", med(b2)))
        rows.append(("hostctl overhead beyond smoke (A - smoke - B2)", a_total - a_smoke - med(b2)))
        kv = (a[-1]["kv"] if a else None) or {}

        sys.path.insert(0, str(Path(__file__).parent))
        from exit_image import build_exit_image  # noqa: E402

        exit_tag = build_exit_image(images.base_tag())
        try:
            h2 = make_host(tmp, "bench-exit", 18581, image=exit_tag)
            d_exit, c_exit = die_to_exit(h2, "hc5-bench-exit-runtime")
        finally:
            subprocess.run(["docker", "rmi", "-f", exit_tag], capture_output=True)
        h3 = make_host(tmp, "bench-oom", 18582, container_ram="700m")
        d_oom, c_oom = die_to_exit(h3, "hc5-bench-oom-runtime")
        rows.append(("death -> up exits with diagnosis: entrypoint exits at once", d_exit))
        rows.append(("death -> up exits with diagnosis: OOM kill", d_oom))
    finally:
        for name in ("hc5-bench-runtime", "hc5-bench-exit-runtime", "hc5-bench-oom-runtime"):
            subprocess.run(["docker", "rm", "-f", name], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)

    print(f"{'measure':58s} {'seconds':>8s}")
    for name, value in rows:
        print(f"{name:58s} {value:8.2f}")
    print(f"\nKV capacity reported: {kv.get('tokens')} tokens, {kv.get('full_context_requests')} full-context "
          f"({kv.get('context')}-token) requests")
    print(f"diagnoses: {c_exit} | {c_oom}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
