"""`plan/render/up/down --cluster cluster.toml [--member NAME]`: load, plan and present for the
CLI (hostctl.cli registers the options and calls these). Starting and stopping members is
hostctl.cluster.run."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Callable

from hostctl.cluster.plan import ClusterPlan, build_cluster_plan, facts_path, load_members, plan_text
from hostctl.cluster.profile import ClusterProfile, Member, load_cluster
from hostctl.errors import EXIT_FAILED, FailedError, InputError

Say = Callable[[str], None]


def _facts_for(cluster_path: Path, local: Member | None, facts_override: Path | None):
    cache: dict[str, object] = {}

    def live():
        if "live" not in cache:
            from hostctl.facts import collect

            cache["live"] = collect()
        return cache["live"]

    def facts_for(m: Member):
        from hostctl.facts import load_snapshot

        if local is not None and m.name == local.name and facts_override is not None:
            return load_snapshot(facts_override), f"snapshot {facts_override}"
        snap = facts_path(cluster_path, m)
        if snap is not None:
            return load_snapshot(snap), f"snapshot {m.facts}"
        import ipaddress

        if (local is not None and m.name == local.name) or ipaddress.ip_address(m.address).is_loopback:
            return live(), "this host"
        return None, "another host, no snapshot"

    return facts_for


def load(cluster_path: Path, member: str | None, facts_override: Path | None = None) -> tuple[ClusterProfile, ClusterPlan, Member | None]:
    cluster = load_cluster(cluster_path)
    local = cluster.member(member) if member is not None else None
    configs = load_members(cluster, cluster_path)
    from hostctl import secrets

    for cfg in configs.values():
        secrets.remember(secrets.from_config(cfg))
    cp = build_cluster_plan(cluster, configs, _facts_for(cluster_path, local, facts_override))
    return cluster, cp, local


def plan_cmd(cluster_path: Path, member: str | None, json_: bool, facts_override: Path | None) -> int:
    from hostctl.secrets import redact

    _cluster, cp, _local = load(cluster_path, member, facts_override)
    if json_:
        sys.stdout.write(redact(json.dumps(cp.to_dict(), indent=2)) + "\n")
    else:
        sys.stdout.write(redact(plan_text(cp)))
    return EXIT_FAILED if cp.errors else 0


def render_cmd(cluster_path: Path, member: str | None, out_dir: Path | None, facts_override: Path | None,
               say: Say, hostctl_bin: str | None = None, dry_run: bool = False) -> list[Path]:
    """Write each member's project (or only --member's) to its state directory's project/, or
    under --out DIR/<member>/, each with its systemd unit (hostctl-<cluster>-<member>.service),
    through the executor: a project already as rendered is left alone. The projects' files (none
    with dry_run, which shows the diffs through `say` and writes nothing)."""
    from hostctl.paths import hostctl_for_units

    hostctl_bin = hostctl_for_units(hostctl_bin)
    from hostctl.cluster.render import member_files
    from hostctl.service.compose import compose_available
    from hostctl.service.project_part import project_paths, render_project
    from hostctl.service.render import compose_checked

    _cluster, cp, local = load(cluster_path, member, facts_override)
    targets = [m for m in cp.members if local is None or m.member.name == local.name]
    problems = [m for m in targets if m.plan is not None and m.plan.errors]
    if problems:
        raise FailedError("the cluster plan has errors; nothing was rendered",
                          details=[f"{m.member.name}: [{p.area}] {p.message}" for m in problems for p in m.plan.errors],
                          fix="`hostctl plan --cluster` explains each decision")
    skipped = [m.member.name for m in targets if m.plan is None and m.member.role != "router"]
    if skipped and local is None:
        say(f"not rendered here (no facts for them): {', '.join(skipped)}; render those with --member on each host")
    probe = None if dry_run else compose_available()  # a dry run writes, so checks, nothing
    check = compose_checked if probe is not None and probe.ok else None
    rendered: list[Path] = []
    changed = 0
    for m in targets:
        if m.member.name in skipped:
            continue
        from hostctl import paths

        target = out_dir / m.member.name if out_dir else paths.system_path(f"{m.state_dir}/project")
        files = member_files(cp, m, hostctl_bin=hostctl_bin, cluster_path=cluster_path.resolve())
        changed += render_project(files, target, check=check, say=say, dry_run=dry_run,
                                  command="hostctl render --cluster").changed
        rendered += project_paths(files, target)
    if changed and probe is not None:
        say("checked with docker compose config" if probe.ok else
            f"not checked with docker compose config: it is not available ({probe.why()})")
    return [] if dry_run else rendered


def need_member(member: str | None, command: str) -> str:
    if not member:
        raise InputError(f"`{command} --cluster` needs --member NAME: each host starts its own part",
                         fix=f"run `hostctl {command} --cluster cluster.toml --member NAME` on each host")
    return member


def doctor_cmd(cluster_path: Path, json_: bool, say: Say, member: str | None = None, level: str = "quick") -> int:
    """The cross-host checks over every member this machine can read: itself (loopback members)
    and the hosts whose `ssh` the cluster profile names. With --member and --level full, also
    this member's rank of the all-reduce across hosts (hostctl.cluster.collective)."""
    import ipaddress

    from hostctl.cluster import doctor

    cluster, cp, _ = load(cluster_path, None)
    collective = None
    if level == "full":
        from hostctl.cluster.collective import collective_check

        if member is None:
            raise InputError("--level full with --cluster needs --member NAME: each member runs its own rank of "
                             "the all-reduce across hosts", fix="run `hostctl doctor --cluster cluster.toml "
                             "--member NAME --level full` on every member at about the same time")
        cluster.member(member)  # exit 2 naming --member before anything runs
        if cp.mode == "multi-node":
            say(f"{member}: all-reduce across hosts (gloo); waiting up to {cluster.collective_timeout_s} s "
                "for every member to join")
        collective = collective_check(cp, member)
    facts = []
    for mp in cp.members:
        if ipaddress.ip_address(mp.member.address).is_loopback:
            facts.append(doctor.read_member(mp, cluster.socket_ifname, doctor.LocalMemberReader()))
        elif mp.member.ssh:
            from hostctl.verify.connection import connect

            target = connect(mp.member.ssh, ssh_config=mp.member.ssh_config, field=f"{mp.member.name}.ssh",
                             config_field=f"{cluster_path.name}: {mp.member.name}.ssh_config")
            try:
                facts.append(doctor.read_member(mp, cluster.socket_ifname, target))
            finally:
                target.close()
        else:
            say(f"{mp.member.name} ({mp.member.address}): not read (no ssh in cluster.toml)")
            facts.append(doctor.MemberFacts(member=mp.member.name, notes=["not read: no ssh"]))
    doc = doctor.report(cp, facts, extra=[collective] if collective else [])
    sys.stdout.write(json.dumps(doc, indent=2) + "\n" if json_ else doctor.text(doc))
    return 0 if doc["ok"] else EXIT_FAILED
