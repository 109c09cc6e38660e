"""GPU power limits that drift while the runtime serves (README "Supervision"): a driver reload
(`nvidia-smi -r`, the module reloaded after a driver update) resets every GPU's limit to its
default, and hostctl-power.service ran once, at boot. While supervising, hostctl reads the limits
the plan sets every 30 s (supervise.POWER_EVERY_S) and, when one differs, puts them back as that unit does
(`provision --only gpu --boot`: through the executor, each limit checked against the GPU's own
range, set and read back) and says what it found and did.

A put-back that fails (the supervisor is not root, the driver refuses, another provision holds
the lock) is said once and tried again every RETRY_S while the drift lasts; the runtime keeps
serving either way.
hostctl.service.supervise is handed a PowerWatch by its caller (the CLI, a cluster replica's
`up`): provision's parts stand beside service on the same floor, and neither imports the other.
"""

from __future__ import annotations

import io
import time
from collections.abc import Callable
from typing import Any

from hostctl.config import Config
from hostctl.plan.records import PowerSetting

TOLERANCE_W = 1.0  # NVML reports milliwatts; the profile names watts
RETRY_S = 300.0  # a failed put-back reads the host and runs the executor: not every 30 s


def watched(settings: list[PowerSetting]) -> list[PowerSetting]:
    """The GPUs whose limit the plan sets (set now, or already as asked)."""
    return [s for s in settings if s.action in ("set", "keep") and s.desired_w is not None]


def drift(settings: list[PowerSetting], limits_w: dict[int, float | None]) -> list[str]:
    """What differs from the plan, one line per GPU (pure; an unreadable limit is not a drift)."""
    out = []
    for s in watched(settings):
        now = limits_w.get(s.index)
        if now is not None and s.desired_w is not None and abs(now - s.desired_w) > TOLERANCE_W:
            out.append(f"GPU {s.index} ({s.uuid}) is at {now:g} W, the plan sets {s.desired_w:g} W")
    return out


class PowerWatch:
    """The supervisor's power check (a plain class: it holds the NVML adapter and what it said)."""

    def __init__(self, config: Config, settings: list[PowerSetting], say: Callable[[str], None], *,
                 adapter: Any = None, facts: Callable[[Config], Any] | None = None) -> None:
        """adapter: the NVML adapter (a test's fake); facts: what the put-back's gpu part reads
        first (default: this host's, as `provision` reads them)."""
        self.config, self.settings, self.say = config, watched(settings), say
        self.adapter, self.facts = adapter, facts
        self.failed: str | None = None  # the last put-back's failure, said once
        self.failed_at = 0.0  # monotonic

    @property
    def active(self) -> bool:
        return bool(self.settings)

    def check(self) -> list[str]:
        """Read the limits; put them back when they drifted. The drift found (empty: none)."""
        from hostctl.facts.gpu import NvmlAdapter
        from hostctl.facts.gpu_telemetry import read_power_limits_w

        if self.adapter is None:
            self.adapter = NvmlAdapter()
        found = drift(self.settings, read_power_limits_w(self.adapter, [s.index for s in self.settings]))
        if not found:
            self.failed = None
            return found
        if self.failed is not None and time.monotonic() - self.failed_at < RETRY_S:
            return found
        if self.failed is None:
            self.say("power limits drifted (a driver reload resets them to the default): " + "; ".join(found)
                     + "; putting them back as hostctl-power.service does")
        problem = self._put_back()
        if problem is None:
            self.failed = None
            self.say("power limits put back: " + ", ".join(f"GPU {s.index} {s.desired_w:g} W" for s in self.settings))
        else:
            if problem != self.failed:
                self.say(f"power limits NOT put back: {problem} (run `sudo hostctl provision --only gpu`)")
            self.failed, self.failed_at = problem, time.monotonic()
        return found

    def _put_back(self) -> str | None:
        """`provision --only gpu --boot`, in this process: None when every limit was set and read back."""
        from hostctl.provision.parts import provision

        buf = io.StringIO()
        report = provision(self.config, only="gpu", boot=True, yes=True, out=buf, err=buf, facts=self.facts,
                           gpu_options={"adapter": self.adapter})
        return None if report.error is None else report.error.message
