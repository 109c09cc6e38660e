"""Log checks: OOM kills and GPU Xid errors in the kernel log since boot, and the state of
hostctl's runtime container (an exit, an OOM kill of its cgroup or of one of its processes by
the host's OOM killer), each explained through the failure catalogue (hostctl.failures)."""

from __future__ import annotations

from hostctl.doctor.registry import CheckContext, CheckResult, check, failed, passed, skipped, warned
from hostctl.facts.records import KernelLogFacts



# The catalogue (hostctl.failures, ~10-13 ms of regexes on the 2-CPU machine) is imported only when
# a check has something to explain: a kernel log without OOM kills or Xids and a running container
# need none of it (benchmarks/results/doctor_quick-2vcpu-shared.txt, round 3).
def _fix(signature_id: str) -> str:
    from hostctl.failures import SIGNATURES

    return next(s.fix for s in SIGNATURES if s.id == signature_id)


def __getattr__(name: str) -> object:
    if name == "FIX":  # {signature id: fix}, as this module offered it before it imported the catalogue lazily
        from hostctl.failures import SIGNATURES

        return {s.id: s.fix for s in SIGNATURES}
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _kernel_log(ctx: CheckContext) -> tuple[KernelLogFacts | None, CheckResult | None]:
    k = ctx.facts.kernel_log
    if k is None:
        return None, skipped("the facts carry no kernel log (a snapshot, or one made before doctor read it)")
    if not k.available:
        return None, skipped(k.reason or "the kernel log is unreadable")
    return k, None


def _span(k: KernelLogFacts) -> str:
    if k.complete is False:
        return f"since {k.first_record_s:.0f} s after boot (the ring buffer dropped older records)"
    return "since boot"


def _when(t: float | None) -> str:
    return f" at {t:.0f} s after boot" if t is not None else ""


@check("logs.kernel.oom", "no OOM kills since boot")
def kernel_oom(ctx: CheckContext) -> CheckResult:
    k, skip = _kernel_log(ctx)
    if skip is not None:
        return skip
    source = k.source or "kernel log"
    kills = [e for e in k.events if e.kind in ("host_oom", "memcg_oom")]
    if not kills:
        return passed(f"no OOM kill {_span(k)} ({k.records} records)", source=source)
    host = [e for e in kills if e.kind == "host_oom"]
    memcg = [e for e in kills if e.kind == "memcg_oom"]
    observed = "; ".join(e.line for e in kills[-4:])
    if host:
        last = host[-1]
        return warned(f"{len(host)} host OOM kill(s) {_span(k)}, last {last.process}{_when(last.time_s)}"
                      + (f"; {len(memcg)} inside memory cgroups" if memcg else "")
                      + ": the host ran out of RAM and swap (a TCPStore broken pipe on another rank is this)",
                      fix=_fix("host-oom-tcpstore"), observed=observed, source=source)
    last = memcg[-1]
    return warned(f"{len(memcg)} OOM kill(s) inside memory cgroups {_span(k)}, last {last.process}{_when(last.time_s)}"
                  + (f" in {last.cgroup}" if last.cgroup else ""), fix=_fix("container-oom"),
                  observed=observed, source=source)


@check("logs.kernel.xid", "no GPU Xid errors since boot")
def kernel_xid(ctx: CheckContext) -> CheckResult:
    k, skip = _kernel_log(ctx)
    if skip is not None:
        return skip
    source = k.source or "kernel log"
    xids = [e for e in k.events if e.kind == "xid"]
    if not xids:
        return passed(f"no Xid error {_span(k)}", source=source)
    from hostctl.kernel_events import XID_MEANINGS

    codes = sorted({e.xid for e in xids if e.xid is not None})
    named = ", ".join(f"{c} ({XID_MEANINGS.get(c, ('see NVIDIA Xid catalogue', ''))[0]})" for c in codes)
    observed = "; ".join(e.line for e in xids[-4:])
    hardware = [e for e in xids if e.severity == "hardware"]
    summary = f"{len(xids)} Xid error(s) {_span(k)}: {named}"
    if hardware:
        return failed(summary + f"; last on {hardware[-1].pci_bus_id}{_when(hardware[-1].time_s)}",
                      fix=_fix("gpu-xid"), observed=observed, source=source)
    return warned(summary + " (faults of an application, the GPU itself carried on)",
                  fix="look at the process that ran at that time; repeated faults on one GPU: " + _fix("gpu-xid"),
                  observed=observed, source=source)


@check("logs.runtime", "the runtime container did not die, and its engine works")
def runtime(ctx: CheckContext) -> CheckResult:
    e = ctx.facts.engine
    if not e.available:
        return skipped(f"the Docker engine is unreachable: {e.reason}")
    containers = ctx.runtime_containers()
    if not containers:
        return skipped("no hostctl runtime container on this engine" + (
            f" for profile {ctx.config.profile.name}" if ctx.config is not None else ""))
    source = "Docker Engine API (/containers/<id>/json State)"
    c = next((c for c in containers if c.state == "running"), containers[0])
    observed = "; ".join(f"{x.name}: {x.state}" + (f" ({x.health})" if x.health else "")
                         + (f", exit {x.exit_code}, OOMKilled={x.oom_killed}" if x.state != "running" else "")
                         for x in containers)
    # The host's OOM killer may have killed one of the container's processes (a rank) without
    # the container's own cgroup being at its limit: match the kill's cgroup with the container id.
    kernel = ctx.facts.kernel_log
    host_kills = [ev for ev in (kernel.events if kernel else []) if ev.kind == "host_oom" and ev.cgroup
                  and any(x.id[:12] in ev.cgroup for x in containers)]
    if c.state == "running":
        if host_kills:
            return warned(f"{c.name} is running, but the host OOM killer killed {host_kills[-1].process} in it"
                          f"{_when(host_kills[-1].time_s)}", fix=_fix("host-oom-tcpstore"), observed=observed, source=source)
        if c.health == "unhealthy":
            return warned(f"{c.name} is running but unhealthy", fix="hostctl logs; hostctl doctor --log FILE classifies "
                          "a saved log", observed=observed, source=source)
        progress = ctx.engine_progress
        if progress is not None and progress.working is False:
            # its API server answers /health (the container's healthcheck says so), its engine does nothing
            return failed(f"{c.name} is running and answers /health, but its engine does not work: {progress.why}",
                          fix="a frozen engine: `hostctl up --foreground` (the unit) restarts it after hang_timeout_s; "
                          "by hand `hostctl down` then `hostctl up`; read `hostctl logs` for the cause",
                          observed=observed + f"; engine: {progress.why}",
                          source=source + "; the runtime's /metrics and a canary request (hostctl.service.liveness)")
        return passed(f"{c.name} running" + (f" ({c.health})" if c.health else "")
                      + (f", engine working ({progress.evidence})" if progress is not None and progress.working else ""),
                      observed=observed, source=source)
    from hostctl.failures import StartEvidence, classify

    findings = classify(StartEvidence(log="", kernel_log="\n".join(ev.line for ev in host_kills),
                                 oom_killed=c.oom_killed, exit_code=c.exit_code))
    if findings:
        f = findings[0]
        return failed(f"{c.name} {c.state} (exit {c.exit_code}): {f.title}", fix=f.fix,
                      observed=observed + "; " + "; ".join(f.lines), source=source)
    if host_kills:
        return failed(f"{c.name} {c.state} (exit {c.exit_code}) after the host OOM killer killed "
                      f"{host_kills[-1].process} in it", fix=_fix("host-oom-tcpstore"), observed=observed, source=source)
    if c.exit_code:
        return warned(f"{c.name} {c.state} with exit code {c.exit_code}",
                      fix="save its log (`docker logs " + c.name + " > runtime.log`) and run "
                      "`hostctl doctor --log runtime.log`", observed=observed, source=source)
    return passed(f"{c.name} {c.state} (exit code {c.exit_code})", observed=observed, source=source)


CHECKS = (kernel_oom, kernel_xid, runtime)
