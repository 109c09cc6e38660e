"""`hostctl status`: the runtime's state, health, endpoint, uptime, and the last `up`, smoke and
qualify results.

Healthy means requests complete, not just that /health answers: a running runtime whose /health
answers is asked once whether its engine works (hostctl.service.liveness.check_once: the counters
of a busy server must move within a few seconds, an idle one must complete one canary request), so
a frozen engine shows as not healthy without the supervisor running.

It reads the runtime's names (hostctl.service.identity, from the profile and recipe), the engine's
view of that one container (hostctl.facts.engine.probe_container, through the docker SDK) and
hostctl's state files; it collects no other facts and builds no plan, so it answers at once
(benchmarks/doctor_quick.py) and works on a host whose GPUs or drives cannot be read.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING

from hostctl.service import identity, saved

if TYPE_CHECKING:
    from hostctl.service import fingerprint

SCHEMA = "hostctl.status/v1"
HEALTH_TIMEOUT_S = 3.0


def health_of(endpoint: str) -> tuple[bool, str | None]:
    """(whether GET {endpoint}/health answers 200, why not when the port is not the runtime's).
    hostctl.service.apiclient: another user's listener on the port is not the runtime's health,
    whatever it answers, and the answer is read up to a cap."""
    import httpx

    from hostctl.service import apiclient, apipeer

    try:
        with apiclient.client(timeout=HEALTH_TIMEOUT_S) as c:
            answer = apiclient.request(c, "GET", endpoint.rstrip("/") + "/health", cap=apiclient.SMALL_CAP,
                                       what="/health")
        return answer.status_code == 200, None
    except apipeer.ListenerRefused as exc:
        return False, exc.message
    except (httpx.HTTPError, apiclient.BadAnswer, ValueError):
        return False, None


def container_part(rt: identity.RuntimeIdentity) -> tuple[dict, dict | None]:
    """The container as the engine sees it, as status' fields (state; reason when the engine
    cannot be asked; uptime_s while running; exit_code and oom_killed once ended), and the engine's
    own record of it (None: no such container, or no answer). `status --watch` reads this each frame."""
    from hostctl.facts.engine import probe_container
    from hostctl.facts.container import parse_timestamp

    found, engine_problem = probe_container(rt.container)
    part: dict = {}
    if engine_problem is not None:
        part["state"], part["reason"] = "unknown", engine_problem
    elif found is None:
        part["state"] = "down"
    else:
        part["state"] = found["state"]
        started = parse_timestamp(found["started_at"])
        if started and found["state"] == "running":
            part["uptime_s"] = int((datetime.now(timezone.utc) - started).total_seconds())
        if found["state"] != "running":
            part["exit_code"], part["oom_killed"] = found["exit_code"], found["oom_killed"]
    return part, found


def status(rt: identity.RuntimeIdentity) -> dict:
    part, found = container_part(rt)
    running = part["state"] == "running"
    doc: dict = {"schema": SCHEMA, "container": rt.container, "endpoint": rt.endpoint, "image": rt.image, **part}
    doc["healthy"] = None
    if running:
        # "health": /health answered; "healthy": that, and the engine works (a frozen engine's API
        # server still answers /health)
        doc["health"], refused = health_of(rt.endpoint)
        doc["healthy"] = doc["health"]
        if refused:
            doc["health_refused"] = refused
        if doc["health"]:
            from hostctl.service import liveness

            check = liveness.check_once(rt.endpoint, rt.served_name, rt.api_key_env, rt.hang_timeout_s)
            doc["progress"] = check.model_dump(mode="json")
            if check.working is False:
                doc["healthy"] = False
    last = saved.load_service()
    if last is not None and last.container == rt.container:
        doc["last_up"] = last.model_dump(mode="json", exclude_none=True, include={
            "state", "ready_at", "failed_at", "interrupted_at", "signal", "down_at", "cause"})
        if last.kv is not None:  # every key, as the runtime reported it or null
            doc["last_up"]["kv"] = last.kv.model_dump(mode="json")
    from hostctl.service import restarts

    supervised = restarts.status_part()
    if supervised:
        doc["supervision"] = supervised
    from hostctl.service import fingerprint

    current = fingerprint.of_project(rt.project_dir, found["image_id"]) if running else None
    doc["qualify"] = qualify_part(current)
    smoke = saved.load_smoke()
    if smoke is not None:
        doc["last_smoke"] = {"at": smoke.started_at, "ok": smoke.ok, "url": smoke.url,
                             "results": [{"name": r.name, "ok": r.ok, "latency_s": round(r.latency_s, 3)}
                                         for r in smoke.results]}
    return doc


def status_text(doc: dict) -> str:
    lines = [f"{doc['container']}: {doc['state']}"
             + (f", up {doc['uptime_s'] // 60} min {doc['uptime_s'] % 60} s" if "uptime_s" in doc else "")
             + (f" ({doc['reason']})" if doc.get("reason") else "")
             + (f", exit code {doc.get('exit_code')}" + (", OOM-killed" if doc.get("oom_killed") else "")
                if doc["state"] not in ("running", "down", "unknown") else "")]
    lines.append(f"  endpoint: {doc['endpoint']}  health: "
                 + {True: "ok", False: "not answering", None: "-"}[doc.get("health")])
    if doc.get("health_refused"):
        lines.append(f"  health: {doc['health_refused']}")
    progress = doc.get("progress")
    if progress:
        lines.append("  engine: " + ({True: f"working: {progress['evidence']}",
                                      False: f"NOT WORKING: {progress.get('why')}",
                                      None: f"not judged: {progress.get('why')}"}[progress.get("working")]))
    lines.append(f"  image: {doc['image']}")
    last = doc.get("last_up")
    if last:
        when = last.get("ready_at") or last.get("failed_at") or last.get("interrupted_at") or last.get("down_at")
        why = last.get("cause") or (f"by {last['signal']}" if last.get("signal") else None)
        lines.append(f"  last up: {last.get('state')} at {when}" + (f" ({why})" if why else ""))
        kv = last.get("kv") or {}
        if kv.get("tokens") is not None or kv.get("full_context_requests") is not None:
            lines.append(f"  KV cache: {kv.get('tokens') or '?'} tokens, {kv.get('full_context_requests')} "
                         f"full-context ({kv.get('context')}-token) requests at once")
    if doc.get("supervision"):
        lines.append(f"  supervision: {doc['supervision']['text']}")
    smoke = doc.get("last_smoke")
    if smoke:
        parts = ", ".join(f"{r['name']} {'ok' if r['ok'] else 'FAIL'} {r['latency_s'] * 1000:.0f} ms" for r in smoke["results"])
        lines.append(f"  last smoke: {'passed' if smoke['ok'] else 'FAILED'} at {smoke['at']}: {parts}")
    else:
        lines.append("  last smoke: none recorded")
    lines.append(qualify_line(doc.get("qualify")))
    return "\n".join(lines) + "\n"


def qualify_part(current: fingerprint.ServiceFingerprint | None) -> dict | None:
    """For `hostctl status`: the stored verdict, and whether it was measured on the service now
    running (None: nothing stored)."""
    from hostctl.service import fingerprint

    v = saved.load_qualify()
    if v is None:
        return None
    stored = fingerprint.ServiceFingerprint.from_dict(v.fingerprint)
    why = fingerprint.differences(stored, current) if current is not None else ["no running service to compare with"]
    return {"passed": v.passed, "measured_at": v.measured_at, "context": v.context, "recipe": v.recipe,
            "this_service": not why, "differences": why,
            "rungs": [{"name": r.get("name"), "pass": r.get("pass")} for r in v.rungs]}


def qualify_line(part: dict | None) -> str:
    if not part:
        return "  qualify: no verdict stored (hostctl bench --suite qualify)"
    rungs_ = ", ".join(f"{r['name']} {'ok' if r['pass'] else 'FAIL'}" for r in part["rungs"])
    head = (f"  qualify: {'passed' if part['passed'] else 'FAILED'} at {part['measured_at']}"
            + (f" ({part['context']:,} tokens)" if part.get("context") else ""))
    where = "this service" if part["this_service"] else "ANOTHER service: " + "; ".join(part["differences"])
    return f"{head}, measured on {where}: {rungs_}"
