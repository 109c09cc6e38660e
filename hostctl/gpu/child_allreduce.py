#!/usr/bin/env python3
"""One rank of hostctl's functional all-reduce check. Runs as a CHILD process, never imported by
hostctl: it needs only the standard library and PyTorch, so any Python with torch can run it
(the host's, a venv's, or the runtime image's).

Each rank fills a buffer with a pattern that depends on the element and the rank, all-reduces
it (sum), and compares every element with the exact expected sum (small integers are exact in
float32 whatever order the reduction takes). Then it times `--iters` all-reduces and reports
the bus bandwidth as nccl-tests defines it (algbw * 2(n-1)/n). One JSON line on stdout.

Faults for testing the harness (`--fault`): `stall` makes `--fault-rank` sleep before the first
collective (the others block in it: a hang), `wrong` adds garbage to one element of that rank's
input (every rank then sees a wrong sum). The test hook HOSTCTL_TEST_ALLREDUCE_FAULT=stall|wrong
in a child's environment makes that child the faulty rank (the cross-host check starts one child
per host, so the fault is picked by whose environment carries it).
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import signal
import sys
import time
from datetime import timedelta

PR_SET_PDEATHSIG = 1
FAULT_ENV = "HOSTCTL_TEST_ALLREDUCE_FAULT"
PATTERN = 251  # element i of rank r holds (i % PATTERN) + r + 1


def _die_with_parent() -> None:
    # If hostctl itself is killed, take the ranks down too rather than leave them on the GPUs.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--world", type=int, required=True)
    ap.add_argument("--init", required=True, help="tcp://127.0.0.1:PORT")
    ap.add_argument("--backend", default="nccl")
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--bytes", type=int, default=64 * 2**20)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--pg-timeout", type=float, default=600.0)
    ap.add_argument("--fault", default="none", choices=("none", "stall", "wrong"))
    ap.add_argument("--fault-rank", type=int, default=1)
    ap.add_argument("--stall-s", type=float, default=3600.0)
    a = ap.parse_args(argv)
    hook = os.environ.get(FAULT_ENV)
    if a.fault == "none" and hook in ("stall", "wrong"):
        a.fault, a.fault_rank = hook, a.rank  # the test hook: this process is the faulty rank
    _die_with_parent()
    report: dict = {"rank": a.rank, "world": a.world, "backend": a.backend, "device": a.device, "bytes": a.bytes}

    def emit(code: int) -> int:
        sys.stdout.write(json.dumps(report) + "\n")
        sys.stdout.flush()
        return code

    try:
        import torch
        import torch.distributed as dist
    except ImportError as exc:
        report["error"] = f"torch is not importable by {sys.executable}: {exc}"
        return emit(4)
    report["torch"] = torch.__version__

    if a.device == "cuda":
        torch.cuda.set_device(a.rank)
        dev = torch.device("cuda", a.rank)
        report["gpu"] = torch.cuda.get_device_name(dev)
        try:
            report["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
        except Exception:  # noqa: BLE001 - a version string is optional evidence
            pass

        def sync() -> None:
            torch.cuda.synchronize(dev)
    else:
        dev = torch.device("cpu")

        def sync() -> None:
            pass

    t0 = time.monotonic()
    dist.init_process_group(a.backend, init_method=a.init, rank=a.rank, world_size=a.world,
                            timeout=timedelta(seconds=a.pg_timeout))
    report["init_s"] = round(time.monotonic() - t0, 3)
    n = max(a.bytes // 4, 1)
    base = torch.arange(n, dtype=torch.float32, device=dev).remainder_(PATTERN)
    expected = base * a.world + a.world * (a.world + 1) / 2

    def fill():
        x = base + (a.rank + 1)
        if a.fault == "wrong" and a.rank == a.fault_rank:
            x[n // 2] += 1000.0
        return x

    def mismatches(x) -> tuple[int, dict | None]:
        bad = x != expected
        count = int(bad.sum().item())
        if not count:
            return 0, None
        i = int(bad.nonzero()[0].item())
        return count, {"index": i, "expected": float(expected[i].item()), "got": float(x[i].item())}

    if a.fault == "stall" and a.rank == a.fault_rank:
        time.sleep(a.stall_s)  # the others wait in their first collective

    x = fill()
    dist.all_reduce(x)
    sync()
    bad, sample = mismatches(x)

    x = fill()
    dist.barrier()
    sync()
    t0 = time.perf_counter()
    for _ in range(a.iters):
        dist.all_reduce(x)
    sync()
    seconds = (time.perf_counter() - t0) / max(a.iters, 1)

    x = fill()
    dist.all_reduce(x)
    sync()
    bad2, sample2 = mismatches(x)

    algbw = a.bytes / seconds / 1e9 if seconds > 0 else None
    report.update(
        mismatches=bad + bad2,
        example=sample or sample2,
        seconds_per_iter=seconds,
        algbw_gbps=algbw,
        busbw_gbps=None if algbw is None else algbw * 2 * (a.world - 1) / a.world,
    )
    dist.destroy_process_group()
    return emit(0)


if __name__ == "__main__":
    sys.exit(main())
