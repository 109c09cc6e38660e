"""Starting and stopping one member of a cluster (`up/down --cluster cluster.toml --member NAME`),
in the order the engines need, and the group take-down after a failure.

  - replica: one host's `up` (preflight, render, watch, smoke gate), then it joins the router
    (vllm-router's /add_worker) -- only after its own gate passed; with --foreground (its unit)
    it then stays and supervises its runtime as one host's `up --foreground` does;
  - router: vllm-router's project; it adds the replicas that already serve;
  - leader: one host's `up` of rank 0; its /health answers only when every follower has joined,
    so its ready is the group's;
  - follower: waits for the leader's master port (not /health, which needs this rank), then
    starts headless and is ready when the leader's /health answers.

A member keeps its state (lock, service state, project) in its own state directory, so several
"hosts" can share one machine. Members on this machine are taken down here; a member with `ssh`
in cluster.toml is taken down there, by its own `hostctl down --cluster ... --member NAME` run
through the SSH transport of `verify --host` (the cluster profile must be at the same path
there); any other member is named with the command that stops it there.
"""

from __future__ import annotations

import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable

import httpx

from pydantic import ConfigDict

from hostctl.data import Data
from hostctl import paths, secrets
from hostctl.cluster.commands import load
from hostctl.cluster.plan import FOLLOWER_WAIT_S, SUPERVISED, ClusterPlan, MemberPlan
from hostctl.cluster.profile import KEY_FILE_VAR, ClusterProfile, read_key
from hostctl.errors import FailedError, InputError, RefusedError

Say = Callable[[str], None]
POLL_S = 1.0


@contextmanager
def member_state(state_dir: str):
    """This process is that member: its lock, service state and caches' bookkeeping live in the
    member's state directory (one process is one member)."""
    before = paths.STATE_DIR
    paths.STATE_DIR = Path(state_dir)
    try:
        paths.state_dir().mkdir(parents=True, exist_ok=True)
        yield
    finally:
        paths.STATE_DIR = before


def _key(cluster: ClusterProfile) -> str:
    key = read_key(cluster)
    if key:
        secrets.remember([key])
        if cluster.api_key_file:
            os.environ[KEY_FILE_VAR] = key  # for Compose's ${VAR:?} and the smoke client; never written
    return key


def local(mp: MemberPlan) -> bool:
    """Whether this machine can reach the member's containers through its own engine (a member
    with `ssh` is reached through that, even on a loopback address)."""
    import ipaddress

    return mp.member.ssh is None and ipaddress.ip_address(mp.member.address).is_loopback


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def answers_health(url: str, timeout: float = 3.0, path: str = "/health") -> bool:
    try:
        return httpx.get(f"{url}{path}", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def router_alive(url: str) -> bool:
    """vllm-router itself answers. Not its /health: measured with 0.1.17, that is 503 "Unhealthy
    servers" while any worker it holds is unhealthy (one dead replica would hide a live router,
    and keep a restarted replica from joining); /liveness is the router process alone."""
    return answers_health(url, path="/liveness")


# ---------------------------------------------------------------- the router's backends


def router_url(cp: ClusterPlan) -> str | None:
    r = cp.cluster.router_member
    return cp.member(r.name).endpoint if r else None


class Backend(Data):
    """One worker the router holds: vllm-router keeps a dead worker in its list and only stops
    routing to it (and routes to it again once its /health answers), so whether a replica is in
    the selection pool is `healthy`, not membership (README "More than one host")."""

    model_config = ConfigDict(frozen=True)

    url: str
    healthy: bool


def parse_backends(doc: object) -> list[Backend]:
    """vllm-router's GET /workers document -> its backends (pure; an unknown shape reads as none)."""
    rows = doc.get("workers") if isinstance(doc, dict) else None
    return [Backend(url=str(w["url"]), healthy=w.get("is_healthy") is True) for w in rows or []
            if isinstance(w, dict) and isinstance(w.get("url"), str)]


def admin_headers(cp: ClusterPlan) -> dict[str, str]:
    """What the router's gate asks of its admin routes (/add_worker, /workers, ...): the cluster's
    key (hostctl/cluster/routergate.py)."""
    return {"Authorization": f"Bearer {_key(cp.cluster)}"}


def router_backends(cp: ClusterPlan) -> list[Backend] | None:
    """The workers vllm-router holds, each with its health (None when the router does not answer)."""
    url = router_url(cp)
    headers = admin_headers(cp)
    try:
        res = httpx.get(f"{url}/workers", headers=headers, timeout=5)
        return parse_backends(res.json()) if res.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None


def join_router(cp: ClusterPlan, mp: MemberPlan, say: Say) -> bool:
    url = router_url(cp)
    if not router_alive(url):
        say(f"the router {url} does not answer: {mp.member.name} joins when the router starts")
        return False
    if mp.endpoint in [b.url for b in router_backends(cp) or []]:
        # A replica started again after it died: the router kept it and routes to it again once
        # its /health answers (measured with vllm-router 0.1.17).
        say(f"{mp.member.name} is already one of the router's backends ({mp.endpoint}); it serves again "
            "from the router's next health check")
        return True
    res = httpx.post(f"{url}/add_worker", params={"url": mp.endpoint}, headers=admin_headers(cp), timeout=120)
    if res.status_code >= 300:
        raise FailedError(f"the router refused {mp.member.name} ({mp.endpoint}): HTTP {res.status_code}",
                          details=[res.text[:300]])
    say(f"{mp.member.name} joined the router {url} ({mp.endpoint})")
    return True


def leave_router(cp: ClusterPlan, mp: MemberPlan, say: Say) -> None:
    url = router_url(cp)
    if url and mp.endpoint in [b.url for b in router_backends(cp) or []]:
        try:
            httpx.post(f"{url}/remove_worker", params={"url": mp.endpoint}, headers=admin_headers(cp), timeout=30)
            say(f"{mp.member.name} left the router")
        except httpx.HTTPError as exc:
            say(f"warning: could not take {mp.member.name} out of the router: {exc}")


# ---------------------------------------------------------------- up


def up(cluster_path: Path, member: str, *, timeout: int | None, keep_on_failure: bool, say: Say,
       hostctl_bin: str, print_endpoint: Callable[[str], None], foreground: bool = False) -> int:
    """Start this member and print its endpoint (the router's for a replica that joined); the
    exit code. With foreground (a replica only), stay and supervise its runtime as one host's
    `up --foreground` does: a replica is one host's service, and the unit's restart brings it
    back through its gate and into the router. One model across hosts is not supervised: a rank
    started again alone cannot rejoin a running group (vLLM forms it once, in order)."""
    cluster, cp, me = load(cluster_path, member)
    if foreground and me.role not in SUPERVISED:
        raise InputError(f"--foreground: a {me.role} is not supervised; only a replica is (README \"More than one "
                         "host\")", fix=f"run `hostctl up --cluster {cluster_path} --member {me.name}` without it")
    _key(cluster)
    mp = cp.member(me.name)
    with member_state(mp.state_dir):
        try:
            if foreground:
                from hostctl.provision.power_watch import PowerWatch
                from hostctl.service import supervise

                stop, began = supervise.starting(say)
                endpoint = _up_serving(cp, mp, timeout=timeout, keep_on_failure=keep_on_failure, say=say,
                                       hostctl_bin=hostctl_bin)
                try:
                    member_say = lambda m: say(f"{me.name}: {m}")  # noqa: E731
                    return supervise.supervise_ready(mp.config, mp.plan, endpoint, stop, began, member_say,
                                                     print_endpoint,
                                                     power=PowerWatch(mp.config, mp.plan.power.gpus, member_say))
                finally:
                    # Stopped (0): its project is down. Died or hung (FailedError): out of the
                    # router before the unit's restart, which joins it again once its gate passed.
                    # A frozen engine still answers the router's /health: only hostctl's verdict
                    # takes it out of the pool.
                    leave_router(cp, mp, say)
            if me.role == "router":
                endpoint = _up_router(cp, mp, say)
            elif me.role == "follower":
                endpoint = _up_follower(cp, mp, timeout=timeout, say=say)
            else:
                endpoint = _up_serving(cp, mp, timeout=timeout, keep_on_failure=keep_on_failure, say=say,
                                       hostctl_bin=hostctl_bin)
            print_endpoint(endpoint)
            return 0
        except FailedError as exc:
            if keep_on_failure:
                raise
            exc.message = f"{me.name} ({me.role}, {me.address}): {exc.message}"
            if cp.mode == "multi-node":
                # One model across hosts cannot serve without every rank: the group goes down.
                exc.details += group_down(cp, say, reason=f"{me.name} failed", me=me.name, cluster_path=cluster_path)
            raise


def _up_serving(cp: ClusterPlan, mp: MemberPlan, *, timeout, keep_on_failure, say, hostctl_bin) -> str:
    from hostctl.service import lifecycle

    if mp.plan is None:
        raise FailedError(f"{mp.member.name}: no plan (no facts for this host)")
    if mp.member.role == "leader":
        say(f"{mp.member.name}: leader of {cp.pp} node ranks; ready only when every follower has joined "
            f"(start each follower with `hostctl up --cluster ... --member NAME` on its host)")
    from hostctl.cluster.plan import apply_cluster
    from hostctl.plan import build_plan

    # Planned again on this host's own facts, with every directory its plan reads (the cluster
    # plan read generic facts, once for all members on this machine).
    facts = _live_facts(mp)
    mp.plan = build_plan(mp.config, facts)
    apply_cluster(mp.plan, cp.cluster, mp.member, cp.tp, cp.pp, [])
    outcome = lifecycle.up(mp.config, mp.plan, facts, timeout=timeout, keep_on_failure=keep_on_failure,
                           say=lambda m: say(f"{mp.member.name}: {m}"), hostctl_bin=hostctl_bin)
    if not outcome.ready:
        raise lifecycle.failure_error(outcome)
    if mp.member.role == "leader":
        for f in cp.members:
            if f.member.role == "follower" and local(f):
                _expect_running(f)
        say(f"{mp.member.name}: every rank answered (the leader's /health needs all {cp.pp})")
        return mp.endpoint
    joined = join_router(cp, mp, say)
    return router_url(cp) if joined else mp.endpoint


def _live_facts(mp: MemberPlan):
    from hostctl.facts import collect
    from hostctl.plan import alias_requests
    from hostctl.plan.requests import fact_requests

    return collect(fact_requests(mp.config), alias_paths=alias_requests(mp.config))


def _expect_running(mp: MemberPlan) -> None:
    from hostctl.facts.container import container_state

    name = mp.container
    if not container_state(name).running:
        raise FailedError(f"follower {mp.member.name}'s container {name} is not running")


def _write_and_start(cp: ClusterPlan, mp: MemberPlan, say: Say) -> Path:
    from hostctl.act.inline import run_inline
    from hostctl.cluster.render import member_files
    from hostctl.service.lifecycle import SCHEMA
    from hostctl.service.project_part import render_project
    from hostctl.service.render import compose_checked
    from hostctl.service.runtime_part import RuntimePart

    target = paths.system_path(f"{mp.state_dir}/project")
    render_project(member_files(cp, mp), target, check=compose_checked, say=say, command="hostctl up --cluster",
                   schema=SCHEMA)
    # as `up` starts its runtime: a failed compose up takes the project down again and says so
    run_inline([RuntimePart("start", project_dir=target, project=mp.project, container=mp.container,
                            new_session=True)], command="hostctl up --cluster", schema=SCHEMA, say=say)
    say(f"{mp.member.name}: started project {mp.project}")
    return target


def _up_router(cp: ClusterPlan, mp: MemberPlan, say: Say) -> str:
    from hostctl.images import image_exists

    if not image_exists(cp.cluster.router.image):
        raise FailedError(f"the router image {cp.cluster.router.image} is not in the engine",
                          fix="build it: python3 -m hostctl.images router")
    from hostctl.service.lifecycle import SCHEMA
    from hostctl.service.runtime_part import take_down

    target = _write_and_start(cp, mp, say)
    deadline = time.monotonic() + 60
    try:
        while not router_alive(mp.endpoint):
            _expect_container(mp.container)
            if time.monotonic() > deadline:
                raise FailedError(f"the router {mp.endpoint} did not answer /liveness within 60 s")
            time.sleep(POLL_S)
    except FailedError as exc:
        exc.details += _log_tail(mp.container)
        problem = take_down(target, mp.project, mp.container, command="hostctl up --cluster", schema=SCHEMA,
                            say=say, stop_timeout_s=5)
        exc.details.append(f"the router's project could not be taken down: {problem}" if problem
                           else "the router's project was taken down")
        raise
    for r in cp.members:
        # A replica already serving passed its gate at its own `up`; a replica that did not answers nothing.
        if r.member.role == "replica" and r.endpoint and answers_health(r.endpoint):
            join_router(cp, r, say)
    say(f"{mp.member.name}: router ready at {mp.endpoint} with {len(router_backends(cp) or [])} replica(s)")
    return mp.endpoint


def _expect_container(name: str) -> None:
    from hostctl.facts.container import container_state

    st = container_state(name)
    if not st.running:
        raise FailedError(f"{name} exited" + (f" with code {st.exit_code}" if getattr(st, "exit_code", None) is not None
                                              else ""), fix=f"read its log: docker logs {name}")


def _up_follower(cp: ClusterPlan, mp: MemberPlan, *, timeout, say) -> str:
    leader = cp.member(cp.cluster.leader.name)
    host, port = leader.member.address, cp.cluster.master_port
    say(f"{mp.member.name}: waiting for the leader's master port {host}:{port}")
    deadline = time.monotonic() + (timeout or FOLLOWER_WAIT_S)
    while not port_open(host, port):
        if time.monotonic() > deadline:
            raise FailedError(f"the leader's master port {host}:{port} did not open", fix=
                              f"start the leader first: hostctl up --cluster ... --member {leader.member.name}")
        time.sleep(POLL_S)
    from hostctl.interrupt import Interrupted, Interruptible
    from hostctl.service.lifecycle import SCHEMA
    from hostctl.service.runtime_part import take_down

    name = mp.container
    load_s = mp.config.recipe.load_timeout_s if timeout is None else timeout
    with Interruptible():
        target = _write_and_start(cp, mp, say)
        try:
            deadline = time.monotonic() + load_s
            while not answers_health(leader.endpoint):
                _expect_container(name)
                if time.monotonic() > deadline:
                    raise FailedError(f"the leader's /health did not answer within {load_s} s after rank "
                                      f"{mp.member.rank} started")
                time.sleep(2 * POLL_S)
        except (FailedError, Interrupted) as exc:
            logs = _log_tail(name, 400)
            problem = take_down(target, mp.project, name, command="hostctl up --cluster", schema=SCHEMA, say=say,
                                stop_timeout_s=5)
            say(f"{mp.member.name}: " + (f"could not take rank {mp.member.rank} down ({problem})" if problem
                                         else f"took rank {mp.member.rank} down")
                + (": its last log lines:" if logs else ""))
            for line in logs[-15:]:
                say(f"  {line}")
            if isinstance(exc, FailedError):
                from hostctl.service.lifecycle import root_errors

                # vLLM's own error, in the child that raised it first (the last traceback is the parent's).
                exc.details += [f"rank {mp.member.rank}'s error: {e}" for e in root_errors(logs, limit=4)]
            raise
    say(f"{mp.member.name}: rank {mp.member.rank} joined; the group serves at {leader.endpoint}")
    return leader.endpoint


def _log_tail(name: str, lines: int = 15) -> list[str]:
    from hostctl.secrets import redact
    from hostctl.facts.container import log_tail

    return [redact(ln) for ln in log_tail(name, lines)]


# ---------------------------------------------------------------- down


def down_order(cp: ClusterPlan) -> list[MemberPlan]:
    """The router first (no new requests), then replicas; the leader (the API) before the followers."""
    rank = {"router": 0, "leader": 1, "replica": 2, "follower": 3}
    return sorted(cp.members, key=lambda m: (rank[m.member.role], -(m.member.rank or 0)))


def _down_one(cp: ClusterPlan, mp: MemberPlan, say: Say) -> str:
    from hostctl.service import supervisor
    from hostctl.service.lifecycle import SCHEMA
    from hostctl.service.runtime_part import take_down

    if mp.member.role == "replica":
        leave_router(cp, mp, say)
    target = paths.system_path(f"{mp.state_dir}/project")
    with member_state(mp.state_dir):
        # A supervising `up --cluster ... --foreground` ends first (it takes its runtime down and
        # exits 0), or it would see a death and its unit would start it again.
        supervisor.stop_running(say)
        problem = take_down(target, mp.project, mp.container, command="hostctl down --cluster", schema=SCHEMA,
                            say=say)
    if problem:
        raise FailedError(f"{mp.member.name}: {mp.container} was not taken down: {problem}")
    return f"{mp.member.name}: down"


def remote_down(cluster_path: Path, mp: MemberPlan, say: Say) -> list[str]:
    """`hostctl down --cluster PATH --member NAME` on the member's host, over its `ssh`; its lines."""
    import shlex

    from hostctl.verify.connection import connect

    path = str(cluster_path.resolve())
    from hostctl import sshtarget

    shown = sshtarget.parse(mp.member.ssh, f"{mp.member.name}.ssh").display()
    say(f"{mp.member.name}: taking it down over {shown}")
    target = connect(mp.member.ssh, ssh_config=mp.member.ssh_config, field=f"{mp.member.name}.ssh",
                     config_field=f"{cluster_path.name}: {mp.member.name}.ssh_config")
    try:
        res = target.cmd(shlex.join([target.hostctl, "down", "--cluster", path, "--member", mp.member.name]))
    finally:
        target.close()
    if res.rc != 0:
        raise FailedError(f"`hostctl down` on {target.name} exited {res.rc}",
                          details=[ln for ln in (res.stderr or res.stdout).strip().splitlines()[-5:]],
                          fix=f"the cluster profile must be at {path} there too; run `hostctl down --cluster {path} "
                              f"--member {mp.member.name}` on that host to see why")
    return [f"{ln} (on {target.name})" for ln in res.stdout.strip().splitlines()]


def down(cluster_path: Path, member: str | None, say: Say) -> list[str]:
    """Stop one member, or (no --member) every member this machine reaches, in order: those with
    `ssh` in cluster.toml through it."""
    cluster, cp, me = load(cluster_path, member)
    targets = [m for m in down_order(cp) if me is None or m.member.name == me.name]
    done, unreached, failed = [], [], []
    for mp in targets:
        if me is not None or local(mp):
            done.append(_down_one(cp, mp, say))
        elif mp.member.ssh:
            try:
                done += remote_down(cluster_path, mp, say)
            except FailedError as exc:
                failed.append(mp.member.name)
                done += [f"{mp.member.name}: {exc.message}", *(f"  {d}" for d in exc.details)]
        else:
            unreached.append(mp)
    for mp in unreached:
        say(f"{mp.member.name} is on {mp.member.address}: stop it there with "
            f"`hostctl down --cluster {cluster_path.name} --member {mp.member.name}` (or give it `ssh` in cluster.toml)")
    if failed:
        raise FailedError(f"could not take down {', '.join(failed)}", details=done,
                          fix="reach those hosts and run `hostctl down --cluster ... --member NAME` there")
    return done


def group_down(cp: ClusterPlan, say: Say, *, reason: str, me: str | None = None,
               cluster_path: Path | None = None) -> list[str]:
    """Take every member of a failed group down (here, or over `ssh` where cluster.toml gives one);
    what it did, in words."""
    lines = []
    for mp in down_order(cp):
        try:
            if mp.member.name == me or local(mp):
                lines.append(_down_one(cp, mp, say) + f" ({reason})")
            elif mp.member.ssh and cluster_path is not None:
                lines += [ln + f" ({reason})" for ln in remote_down(cluster_path, mp, say)]
            else:
                lines.append(f"{mp.member.name} ({mp.member.address}): stop it there: hostctl down --cluster ... "
                             f"--member {mp.member.name}")
        except (FailedError, RefusedError) as exc:  # a refused ssh config: the other members still go down
            lines.append(f"{mp.member.name}: could not take it down: {exc.message}")
    return lines
