#!/usr/bin/env python3
"""Pinned host<->device copy bandwidth of one GPU, run as a CHILD process by hostctl (standard
library + PyTorch only). While the copies run, the PCIe link is under load, so the link
generation and width read then (through NVML, when pynvml is importable) are the ones that
count: idle GPUs train their links down to save power. One JSON line on stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time


def _link_under_load(index_hint: int, stop: threading.Event, seen: dict) -> None:
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(index_hint)
        while not stop.is_set():
            gen = pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h)
            width = pynvml.nvmlDeviceGetCurrPcieLinkWidth(h)
            if (gen, width) > (seen.get("gen", 0), seen.get("width", 0)):
                seen.update(gen=gen, width=width)
            time.sleep(0.01)
        pynvml.nvmlShutdown()
    except Exception as exc:  # noqa: BLE001 - the link reading is optional evidence
        seen["error"] = f"{exc.__class__.__name__}: {exc}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", type=int, default=0, help="CUDA device index (after CUDA_VISIBLE_DEVICES)")
    ap.add_argument("--nvml-index", type=int, default=None, help="the same GPU's NVML index, for the link reading")
    ap.add_argument("--mib", type=int, default=256)
    ap.add_argument("--iters", type=int, default=10)
    a = ap.parse_args(argv)
    report: dict = {"device": a.device, "bytes": a.mib * 2**20, "iters": a.iters}
    try:
        import torch
    except ImportError as exc:
        report["error"] = f"torch is not importable by {sys.executable}: {exc}"
        print(json.dumps(report))
        return 4
    if not torch.cuda.is_available():
        report["error"] = "torch sees no CUDA device"
        print(json.dumps(report))
        return 5
    dev = torch.device("cuda", a.device)
    n = a.mib * 2**20
    host = torch.empty(n, dtype=torch.uint8, pin_memory=True)
    gpu = torch.empty(n, dtype=torch.uint8, device=dev)
    host.fill_(1)
    report["gpu"] = torch.cuda.get_device_name(dev)

    def timed(copy) -> float:
        copy()  # warm-up
        torch.cuda.synchronize(dev)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(a.iters):
            copy()
        end.record()
        torch.cuda.synchronize(dev)
        return n * a.iters / (start.elapsed_time(end) / 1000.0) / 1e9

    seen: dict = {}
    stop = threading.Event()
    watcher = threading.Thread(target=_link_under_load, args=(a.nvml_index if a.nvml_index is not None else a.device,
                                                              stop, seen), daemon=True)
    watcher.start()
    report["h2d_gbps"] = timed(lambda: gpu.copy_(host, non_blocking=True))
    report["d2h_gbps"] = timed(lambda: host.copy_(gpu, non_blocking=True))
    stop.set()
    watcher.join(timeout=2)
    report["link_under_load"] = seen
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
