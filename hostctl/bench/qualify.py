"""The qualify verdict: the context ladder's rungs read from a `qualify` bench result, stored with
the service fingerprint it was measured under (state_dir()/qualify.json); `status` shows it
(hostctl.service.status). doctor judges the stored verdict through facts (hostctl.doctor.checks.service).

A rung that did not run (a needle that does not fit, a probe that failed to start) is a failed
rung: the ladder proves the served context only when every rung ran and passed.
"""

from __future__ import annotations

from hostctl.facts.records import QualifyVerdict
from hostctl.service import saved

QUALIFY_SUITE = "qualify"


def rungs(result: dict) -> list[dict]:
    """[{name, pass, detail}] from a bench result's needle cases and boundary probe."""
    out = []
    for probe in result.get("probes", []):
        if probe["kind"] == "needle":
            for case in probe.get("cases") or []:
                size = case.get("size")
                name = f"needle {size:.0%}" if case.get("size_unit") == "context_frac" else f"needle {size:,} words"
                if case.get("skipped"):
                    out.append({"name": name, "pass": False, "detail": f"did not run: {case['skipped']}"})
                elif case.get("error"):
                    out.append({"name": name, "pass": False, "detail": case["error"]})
                else:
                    out.append({"name": name, "pass": bool(case.get("pass")),
                                "detail": f"{case.get('prompt_tokens', 0):,} tokens, code {case.get('code')}, "
                                          f"reply {case.get('reply')!r}"})
            if probe["status"] in ("skipped", "disabled") or (probe["status"] == "failed" and not probe.get("cases")):
                out.append({"name": "needles", "pass": False, "detail": probe.get("reason") or "did not run"})
        elif probe["kind"] == "boundary":
            name = "boundary"
            if probe["status"] in ("skipped", "disabled") or ("requests" not in probe):
                out.append({"name": name, "pass": False, "detail": probe.get("reason") or "did not run"})
                continue
            n, inp, outp = probe.get("concurrency"), probe.get("input_tokens"), probe.get("output_tokens")
            name = f"boundary {n}x({inp:,}+{outp})"
            bad = [r for r in probe["requests"] if not r.get("pass")]
            detail = (f"{n} request(s) at once, {'overlapping' if probe.get('overlapped') else 'NOT overlapping'}; "
                      + ("all complete" if not bad else "; ".join(
                          f"request {r.get('request')}: " + (r.get("error") or
                                                             f"{r.get('prompt_tokens')} in, "
                                                             f"{r.get('completion_tokens')} out") for r in bad)))
            out.append({"name": name, "pass": not bad, "detail": detail})
    return out


def verdict(result: dict, result_path: str | None) -> QualifyVerdict:
    ladder = rungs(result)
    svc = result.get("service") or {}
    return QualifyVerdict(passed=bool(ladder) and all(r["pass"] for r in ladder),
                          measured_at=result.get("finished_at") or result.get("started_at"),
                          profile=svc.get("profile"), recipe=svc.get("recipe"), context=svc.get("context"),
                          fingerprint=(result.get("environment") or {}).get("service_fingerprint") or {},
                          rungs=ladder, result=result_path)


def store(result: dict, result_path: str | None) -> QualifyVerdict:
    v = verdict(result, result_path)
    saved.save_qualify(v)
    return v
