"""Running PyTorch work in CHILD processes with a hard timeout, and the functional all-reduce
check built on it (run as configured, then with NCCL_P2P_DISABLE=1 as a control).

hostctl never imports torch: a hang in NCCL must not take hostctl down with it, and torch is
not one of hostctl's dependencies. The ranks run as one process group; at the deadline the
whole group is SIGKILLed and reaped, and the group is checked to be empty afterwards.

Where the check runs on a real host: with the HOST's Python, when it has PyTorch (or the one
HOSTCTL_TORCH_PYTHON names, e.g. a venv's). The driver, the PCIe path, ACS and the IOMMU - what
decides whether P2P works - are the host's whichever NCCL build drives them. Without such a
Python the check says so and P2P stays off.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field

from hostctl.data import Data
from hostctl import runner
from hostctl.facts import processes

TORCH_PYTHON_ENV = "HOSTCTL_TORCH_PYTHON"
CHILD_ALLREDUCE = Path(__file__).with_name("child_allreduce.py")
GRACE_AFTER_FAILURE_S = 5.0  # once one rank has failed, how long the others get to finish

Outcome = Literal["ok", "hang", "wrong_data", "error"]
Verdict = Literal["ok", "hang", "wrong_data", "failed", "inconclusive", "not_applicable"]


# ---------------------------------------------------------------- which Python has torch


class TorchPython(Data):
    model_config = ConfigDict(frozen=True)

    python: str | None  # None: no Python with torch found
    why: str  # how it was found, or why none was


def find_torch_python() -> TorchPython:
    """A Python that can import torch, found without importing torch here."""
    named = os.environ.get(TORCH_PYTHON_ENV)
    if named:
        # In /, not the caller's cwd: `-c` imports from the cwd first (a torch.py someone left there
        # would run as root). -I would also drop the user site and PYTHONPATH a torch install may need.
        res = runner.run([named, "-c", "import torch"], timeout=120, cwd="/")
        if res.ok:
            return TorchPython(python=named, why=f"{TORCH_PYTHON_ENV}={named}")
        return TorchPython(python=None, why=f"{TORCH_PYTHON_ENV}={named} cannot import torch: {res.why()}")
    if importlib.util.find_spec("torch") is not None:
        return TorchPython(python=sys.executable, why=f"hostctl's own Python ({sys.executable}) has torch")
    return TorchPython(python=None, why=f"torch is not installed for the host's Python ({sys.executable}); install PyTorch "
                       f"there (pip install torch) or set {TORCH_PYTHON_ENV} to a Python that has it (a venv); "
                       "the check then runs on the host, where the driver, ACS and IOMMU live")


# ---------------------------------------------------------------- process groups


class GroupRun(Data):
    """What a group of child processes did: exit codes (None: killed at the deadline), outputs."""

    returncodes: list[int | None]
    stdouts: list[str]
    stderrs: list[str]
    seconds: float
    timed_out: bool
    killed: bool
    pgid: int | None
    pids: list[int] = Field(default_factory=list)
    leftover: list[int] = Field(default_factory=list)  # processes still in the group after the kill


def run_group(argvs: list[list[str]], *, env: dict[str, str], timeout_s: float,
              grace_s: float = GRACE_AFTER_FAILURE_S) -> GroupRun:
    """Start every argv in ONE new process group; wait until all exit or the deadline passes, then
    SIGKILL the whole group. When one exits non-zero, the rest get grace_s, then are killed."""
    t0 = time.monotonic()
    deadline = t0 + timeout_s
    procs: list[subprocess.Popen] = []
    files = []
    pgid: int | None = None
    timed_out = killed = False
    try:
        for argv in argvs:
            out = tempfile.TemporaryFile(mode="w+")
            err = tempfile.TemporaryFile(mode="w+")
            files.append((out, err))
            proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                    process_group=0 if pgid is None else pgid)
            procs.append(proc)
            if pgid is None:
                pgid = proc.pid
        failed_at: float | None = None
        while True:
            codes = [p.poll() for p in procs]
            if all(c is not None for c in codes):
                break
            now = time.monotonic()
            if failed_at is None and any(c not in (None, 0) for c in codes):
                failed_at = now
            if now >= deadline:
                timed_out = True
                break
            if failed_at is not None and now - failed_at >= grace_s:
                break
            time.sleep(0.05)
    finally:
        if pgid is not None and (any(p.poll() is None for p in procs) or processes.in_group(pgid)):
            killed = True
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
    leftover = processes.in_group(pgid) if pgid is not None else []
    stdouts, stderrs = [], []
    for out, err in files:
        out.seek(0)
        err.seek(0)
        stdouts.append(out.read())
        stderrs.append(err.read())
        out.close()
        err.close()
    codes = [p.returncode if not (killed and p.returncode == -signal.SIGKILL) else None for p in procs]
    return GroupRun(returncodes=codes, stdouts=stdouts, stderrs=stderrs, seconds=time.monotonic() - t0,
                    timed_out=timed_out, killed=killed, pgid=pgid, pids=[p.pid for p in procs], leftover=leftover)


def free_port(candidates: range | None = None) -> int:
    """A TCP port on 127.0.0.1 nobody listens on now: the first free one of candidates, else any."""
    for port in candidates or [0]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise RuntimeError(f"no free port on 127.0.0.1 in {candidates}")


# ---------------------------------------------------------------- the all-reduce check


class Fault(Data):
    """An injected fault (tests only): `stall` or `wrong` on one rank."""

    kind: Literal["stall", "wrong"]
    rank: int = 1


class AllReduceRun(Data):
    label: str  # configured | control
    env: dict[str, str]  # the NCCL settings this run used
    outcome: Outcome
    detail: str
    seconds: float
    busbw_gbps: float | None = None
    algbw_gbps: float | None = None
    leftover: list[int] = Field(default_factory=list)
    ranks: list[dict] = Field(default_factory=list)
    pgid: int | None = None
    pids: list[int] = Field(default_factory=list)

    def to_dict(self) -> dict:
        return self.model_dump()


def _rank_reports(stdouts: list[str]) -> list[dict | None]:
    reports: list[dict | None] = []
    for text in stdouts:
        report = None
        for line in reversed(text.strip().splitlines()):
            try:
                report = json.loads(line)
                break
            except json.JSONDecodeError:
                continue
        reports.append(report if isinstance(report, dict) else None)
    return reports


def _tail(text: str, n: int = 3) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return " | ".join(lines[-n:])


def judge_group(label: str, env: dict[str, str], group: GroupRun, timeout_s: float) -> AllReduceRun:
    """Turn what the ranks did into one outcome: ok, hang, wrong_data or error."""
    reports = _rank_reports(group.stdouts)
    run = AllReduceRun(label=label, env=env, outcome="ok", detail="", seconds=round(group.seconds, 2),
                       leftover=group.leftover, ranks=[r or {} for r in reports], pgid=group.pgid, pids=group.pids)
    crashed = [i for i, c in enumerate(group.returncodes) if c not in (None, 0)]
    hung = [i for i, c in enumerate(group.returncodes) if c is None]
    if crashed:
        i = crashed[0]
        why = (reports[i] or {}).get("error") or _tail(group.stderrs[i]) or f"exit {group.returncodes[i]}"
        run.outcome, run.detail = "error", f"rank {i} failed: {why}"
        return run
    if group.timed_out or hung:
        run.outcome = "hang"
        run.detail = (f"no result within {timeout_s:g} s from rank(s) {', '.join(map(str, hung))}; "
                      f"the process group was killed ({'nothing left' if not group.leftover else f'{len(group.leftover)} left'})")
        return run
    if any(r is None for r in reports):
        i = next(i for i, r in enumerate(reports) if r is None)
        run.outcome, run.detail = "error", f"rank {i} exited without a result: {_tail(group.stderrs[i])}"
        return run
    wrong = [r for r in reports if r.get("mismatches")]
    if wrong:
        r = wrong[0]
        ex = r.get("example") or {}
        run.outcome = "wrong_data"
        run.detail = (f"rank {r['rank']}: {r['mismatches']} of {r['bytes'] // 4} summed values wrong"
                      + (f" (element {ex['index']}: expected {ex['expected']:g}, got {ex['got']:g})" if ex else ""))
        return run
    bw = [r["busbw_gbps"] for r in reports if r.get("busbw_gbps")]
    alg = [r["algbw_gbps"] for r in reports if r.get("algbw_gbps")]
    run.busbw_gbps = round(min(bw), 2) if bw else None  # the slowest rank bounds the collective
    run.algbw_gbps = round(min(alg), 2) if alg else None
    run.detail = f"every summed value correct; bus bandwidth {run.busbw_gbps:g} GB/s" if bw else "every summed value correct"
    return run


def run_allreduce(world: int, *, label: str, python: str, env: dict[str, str], timeout_s: float,
                  backend: str = "nccl", device: str = "cuda", size_bytes: int = 64 * 2**20, iters: int = 20,
                  port: int | None = None, fault: Fault | None = None) -> AllReduceRun:
    """One run of the check: `world` ranks in one process group, killed at timeout_s."""
    port = port or free_port()
    argvs = []
    for rank in range(world):
        argv = [python, str(CHILD_ALLREDUCE), "--rank", str(rank), "--world", str(world),
                "--init", f"tcp://127.0.0.1:{port}", "--backend", backend, "--device", device,
                "--bytes", str(size_bytes), "--iters", str(iters), "--pg-timeout", str(int(timeout_s) + 120)]
        if fault is not None:
            argv += ["--fault", fault.kind, "--fault-rank", str(fault.rank)]
        argvs.append(argv)
    full_env = dict(os.environ)
    full_env.update({
        "PYTHONUNBUFFERED": "1",
        "OMP_NUM_THREADS": "1",
        # Keep the rendezvous and gloo/NCCL bootstrap on loopback: the check is single-host.
        "GLOO_SOCKET_IFNAME": "lo",
        "NCCL_SOCKET_IFNAME": "lo",
        "MASTER_ADDR": "127.0.0.1",
    })
    full_env.update(env)
    group = run_group(argvs, env=full_env, timeout_s=timeout_s)
    return judge_group(label, env, group, timeout_s)


class FunctionalCheck(Data):
    verdict: Verdict
    reason: str
    configured: AllReduceRun | None = None
    control: AllReduceRun | None = None

    def to_dict(self) -> dict:
        return {"verdict": self.verdict, "reason": self.reason,
                "configured": self.configured.to_dict() if self.configured else None,
                "control": self.control.to_dict() if self.control else None}


def decide_verdict(world: int, configured: AllReduceRun | None, control: AllReduceRun | None) -> tuple[Verdict, str]:
    """The verdict from the two runs. Pure: the verdict logic is tested without any process."""
    if world < 2:
        return "not_applicable", f"{world} GPU: no peer to talk to, no collectives run"
    if configured is None or control is None:
        raise ValueError("both runs are needed for two or more GPUs")
    if configured.outcome == "ok":
        if control.outcome != "ok":
            return "ok", (f"P2P works ({configured.detail}); note the control without P2P did not pass "
                          f"({control.outcome}: {control.detail}), so the NCCL_P2P_DISABLE=1 fallback is suspect")
        return "ok", f"the all-reduce with P2P returned the right sums; {configured.detail}"
    if control.outcome != "ok":
        return "inconclusive", (f"the control without P2P failed too ({control.outcome}: {control.detail}): the fault "
                                f"is not P2P's (check the driver, torch/NCCL and the GPUs themselves); "
                                f"with P2P: {configured.outcome}: {configured.detail}")
    if configured.outcome == "hang":
        return "hang", (f"with P2P the all-reduce hung ({configured.detail}); without P2P it passed "
                        f"({control.detail})")
    if configured.outcome == "wrong_data":
        return "wrong_data", (f"with P2P the all-reduce returned wrong sums ({configured.detail}); without P2P "
                              f"they were right")
    return "failed", f"with P2P the all-reduce failed ({configured.detail}); without P2P it passed ({control.detail})"


def functional_check(world: int, *, python: str, configured_env: dict[str, str], timeout_s: float = 120.0,
                     backend: str = "nccl", device: str = "cuda", size_bytes: int = 64 * 2**20, iters: int = 20,
                     ports: tuple[int, int] | None = None, base_env: dict[str, str] | None = None,
                     faults: dict[str, Fault] | None = None) -> FunctionalCheck:
    """Run the all-reduce as configured, then with NCCL_P2P_DISABLE=1, and decide the verdict."""
    if world < 2:
        verdict, reason = decide_verdict(world, None, None)
        return FunctionalCheck(verdict=verdict, reason=reason)
    faults = faults or {}
    base = dict(base_env or {})
    runs = {}
    for i, (label, extra) in enumerate((("configured", configured_env), ("control", {"NCCL_P2P_DISABLE": "1"}))):
        env = dict(base, **extra)
        runs[label] = run_allreduce(world, label=label, python=python, env=env, timeout_s=timeout_s, backend=backend,
                                    device=device, size_bytes=size_bytes, iters=iters,
                                    port=ports[i] if ports else None, fault=faults.get(label))
    verdict, reason = decide_verdict(world, runs["configured"], runs["control"])
    return FunctionalCheck(verdict=verdict, reason=reason, configured=runs["configured"], control=runs["control"])
