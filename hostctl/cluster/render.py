"""One Compose project per member of a cluster: a serving member's project is its host plan
rendered by hostctl.service.render (the same files, checks and atomic write as one host); the
router's is the router service alone. Pure rendering, plus the one write per member."""

from __future__ import annotations

from pathlib import Path

import yaml

from hostctl import __version__
from hostctl.cluster.plan import ClusterPlan, MemberPlan
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


def member_files(cp: ClusterPlan, mp: MemberPlan, *, hostctl_bin: str = "/usr/local/bin/hostctl") -> dict[str, str]:
    from hostctl.service.render import render_files

    if mp.member.role == "router":
        return router_files(cp, mp)
    if mp.plan is None:
        raise InputError(f"{mp.member.name}: no plan to render here (no facts for that host)",
                         fix="give hosts[].facts a snapshot of that host, or render on the host itself with --member")
    if mp.plan.errors:
        raise FailedError(f"{mp.member.name}'s plan has errors; nothing was rendered",
                          details=[f"[{p.area}] {p.message}" for p in mp.plan.errors])
    files = render_files(mp.plan, hostctl_bin=hostctl_bin)
    # A headless follower serves no API: the host unit and power unit are one host's business.
    return {k: v for k, v in files.items() if k in ("compose.yaml", "runtime.env")}


def write_member(cp: ClusterPlan, mp: MemberPlan, out_dir: Path, *, check=None) -> list[Path]:
    from hostctl.service.render import write_project

    return write_project(member_files(cp, mp), out_dir, check=check)
