"""Measure `hostctl provision --only storage` on two sparse "4 TB" loop drives laid out like field
report 001's desktop (docs/field-reports.md) (129 GiB swap + ext4 for the rest, equal swap priority), end to end, and
the idempotent re-run. Run as root from the checkout:

    python3 benchmarks/provision_storage.py [--size 4T] [--swap 129GiB] [--repeat 3]

Everything it attaches, mounts or swaps on is undone at the end; system files go under a
temporary HOSTCTL_SYSROOT; the swap sysctls are restored. Times are wall-clock seconds of the
whole command (Python start-up included), as a user sees them.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SWAP_PRIORITY = 1  # low: never preferred over the machine's own swap while the benchmark runs


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True).stdout


def on_device(path: str, dev: str) -> bool:
    return path == dev or re.fullmatch(re.escape(dev) + r"p\d+", path) is not None


def release(dev: str) -> None:
    for _ in range(5):
        mounts = [ln.split()[1] for ln in Path("/proc/self/mounts").read_text().splitlines()
                  if on_device(ln.split()[0], dev)]
        if not mounts:
            break
        for target in reversed(mounts):
            subprocess.run(["umount", target], capture_output=True)
    for ln in Path("/proc/swaps").read_text().splitlines()[1:]:
        if on_device(ln.split()[0], dev):
            subprocess.run(["swapoff", ln.split()[0]], capture_output=True)
    subprocess.run(["losetup", "-d", dev], capture_output=True)


def hostctl(profile: Path, env: dict[str, str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "hostctl", "provision", "--only", "storage", "--yes",
                          "--config", str(profile)], capture_output=True, text=True, cwd=ROOT, env=env)
    elapsed = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"hostctl failed (exit {res.returncode}):\n{res.stdout}\n{res.stderr}")
    return elapsed, res


def one_round(size: str, swap: str, work: Path) -> tuple[float, float, int, str]:
    sysctls = {k: Path(f"/proc/sys/vm/{k}").read_text() for k in ("swappiness", "page-cluster")}
    devs: list[str] = []
    try:
        blocks = []
        for i in (1, 2):
            image = work / f"ssd{i}.img"
            sh("truncate", "-s", size, str(image))
            dev = sh("losetup", "-P", "--find", "--show", str(image)).strip()
            devs.append(dev)
            blocks.append(f'[[drives]]\nname = "ssd{i}"\nidentity = "path:{dev}"\nswap = "{swap}"\n'
                          f'swap_priority = {SWAP_PRIORITY}\nmountpoint = "{work}/mnt/ssd{i}"\n'
                          # ext4's lazy inode-table zeroing would fill the sparse image in the background
                          'mount_options = ["noinit_itable"]\n')
        profile = work / "hostctl.toml"
        profile.write_text('name = "bench-desktop"\nrecipe = "dsv4-flash-0731-tp2-400k"\nphase = "serving"\n'
                           '[storage]\nplanes_cache = "ssd1"\nexpert_store = "ssd2"\nrank_stores = ["ssd1", "ssd2"]\n'
                           'compile_cache = "ssd1"\nswappiness_serving = 10\npage_cluster = 0\n\n' + "\n".join(blocks))
        env = {**os.environ, "HOSTCTL_SYSROOT": str(work / "sysroot")}
        first, res1 = hostctl(profile, env)
        actions = len(re.findall(r"^\[\d+/\d+\]", res1.stderr, re.M))
        second, res2 = hostctl(profile, env)
        assert "storage: no changes" in res2.stdout and "[1/" not in res2.stderr, res2.stdout + res2.stderr
        used = sh("du", "-ch", *(str(work / f"ssd{i}.img") for i in (1, 2))).splitlines()[-1].split()[0]
        return first, second, actions, used
    finally:
        for dev in reversed(devs):
            release(dev)
        for k, v in sysctls.items():
            Path(f"/proc/sys/vm/{k}").write_text(v)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="4T", help="size of each sparse drive (default 4T)")
    ap.add_argument("--swap", default="129GiB", help="swap partition per drive (default 129GiB, as on the desktop)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root: it attaches loop devices, formats them and swaps on them")
    print(f"two sparse {args.size} loop drives, {args.swap} swap + ext4 each; {args.repeat} round(s)")
    firsts, seconds = [], []
    for r in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="hostctl-bench-", dir="/var/tmp") as tmp:
            first, second, actions, used = one_round(args.size, args.swap, Path(tmp))
        firsts.append(first)
        seconds.append(second)
        print(f"  round {r + 1}: provision {first:6.2f} s ({actions} actions)   re-run {second:5.2f} s (no changes)"
              f"   images use {used} on disk")
    best1, best2 = min(firsts), min(seconds)
    print(f"end to end (best of {args.repeat}): {best1:.2f} s;  idempotent re-run: {best2:.2f} s;  "
          f"ratio {best1 / best2:.1f}x")


if __name__ == "__main__":
    main()
