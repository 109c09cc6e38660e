"""`hostctl status --cluster cluster.toml [--member NAME] [--json]`: each member this machine
reaches, its role, Compose project, container state and endpoint health; for the router, its
backends as vllm-router's GET /workers reports them (healthy or not: a dead replica stays in the
router's list and only leaves its selection pool). Members on other addresses are named with the
command that reads them there.

Reading (the engine's view of one container, /health, /workers) is `read_member`; the document,
its verdict and its text are pure functions of those readings. Like single-host `status`, it
collects no host facts and builds no host plan.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path

from hostctl.cluster.plan import ClusterPlan, MemberPlan
from hostctl.data import Data
from hostctl.urldisplay import display

SCHEMA = "hostctl.cluster-status/v1"


class Reading(Data):
    """What this machine read of one member (reached=False: it is on another host)."""

    reached: bool
    state: str | None = None  # docker's state (running, exited, ...), "absent", or "unknown"
    reason: str | None = None  # why the state is unknown (the engine cannot be asked), or why its engine does not work
    exit_code: int | None = None
    healthy: bool | None = None  # /health of its endpoint and its engine working (the router's /liveness); None: not asked
    engine_working: bool | None = None  # its engine, judged once (hostctl.service.liveness); None: not judged
    backends: list | None = None  # the router's: run.Backend rows, None when /workers did not answer


def here(mp: MemberPlan, member: str | None) -> bool:
    """Read on this machine: the member this process says it is (--member), or, without
    --member, a member on a loopback address with no `ssh`."""
    if member is not None:
        return mp.member.name == member
    return mp.member.ssh is None and ipaddress.ip_address(mp.member.address).is_loopback


def read_member(cp: ClusterPlan, mp: MemberPlan) -> Reading:
    from hostctl.cluster.run import answers_health, router_alive, router_backends
    from hostctl.facts.engine import probe_container

    found, problem = probe_container(mp.container)
    if problem is not None:
        return Reading(reached=True, state="unknown", reason=problem)
    if found is None:
        return Reading(reached=True, state="absent")
    running = found["state"] == "running"
    r = Reading(reached=True, state=found["state"], exit_code=None if running else found["exit_code"])
    if running and mp.member.role == "router":
        r.healthy = router_alive(mp.endpoint)
        r.backends = router_backends(cp) if r.healthy else None
    elif running and mp.endpoint:
        r.healthy = answers_health(mp.endpoint)
        if r.healthy and mp.config is not None:
            # healthy means its engine works, as one host's status judges it (hostctl.service.liveness):
            # a frozen engine answers /health, and the router keeps it in its pool
            from hostctl.service import liveness

            key_env = mp.plan.runtime.api_key_env if mp.plan is not None else mp.config.profile.runtime.api_key_env
            check = liveness.check_once(mp.endpoint, mp.config.recipe.served_name, key_env,
                                        mp.config.recipe.hang_timeout_s)
            r.engine_working = check.working
            if check.working is False:
                r.healthy, r.reason = False, f"its engine does not work: {check.why}"
    return r


def document(cp: ClusterPlan, readings: dict[str, Reading], cluster_arg: str) -> dict:
    """The hostctl.cluster-status/v1 document (pure)."""
    by_endpoint = {m.endpoint: m.member.name for m in cp.members if m.endpoint}
    members = []
    for mp in cp.members:
        r = readings.get(mp.member.name)
        if r is None:
            continue
        doc = {"name": mp.member.name, "role": mp.member.role, "address": mp.member.address,
               "rank": mp.member.rank, "project": mp.project, "container": mp.container,
               "endpoint": mp.endpoint, "reached": r.reached}
        if not r.reached:
            doc["note"] = (f"on {mp.member.address}: run `hostctl status --cluster {cluster_arg} "
                           f"--member {mp.member.name}` there")
        else:
            doc["state"], doc["healthy"] = r.state, r.healthy
            if r.engine_working is not None:
                doc["engine_working"] = r.engine_working
            if r.reason:
                doc["reason"] = r.reason
            if r.exit_code is not None:
                doc["exit_code"] = r.exit_code
            if mp.member.role == "router":
                doc["backends"] = None if r.backends is None else [
                    {"url": display(b.url), "member": by_endpoint.get(b.url), "healthy": b.healthy} for b in r.backends]
        members.append(doc)
    reached = [m for m in members if m["reached"]]
    return {"schema": SCHEMA, "cluster": cp.cluster.name, "mode": cp.mode, "members": members,
            "ok": bool(reached) and all(member_ok(m) for m in reached)}


def member_ok(doc: dict) -> bool:
    """Running and answering; a follower (no API of its own) running; the router also with at
    least one backend and every one healthy (a replica out of the pool is a cluster serving less
    than planned; a router with none answers no request)."""
    if doc["state"] != "running":
        return False
    if doc["endpoint"] is not None and doc["healthy"] is not True:
        return False
    if doc["role"] == "router":
        return bool(doc["backends"]) and all(b["healthy"] for b in doc["backends"])
    return True


def text(doc: dict) -> str:
    lines = [f"cluster {doc['cluster']} ({doc['mode']}): " + ("ok" if doc["ok"] else "NOT ok")]
    for m in doc["members"]:
        head = f"  {m['name']:<12} {m['role']:<9} {m['address']:<15} {m['project']}"
        if not m["reached"]:
            lines.append(f"{head}  {m['note']}")
            continue
        state = m["state"] + (f" ({m['reason']})" if m.get("reason") else "") + \
            (f", exit code {m['exit_code']}" if m.get("exit_code") is not None else "")
        health = ("ok, engine NOT WORKING" if m.get("engine_working") is False
                  else {True: "ok", False: "not answering", None: "-"}[m["healthy"]])
        lines.append(f"{head}  {state}  " + (f"{m['endpoint']} health: {health}" if m["endpoint"] else "headless"))
        if m["role"] == "router" and m["state"] == "running":
            if m["backends"] is None:
                lines.append("      backends: the router did not answer GET /workers")
            elif not m["backends"]:
                lines.append("      backends: none (a replica joins after its own smoke gate)")
            for b in m["backends"] or []:
                lines.append(f"      backend {b['url']}" + (f" ({b['member']})" if b["member"] else "")
                             + (": healthy" if b["healthy"] else ": UNHEALTHY (out of the selection pool)"))
    return "\n".join(lines) + "\n"


def status(cluster_path: Path, member: str | None) -> dict:
    """Read what this machine reaches of the cluster. The plan is built without host facts: the
    names, projects and endpoints are the cluster profile's, not a host's."""
    from hostctl.cluster.plan import build_cluster_plan, load_members
    from hostctl.cluster.profile import load_cluster

    cluster = load_cluster(cluster_path)
    if member is not None:
        cluster.member(member)  # exit 2 naming --member
    cp = build_cluster_plan(cluster, load_members(cluster, cluster_path), lambda m: (None, "status reads no facts"))
    readings = {mp.member.name: read_member(cp, mp) if here(mp, member) else Reading(reached=False)
                for mp in cp.members if member is None or mp.member.name == member}
    return document(cp, readings, str(cluster_path))
