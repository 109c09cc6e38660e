"""The check registry: what a doctor check is, what it returns, and running them all.

A check has a stable id (`gpu.power.limit`), a title, an area (how reports group it) and a
level: `quick` checks only read facts and the plan (no GPU load, no slow commands) and run
at both levels; `full` checks run functional tests and only at `--level full`. A check is a
function over a Context (Config or None, HostFacts, Plan or None) returning a Result: pass,
warn, fail or skip, with evidence (observed, expected, the command or file it came from)
and a fix. What cannot be judged is a skip that says why — never an exception.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from hostctl.config import Config
from hostctl.facts.model import ContainerFacts, HostFacts
from hostctl.model.facts import CheckpointFacts
from hostctl.plan.model import Plan

Status = Literal["pass", "warn", "fail", "skip"]
Level = Literal["quick", "full"]
STATUSES: tuple[Status, ...] = ("pass", "warn", "fail", "skip")
# Report order of the areas; a check's area is the module it lives in under checks/.
AREAS = ("gpu", "memory", "storage", "model", "docker", "service", "system", "logs")


@dataclass(frozen=True)
class Evidence:
    observed: str
    expected: str | None = None
    source: str | None = None  # the file, command or API the observation came from

    def to_dict(self) -> dict:
        return {"observed": self.observed, "expected": self.expected, "source": self.source}


@dataclass(frozen=True)
class Result:
    status: Status
    summary: str  # one line: what was found
    evidence: Evidence | None = None
    fix: str | None = None


def passed(summary: str, observed: str | None = None, expected: str | None = None, source: str | None = None) -> Result:
    return Result("pass", summary, Evidence(observed or summary, expected, source))


def warned(summary: str, fix: str, observed: str | None = None, expected: str | None = None,
           source: str | None = None) -> Result:
    return Result("warn", summary, Evidence(observed or summary, expected, source), fix)


def failed(summary: str, fix: str, observed: str | None = None, expected: str | None = None,
           source: str | None = None) -> Result:
    return Result("fail", summary, Evidence(observed or summary, expected, source), fix)


def skipped(reason: str, source: str | None = None) -> Result:
    """Not applicable or not knowable here; `reason` completes "skip, because ..."."""
    return Result("skip", reason, Evidence(reason, None, source) if source else None)


@dataclass
class Context:
    facts: HostFacts
    config: Config | None = None
    plan: Plan | None = None
    level: Level = "quick"
    facts_source: str = "live"  # "live", or the snapshot's path
    no_config_reason: str = "no host profile"
    checkpoint: CheckpointFacts | None = None  # runtime.model_dir read live (not part of a facts snapshot)

    @property
    def live(self) -> bool:
        return self.facts_source == "live"

    def no_profile(self, what: str = "") -> Result:
        return skipped(f"{self.no_config_reason}" + (f": {what}" if what else ""))

    def runtime_containers(self) -> list[ContainerFacts]:
        """hostctl's runtime containers on this engine: those rendered for this profile (its name in
        the io.hostctl.profile label), or any hostctl-rendered one when there is no profile."""
        ours = [c for c in self.facts.engine.containers if c.labels.get("io.hostctl.profile")]
        if self.config is not None:
            ours = [c for c in ours if c.labels["io.hostctl.profile"] == self.config.profile.name]
        return ours

    @property
    def serving_gpus(self) -> int | None:
        """How many GPUs the plan serves on (None without a plan)."""
        return None if self.plan is None else len(self.plan.placement.gpus)


CheckFn = Callable[[Context], Result]


@dataclass(frozen=True)
class Check:
    id: str
    title: str
    area: str
    level: Level
    fn: CheckFn = field(compare=False, repr=False)


REGISTRY: list[Check] = []


def check(id: str, title: str, *, area: str, level: Level = "quick") -> Callable[[CheckFn], CheckFn]:
    """Register a check function under a stable id."""

    def register(fn: CheckFn) -> CheckFn:
        if any(c.id == id for c in REGISTRY):
            raise ValueError(f"duplicate doctor check id {id!r}")
        if area not in AREAS:
            raise ValueError(f"check {id}: unknown area {area!r}")
        REGISTRY.append(Check(id, title, area, level, fn))
        return fn

    return register


def all_checks() -> list[Check]:
    """Every registered check, in report order (by area, then registration order)."""
    from hostctl.doctor import checks  # noqa: F401  (importing the package registers its checks)

    return sorted(REGISTRY, key=lambda c: AREAS.index(c.area))


@dataclass(frozen=True)
class Outcome:
    check: Check
    result: Result
    seconds: float


def run_checks(ctx: Context, checks: list[Check] | None = None) -> list[Outcome]:
    import time

    outcomes: list[Outcome] = []
    for c in checks if checks is not None else all_checks():
        if c.level == "full" and ctx.level != "full":
            outcomes.append(Outcome(c, skipped("a full-level check: run `hostctl doctor --level full`"), 0.0))
            continue
        start = time.perf_counter()
        try:
            result = c.fn(ctx)
        except Exception as exc:  # a bug in one check must not hide the others
            result = failed(f"the check itself broke: {exc.__class__.__name__}: {exc}",
                            fix="this is a hostctl bug: report it with `hostctl doctor --bundle FILE`")
        outcomes.append(Outcome(c, result, time.perf_counter() - start))
    return outcomes
