"""The check registry: what a doctor check is, what it returns, and running them all.

A check has a stable id (`gpu.power.limit`), a title, an area (how reports group it) and a
level: `quick` checks only read facts and the plan (no GPU load, no slow commands) and run
at both levels; `full` checks run functional tests and only at `--level full`. A check is a
function over a CheckContext (Config or None, HostFacts, Plan or None) returning a CheckResult: pass,
warn, fail or skip, with evidence (observed, expected, the command or file it came from)
and a fix. What cannot be judged is a skip that says why — never an exception.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import ConfigDict

from hostctl.data import Data

if TYPE_CHECKING:  # annotations only: importing config, plan and the model manifest costs ~50 ms
    from hostctl.config import Config
    from hostctl.facts.executable import ExecChain
    from hostctl.facts.records import ContainerFacts, HostFacts
    from hostctl.facts.checkpoint import CheckpointFacts
    from hostctl.plan.records import Plan, Problem
    from hostctl.service.liveness import ProgressCheck

Status = Literal["pass", "warn", "fail", "skip"]
Level = Literal["quick", "full"]
STATUSES: tuple[Status, ...] = ("pass", "warn", "fail", "skip")


class Evidence(Data):
    model_config = ConfigDict(frozen=True)

    observed: str
    expected: str | None = None
    source: str | None = None  # the file, command or API the observation came from

    def to_dict(self) -> dict:
        return {"observed": self.observed, "expected": self.expected, "source": self.source}


class CheckResult(Data):
    model_config = ConfigDict(frozen=True)

    status: Status
    summary: str  # one line: what was found
    evidence: Evidence | None = None
    fix: str | None = None


def passed(summary: str, observed: str | None = None, expected: str | None = None, source: str | None = None) -> CheckResult:
    return CheckResult(status="pass", summary=summary, evidence=Evidence(observed=observed or summary, expected=expected, source=source))


def warned(summary: str, fix: str, observed: str | None = None, expected: str | None = None,
           source: str | None = None) -> CheckResult:
    return CheckResult(status="warn", summary=summary, evidence=Evidence(observed=observed or summary, expected=expected, source=source), fix=fix)


def failed(summary: str, fix: str, observed: str | None = None, expected: str | None = None,
           source: str | None = None) -> CheckResult:
    return CheckResult(status="fail", summary=summary, evidence=Evidence(observed=observed or summary, expected=expected, source=source), fix=fix)


def skipped(reason: str, source: str | None = None) -> CheckResult:
    """Not applicable or not knowable here; `reason` completes "skip, because ..."."""
    return CheckResult(status="skip", summary=reason, evidence=Evidence(observed=reason, expected=None, source=source) if source else None)


class CheckContext:
    """What every check reads. A plain class, not data: it carries the profile, the plan and the
    facts records as they are, and as a model its validator would import their classes (config,
    plan, the model manifest: ~50 ms) on every doctor run, with or without a profile."""

    def __init__(self, *, facts: HostFacts, config: Config | None = None, plan: Plan | None = None,
                 level: Level = "quick", facts_source: str = "live", no_config_reason: str = "no host profile",
                 checkpoint: CheckpointFacts | None = None, boot_code: ExecChain | None = None,
                 boot_units: tuple[str, ...] = (), engine_progress: ProgressCheck | None = None) -> None:
        self.facts = facts
        self.config = config
        self.plan = plan
        self.level = level
        self.facts_source = facts_source  # "live", or the snapshot's path
        self.no_config_reason = no_config_reason
        self.checkpoint = checkpoint  # runtime.model_dir read live (not part of a facts snapshot)
        self.boot_code = boot_code  # the code behind the units' hostctl, read live (None: a snapshot)
        self.boot_units = boot_units  # the hostctl units installed on this host (host paths)
        # the running runtime's engine asked once (hostctl.service.liveness), read live; None: not asked
        self.engine_progress = engine_progress

    @property
    def live(self) -> bool:
        return self.facts_source == "live"

    def problems(self, codes: Sequence[str]) -> list[Problem]:
        """The plan's problems with one of these codes, the ones a check claims (none without a plan)."""
        if self.plan is None:
            return []
        return [p for p in self.plan.problems if p.code in codes]

    def no_profile(self, what: str = "") -> CheckResult:
        return skipped(f"{self.no_config_reason}" + (f": {what}" if what else ""))

    def runtime_containers(self) -> list[ContainerFacts]:
        """hostctl's runtime containers on this engine: those rendered for this profile (its name in
        the io.hostctl.profile label), or any hostctl-rendered one when there is no profile."""
        ours = [c for c in self.facts.engine.containers if c.labels.get("io.hostctl.profile")]
        if self.config is not None:
            ours = [c for c in ours if c.labels["io.hostctl.profile"] == self.config.profile.name]
        return ours


CheckFn = Callable[[CheckContext], CheckResult]


class Check:
    """One doctor check. `codes`: the plan problem codes (hostctl/plan/codes.py) it reports; every
    code belongs to exactly one check. `area` is the name of the checks/ module that exports it
    (filled in by hostctl.doctor.checks.all_checks). A plain class: it holds the check's function."""

    def __init__(self, id: str, title: str, level: Level, fn: CheckFn, codes: tuple[str, ...] = (),
                 area: str = "") -> None:
        self.id, self.title, self.level, self.fn, self.codes, self.area = id, title, level, fn, codes, area

    def in_area(self, area: str) -> Check:
        return Check(self.id, self.title, self.level, self.fn, self.codes, area)

    def __call__(self, ctx: CheckContext) -> CheckResult:
        return self.fn(ctx)


def check(id: str, title: str, *, level: Level = "quick", codes: tuple[str, ...] = ()) -> Callable[[CheckFn], Check]:
    """Declare a check function under a stable id; its module lists it in CHECKS."""

    def declare(fn: CheckFn) -> Check:
        return Check(id, title, level, fn, tuple(codes))

    return declare


class CheckRun(Data):
    # `check` is a Check, a plain class (it holds a function): taken as it is, not validated
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    check: Check
    result: CheckResult
    seconds: float


def run_checks(ctx: CheckContext, checks: Sequence[Check]) -> list[CheckRun]:
    """Run the given checks (hostctl.doctor.checks.all_checks() for every one) in order."""
    outcomes: list[CheckRun] = []
    for c in checks:
        if c.level == "full" and ctx.level != "full":
            outcomes.append(CheckRun(check=c, result=skipped("a full-level check: run `hostctl doctor --level full`"), seconds=0.0))
            continue
        start = time.perf_counter()
        try:
            result = c.fn(ctx)
        except Exception as exc:  # a bug in one check must not hide the others
            result = failed(f"the check itself broke: {exc.__class__.__name__}: {exc}",
                            fix="this is a hostctl bug: report it with `hostctl doctor --bundle FILE`")
        outcomes.append(CheckRun(check=c, result=result, seconds=time.perf_counter() - start))
    return outcomes
