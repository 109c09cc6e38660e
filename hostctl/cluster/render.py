"""One Compose project per member of a cluster: a serving member's project is its host plan
rendered by hostctl.service.render (the same files, checks and atomic write as one host); the
router's is the router service alone. With the cluster profile's path, each project also holds
the member's systemd unit (`hostctl-<cluster>-<member>.service`: `up`/`down --cluster PATH
--member NAME`). Pure rendering: each member's project is written through the executor
(hostctl.service.project_part), by `render --cluster` and `up --cluster`."""

from __future__ import annotations

from pathlib import Path

import yaml

from hostctl import __version__
from hostctl.cluster.plan import FOLLOWER_WAIT_S, SUPERVISED, ClusterPlan, MemberPlan
from hostctl.errors import FailedError, InputError


def router_files(cp: ClusterPlan, mp: MemberPlan) -> dict[str, str]:
    from hostctl.service.render import _environment

    text = _environment(compose=True).get_template("cluster-router.compose.yaml.j2").render(
        version=__version__, cluster=cp.cluster.name, member=mp.member.name, project=mp.project,
        image=cp.cluster.router.image, command=mp.router_command, address=mp.member.address,
        key_var=cp.cluster.key_var)
    # Re-read: the argv and network mode must be what the plan says.
    svc = yaml.safe_load(text)["services"]["router"]
    if svc["command"] != mp.router_command or svc["network_mode"] != "host":
        raise InputError("the rendered router project is not what the plan says; nothing was written")
    return {"compose.yaml": text}


UNIT_TEMPLATE = "hostctl-cluster-member.service.j2"
READY = {"replica": "its smoke gate passed and it joined the router",
         "leader": "every node rank answered and its smoke gate passed",
         "follower": "the leader's /health answered, which needs every rank",
         "router": "its /health answered and it added the replicas already serving"}


def unit_name(cp: ClusterPlan, mp: MemberPlan) -> str:
    return f"hostctl-{cp.cluster.name}-{mp.member.name}.service"


def member_unit(cp: ClusterPlan, mp: MemberPlan, cluster_path: Path, hostctl_bin: str) -> tuple[str, str]:
    """(file name, text) of the member's unit: ExecStart `up --cluster PATH --member NAME` (a
    replica with --foreground: Type=notify, supervised; the others Type=oneshot), ExecStop its
    `down`. Read back before it is returned: the two commands must be these argvs."""
    from hostctl.service.render import _environment
    from hostctl.service.rendercheck import exec_problems

    role = mp.member.role
    supervised = role in SUPERVISED
    load_s = mp.config.recipe.load_timeout_s if mp.config is not None else 0
    # As the host unit: model load and smoke gate, plus image start; a follower first waits for
    # the leader's master port; the router waits 60 s for itself, then adds each replica.
    start_s = {"follower": FOLLOWER_WAIT_S + load_s + 600, "router": 600}.get(role, load_s + 600)
    path = str(cluster_path)
    name = unit_name(cp, mp)
    text = _environment().get_template(UNIT_TEMPLATE).render(
        version=__version__, cluster=cp.cluster.name, member=mp.member.name, role=role, unit_name=name,
        ready=READY[role], key_var=cp.cluster.api_key_env, hostctl_bin=hostctl_bin, cluster_path=path,
        start_timeout_s=start_s, supervised=supervised,
        # as the host unit: longer than hang_timeout_s, so a runtime hang is diagnosed by hostctl first
        watchdog_s=(mp.config.recipe.hang_timeout_s + 60) if supervised else None)
    want = {"ExecStart": [hostctl_bin, "up", "--cluster", path, "--member", mp.member.name,
                          *(["--foreground"] if supervised else [])],
            "ExecStop": [hostctl_bin, "down", "--cluster", path, "--member", mp.member.name]}
    if exec_problems(name, text, want):
        raise InputError(f"the unit {name} does not read back as `up`/`down --cluster {path[:120]} --member "
                         f"{mp.member.name}`; nothing was written", fix="use a cluster profile path without quotes "
                         "or backslashes")
    return name, text


def member_files(cp: ClusterPlan, mp: MemberPlan, *, hostctl_bin: str = "/usr/local/bin/hostctl",
                 cluster_path: Path | None = None) -> dict[str, str]:
    """The member's project files; with cluster_path (render --cluster), its unit too."""
    unit = {} if cluster_path is None else dict([member_unit(cp, mp, cluster_path, hostctl_bin)])
    if mp.member.role == "router":
        return {**router_files(cp, mp), **unit}
    from hostctl.service.render import render_files

    if mp.plan is None:
        raise InputError(f"{mp.member.name}: no plan to render here (no facts for that host)",
                         fix="give hosts[].facts a snapshot of that host, or render on the host itself with --member")
    if mp.plan.errors:
        raise FailedError(f"{mp.member.name}'s plan has errors; nothing was rendered",
                          details=[f"[{p.area}] {p.message}" for p in mp.plan.errors])
    files = render_files(mp.plan, hostctl_bin=hostctl_bin)
    # A headless follower serves no API: the host unit and power unit are one host's business.
    return {**{k: v for k, v in files.items() if k in ("compose.yaml", "runtime.env")}, **unit}
