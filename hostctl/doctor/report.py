"""Doctor's output: the versioned JSON document (`hostctl.doctor/v1`) and the text a person
reads (grouped by area, one line per check, the fix under each warning and failure, colour
only on a terminal). Both are built from the same DoctorReport and redacted.

hostctl.doctor/v1: {schema, hostctl_version, host, level, strict, profile, recipe, phase,
no_config_reason, facts: {source: "live" | snapshot path, collected_at, notes}, summary:
{pass, warn, fail, skip}, exit_code, checks: [{id, title, area, level, status, summary,
evidence: {observed, expected, source} | null, fix, seconds}], log: {source, lines,
kernel_lines, findings: [{id, title, cause, fix, lines}]} | null, bundle, timings_s}.
Check ids are stable; fields are only ever added within v1.
"""

from __future__ import annotations

import json
import os

from pydantic import Field

from hostctl import __version__
from hostctl.data import Data
# The report's `log` field is typed by it, so its validator needs the class: this imports the
# failure catalogue (~10 ms of regexes) on every doctor run, with --log or without.
from hostctl.doctor.diagnose import Diagnosis, diagnosis_text
from hostctl.secrets import redact
from hostctl.doctor.registry import STATUSES, CheckRun
from hostctl.errors import EXIT_FAILED, EXIT_OK

DOCTOR_SCHEMA = "hostctl.doctor/v1"
LABEL = {"pass": "PASS", "warn": "WARN", "fail": "FAIL", "skip": "SKIP"}
COLOUR = {"pass": "\033[32m", "warn": "\033[33m", "fail": "\033[1;31m", "skip": "\033[2m"}
RESET, DIM = "\033[0m", "\033[2m"


class DoctorReport(Data):
    host: str
    level: str
    strict: bool
    facts_source: str
    collected_at: str
    outcomes: list[CheckRun]
    profile: str | None = None
    recipe: str | None = None
    phase: str | None = None
    no_config_reason: str | None = None
    notes: list[str] = Field(default_factory=list)
    log: Diagnosis | None = None
    timings: dict[str, float] = Field(default_factory=dict)
    bundle: str | None = None

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for o in self.outcomes if o.result.status == s) for s in STATUSES}

    @property
    def exit_code(self) -> int:
        c = self.counts()
        if c["fail"] or (self.strict and c["warn"]) or (self.log is not None and self.log.findings):
            return EXIT_FAILED
        return EXIT_OK


def to_document(r: DoctorReport) -> dict:
    checks = []
    for o in r.outcomes:
        res = o.result
        checks.append({
            "id": o.check.id,
            "title": o.check.title,
            "area": o.check.area,
            "level": o.check.level,
            "status": res.status,
            "summary": res.summary,
            "evidence": res.evidence.to_dict() if res.evidence else None,
            "fix": res.fix,
            "seconds": round(o.seconds, 6),
        })
    doc = {
        "schema": DOCTOR_SCHEMA,
        "hostctl_version": __version__,
        "host": r.host,
        "level": r.level,
        "strict": r.strict,
        "profile": r.profile,
        "recipe": r.recipe,
        "phase": r.phase,
        "no_config_reason": r.no_config_reason,
        "facts": {"source": r.facts_source, "collected_at": r.collected_at, "notes": r.notes},
        "summary": r.counts(),
        "exit_code": r.exit_code,
        "checks": checks,
        "log": r.log.to_dict() if r.log is not None else None,
        "bundle": r.bundle,
        "timings_s": {k: round(v, 4) for k, v in r.timings.items()},
    }
    # Redact every string once, through the serialised form, so no field can slip past.
    return json.loads(redact(json.dumps(doc)))


def json_text(r: DoctorReport) -> str:
    return json.dumps(to_document(r), indent=2) + "\n"


def use_colour(stream) -> bool:
    return stream.isatty() and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def text(r: DoctorReport, colour: bool = False) -> str:
    def paint(status: str, s: str) -> str:
        return f"{COLOUR[status]}{s}{RESET}" if colour else s

    def dim(s: str) -> str:
        return f"{DIM}{s}{RESET}" if colour else s

    what = (f"profile {r.profile} (recipe {r.recipe}, {r.phase} phase)" if r.profile
            else f"{r.no_config_reason or 'no host profile'} (looked for ./hostctl.toml, /etc/hostctl/hostctl.toml; "
            "pass --config PATH)")
    facts = "facts probed live" if r.facts_source == "live" else f"facts from {r.facts_source}"
    out = [f"hostctl doctor: host {r.host}, {what}, {r.level} level, {facts}"]
    out += [dim(f"  note: {n}") for n in r.notes]
    width = max((len(o.check.id) for o in r.outcomes), default=20)
    for area in dict.fromkeys(o.check.area for o in r.outcomes):  # the checks' order: checks.MODULES
        group = [o for o in r.outcomes if o.check.area == area]
        if not group:
            continue
        out.append("")
        out.append(area)
        for o in group:
            res = o.result
            line = f"  {paint(res.status, LABEL[res.status])}  {o.check.id:<{width}}  {res.summary}"
            out.append(line)
            if res.status in ("fail", "warn") and res.fix:
                out.append(f"        fix: {res.fix}")
                if res.evidence and res.evidence.source:
                    out.append(dim(f"        from: {res.evidence.source}"))
    if r.log is not None:
        out.append("")
        out.append(diagnosis_text(r.log).rstrip("\n"))
    c = r.counts()
    out.append("")
    verdict = "FAILED" if r.exit_code else "ok"
    out.append(f"{c['pass']} pass, {c['warn']} warn, {c['fail']} fail, {c['skip']} skip"
               + (" (--strict: warnings fail)" if r.strict and c["warn"] else "") + f": {paint('fail' if r.exit_code else 'pass', verdict)}")
    if r.bundle:
        out.append(f"support bundle: {r.bundle}")
    return redact("\n".join(out)) + "\n"
