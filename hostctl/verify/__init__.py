"""`hostctl verify`: the host proven to match its plan, read-only, on this machine or another one
over SSH (the same hostctl installed there).

It judges the provision parts recorded as converged on that host (hostctl's state, written by
`provision`) and the runtime when it is expected to run (`up` passed its gate and `down` has not
run since); a part never provisioned is reported "not provisioned", its checks listed but not
run, and that is not a failure. For each judged part: the convergence proof (the part's pure
decide() on fresh facts yields no action), then the testinfra checks generated from the plan
(hostctl/verify/suite.py). Exit 0 when every check that ran passed, 1 when one failed.

The checks run in-process through testinfra's Python API (testinfra.get_host), not by spawning
pytest: one process, one connection, results as values (a pytest run would need a generated
test file, its own output parsing and ~1 s of start-up for what is a list of reads).
"""

from __future__ import annotations

import time
from typing import Any

from pydantic import ConfigDict, Field

from hostctl import __version__
from hostctl.config import Config
from hostctl.data import Data
from hostctl.errors import EXIT_FAILED, EXIT_OK, FailedError, InputError
from hostctl.verify.suite import PARTS, VerifyCheck, Ctx, VerifyResult, suite

SCHEMA = "hostctl.verify/v1"


def parse_only(only: str | None) -> tuple[str, ...]:
    if not only:
        return PARTS
    names = tuple(dict.fromkeys(p.strip() for p in only.split(",") if p.strip()))
    unknown = [n for n in names if n not in PARTS]
    if unknown or not names:
        raise InputError(f"--only: expected a comma list of {', '.join(PARTS)}, got {only!r}",
                         fix="e.g. --only storage,system")
    return names


class VerifyCheckRun(Data):
    # `check` is a VerifyCheck, a plain class (it holds a function): taken as it is, not validated
    model_config = ConfigDict(arbitrary_types_allowed=True)

    check: VerifyCheck
    result: VerifyResult
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        r = self.result
        return {"id": self.check.id, "part": self.check.part, "kind": self.check.kind, "title": self.check.title,
                "status": r.status, "found": r.found, "expected": r.expected, "fix": r.fix,
                "seconds": round(self.seconds, 3)}


class PartResult(Data):
    part: str
    status: str  # pass | fail | not-provisioned | not-expected
    reason: str


class VerifyReport(Data):
    host: str
    profile: str
    parts: list[PartResult] = Field(default_factory=list)
    checks: list[VerifyCheckRun] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    seconds: float = 0.0

    @property
    def failed(self) -> list[VerifyCheckRun]:
        return [c for c in self.checks if c.result.status == "fail"]

    @property
    def exit_code(self) -> int:
        return EXIT_FAILED if self.failed else EXIT_OK

    def document(self) -> dict[str, Any]:
        return {"schema": SCHEMA, "hostctl": __version__, "host": self.host, "profile": self.profile,
                "ok": not self.failed, "exit_code": self.exit_code, "seconds": round(self.seconds, 2),
                "parts": [{"part": p.part, "status": p.status, "reason": p.reason,
                           "checks": sum(1 for c in self.checks if c.check.part == p.part),
                           "failed": sum(1 for c in self.failed if c.check.part == p.part)} for p in self.parts],
                "checks": [c.to_dict() for c in self.checks], "notes": self.notes}

    def text(self) -> str:
        lines = [f"verify profile {self.profile} on {'this host' if self.host == 'local' else self.host}:"]
        for p in self.parts:
            mine = [c for c in self.checks if c.check.part == p.part]
            if p.status in ("not-provisioned", "not-expected"):
                lines.append(f"  {p.part}: {p.reason}; {len(mine)} check(s) not run")
                continue
            failed = [c for c in mine if c.result.status == "fail"]
            lines.append(f"  {p.part}: {'FAIL' if failed else 'pass'} ({len(mine)} check(s){', ' + str(len(failed)) + ' failed' if failed else ''})")
            for c in mine:
                r = c.result
                lines.append(f"    {r.status.upper() if r.status == 'fail' else r.status:<5} {c.check.id}: {r.found}")
                if r.status == "fail":
                    if r.expected:
                        lines.append(f"          expected: {r.expected}")
                    if r.fix:
                        lines.append(f"          fix: {r.fix}")
        for n in self.notes:
            lines.append(f"  note: {n}")
        ran = [c for c in self.checks if c.result.status != "not-run"]
        if self.failed:
            lines.append(f"verify: {len(self.failed)} of {len(ran)} check(s) failed: "
                         + ", ".join(c.check.id for c in self.failed))
        elif not ran:
            lines.append("verify: no check ran: nothing was provisioned here and the runtime is not expected up")
        else:
            lines.append(f"verify: {len(ran)} check(s) passed" + (
                f"; not provisioned here: {', '.join(p.part for p in self.parts if p.status == 'not-provisioned')}"
                if any(p.status == "not-provisioned" for p in self.parts) else ""))
        return "\n".join(lines) + "\n"


def _facts_here(config: Config):
    from hostctl.facts import collect
    from hostctl.plan import alias_requests
    from hostctl.plan.requests import fact_requests

    return collect(fact_requests(config), alias_paths=alias_requests(config))


def verify(config: Config, *, host: str | None = None, only: str | None = None, facts=None,
           ssh_config: str | None = None) -> VerifyReport:
    """Judge the host (this one, or ssh://...) against the profile's plan. `facts`: this host's
    facts already read (tests); a remote host's are always read there. `ssh_config`: --ssh-config."""
    from pathlib import Path

    from hostctl.plan import build_plan
    from hostctl.verify.connection import connect, parse_target, remote_facts

    parts = parse_only(only)
    if parse_target(host) is None and ssh_config is not None:  # bad input before any connection
        raise InputError("--ssh-config is for --host ssh://...: this host is read without ssh",
                         fix="drop --ssh-config, or add --host ssh://user@host")
    t0 = time.monotonic()
    target = connect(host, ssh_config=ssh_config)
    try:
        report = VerifyReport(host=target.name, profile=config.profile.name)
        if target.remote:
            source = Path(config.source).resolve()
            try:
                facts, same = remote_facts(target, str(source), config.source_text.encode())
            except RuntimeError as exc:  # testinfra: ssh itself failed (exit 255) after connecting
                raise FailedError(f"lost the SSH connection to {target.name} while reading its facts",
                                  details=[str(exc)[-300:]], fix="check the connection, then re-run") from None
            if not same:
                report.notes.append(f"the profile at {source} on {target.name} differs from this one: the checks "
                                    "judge the host against this one")
        elif facts is None:
            facts = _facts_here(config)
        plan = build_plan(config, facts)
        ctx = Ctx(config=config, facts=facts, plan=plan, target=target)
        state = facts.state
        for part in parts:
            checks = suite(config, facts, plan, (part,))
            if part == "runtime":
                if not state.runtime_expected:
                    svc = state.service
                    why = ("not expected to run: `hostctl up` has not passed here" if svc is None else
                           f"not expected to run: the last `up`/`down` left it {svc.state}"
                           + (f" ({svc.at})" if svc.at else ""))
                    report.parts.append(PartResult(part=part, status="not-expected", reason=why))
                    report.checks += [VerifyCheckRun(check=c, result=VerifyResult(status="not-run", found=why)) for c in checks]
                    continue
                reason = f"expected up (ready since {state.service.at})"
            else:
                record = state.provisioned.get(part)
                if record is None:
                    why = "not provisioned (no converged `hostctl provision` recorded on this host)"
                    report.parts.append(PartResult(part=part, status="not-provisioned", reason=why))
                    report.checks += [VerifyCheckRun(check=c, result=VerifyResult(status="not-run", found=why)) for c in checks]
                    continue
                reason = f"provisioned {record.converged_at} with profile {record.profile}"
                from hostctl.provision.converged import profile_digest

                if record.profile_sha256 and record.profile_sha256 != profile_digest(config):
                    report.notes.append(f"{part} converged with another version of the profile "
                                        f"({record.profile}); it is judged against this one")
            part_result = PartResult(part=part, status="pass", reason=reason)
            report.parts.append(part_result)
            for c in checks:
                c0 = time.monotonic()
                try:
                    result = c.run(ctx)
                except Exception as exc:  # a check that cannot read what it needs fails, naming why
                    result = VerifyResult(status="fail", found=f"could not check: {exc.__class__.__name__}: {exc}")
                report.checks.append(VerifyCheckRun(check=c, result=result, seconds=time.monotonic() - c0))
            if any(cr.result.status == "fail" for cr in report.checks if cr.check.part == part):
                part_result.status = "fail"
        report.seconds = time.monotonic() - t0
        return report
    finally:
        target.close()
