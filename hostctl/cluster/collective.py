"""doctor's collective across hosts (`doctor --cluster --member NAME --level full`): one rank of
hostctl's all-reduce check (hostctl/gpu/child_allreduce.py) on this member, over PyTorch's gloo
backend on TCP to the leader's address, with the hang and wrong-data verdicts of the one-host
harness (hostctl.gpu.harness: a child process group, a hard deadline, every summed value checked).

Each member runs its own doctor and so its own child: the leader is rank 0 and hosts the
rendezvous, a follower is its node rank. A member that never joins leaves the others blocked in
the rendezvous or the first all-reduce until the deadline: that is the hang verdict, on every
member that did join. CPU tensors only; the CUDA/NCCL variant belongs to the multi-GPU hosts.
"""

from __future__ import annotations

import os

from hostctl.cluster.plan import ClusterPlan
from hostctl.gpu import harness

CHECK_ID = "cluster.collective"
# The rendezvous port: next to vLLM's master port (which a running leader holds) but not on it.
PORT_OFFSET = 10
SIZE_BYTES = 256 * 1024  # a correctness check, not a bandwidth run: small enough for a 2-core host
ITERS = 3
# The outcome of one run -> the harness's verdict words (hostctl.gpu.harness.Verdict).
VERDICT = {"ok": "ok", "hang": "hang", "wrong_data": "wrong_data", "error": "failed"}


def rendezvous_port(master_port: int) -> int:
    port = master_port + PORT_OFFSET
    return port if port <= 65535 else master_port - PORT_OFFSET


def _result(status: str, summary: str, fix: str | None = None, observed: dict | None = None) -> dict:
    return {"id": CHECK_ID, "status": status, "summary": summary, "fix": fix, "observed": observed or {}}


def collective_check(cp: ClusterPlan, member: str, *, python: str | None = None) -> dict:
    """Run this member's rank of the all-reduce and return doctor's check result for it."""
    cluster = cp.cluster
    me = cluster.member(member)
    if cp.mode != "multi-node":
        return _result("skip", "replicas each serve alone: no collective runs between them")
    world = len(cluster.by_role("leader", "follower"))
    leader = cluster.leader
    port = rendezvous_port(cluster.master_port)
    init = f"tcp://{leader.address}:{port}"
    timeout_s = float(cluster.collective_timeout_s)
    if python is None:
        found = harness.find_torch_python()
        if found.python is None:
            return _result("warn", f"{me.name}: the all-reduce across hosts did not run: {found.why}",
                           "install PyTorch for this Python, or set HOSTCTL_TORCH_PYTHON, and run it again",
                           {"verdict": "inconclusive"})
        python = found.python
    argv = [python, str(harness.CHILD_ALLREDUCE), "--rank", str(me.rank), "--world", str(world), "--init", init,
            "--backend", "gloo", "--device", "cpu", "--bytes", str(SIZE_BYTES), "--iters", str(ITERS),
            "--pg-timeout", str(int(timeout_s) + 120)]
    ifname = cluster.socket_ifname
    net_env = {"GLOO_SOCKET_IFNAME": ifname, "NCCL_SOCKET_IFNAME": ifname,
               "MASTER_ADDR": leader.address, "MASTER_PORT": str(port)}
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", **net_env)
    group = harness.run_group([argv], env=env, timeout_s=timeout_s)
    run = harness.judge_group("cluster", net_env, group, timeout_s)
    verdict = VERDICT[run.outcome]
    observed = {"verdict": verdict, "rank": me.rank, "world": world, "init": init, "backend": "gloo",
                "seconds": run.seconds, "env": net_env, "report": run.ranks[0] if run.ranks else {},
                "leftover": run.leftover}
    who = f"{me.name} (rank {me.rank} of {world})"
    if verdict == "ok":
        return _result("pass", f"{who}: the all-reduce over gloo at {init} returned every summed value right",
                       observed=observed)
    if verdict == "hang":
        others = ", ".join(m.name for m in cluster.by_role("leader", "follower") if m.name != me.name)
        return _result("fail", f"{who}: hang: the all-reduce over gloo at {init} did not finish within "
                       f"{timeout_s:g} s; its process was killed", f"run `hostctl doctor --cluster ... --member NAME "
                       f"--level full` on every other member ({others}) within {timeout_s:g} s of each other, and "
                       f"check that {ifname} reaches {leader.address}:{port} (firewall, socket_ifname)", observed)
    if verdict == "wrong_data":
        return _result("fail", f"{who}: wrong data: {run.detail.removeprefix('rank 0: ')}",
                       "the hosts' sums disagree with the exact expected values: check each host's memory and "
                       "NIC (doctor --level full on each host alone), then run this again", observed)
    return _result("fail", f"{who}: the all-reduce failed: {run.detail.removeprefix('rank 0 failed: ')}",
                   "read the error above; the same PyTorch on every host avoids most of these", observed)
