"""Power plan: the limit each GPU should run at, checked against that GPU's own range."""

from __future__ import annotations

from typing import TYPE_CHECKING

from hostctl.facts.records import HostFacts
from hostctl.plan import codes
from hostctl.plan.records import PowerPlan, PowerSetting

if TYPE_CHECKING:  # annotations only: doctor's checks import these modules without a profile
    from hostctl.config import Config

TOLERANCE_W = 0.5


def desired_limit(config: Config, index: int, uuid: str) -> float | None:
    per_gpu = config.profile.gpu.power_limits_w
    return per_gpu.get(uuid, per_gpu.get(str(index), config.profile.gpu.power_limit_w))


def plan_power(config: Config, facts: HostFacts) -> PowerPlan:
    plan = PowerPlan()
    configured = config.profile.gpu.power_limit_w is not None or bool(config.profile.gpu.power_limits_w)
    if not facts.gpus.available:
        if configured:
            plan.problem(codes.POWER_NO_GPU, "warn", f"power limits are configured but no GPU can be read: {facts.gpus.reason}",
                         fix="the boot unit applies them once the driver loads")
        plan.decide("power limits", "none", "no GPU to set")
        return plan
    for gpu in sorted(facts.gpus.devices, key=lambda g: g.index):
        want = desired_limit(config, gpu.index, gpu.uuid)
        p = gpu.power
        setting = PowerSetting(index=gpu.index, uuid=gpu.uuid, desired_w=want, current_w=p.limit_w,
                               min_w=p.min_w, max_w=p.max_w, action="none")
        if want is None:
            plan.decide(f"GPU {gpu.index} power limit", "unchanged", "the profile sets none")
        elif p.min_w is not None and p.max_w is not None and not (p.min_w - TOLERANCE_W <= want <= p.max_w + TOLERANCE_W):
            setting.action = "invalid"
            plan.problem(codes.POWER_OUT_OF_RANGE, "error",
                         f"GPU {gpu.index} ({gpu.name}): power limit {want:g} W is outside its range "
                         f"{p.min_w:g}-{p.max_w:g} W",
                         fix=f"set gpu.power_limit_w between {p.min_w:g} and {p.max_w:g}")
        elif p.limit_w is not None and abs(p.limit_w - want) <= TOLERANCE_W:
            setting.action = "keep"
            plan.decide(f"GPU {gpu.index} power limit", f"{want:g} W", "already set")
        else:
            setting.action = "set"
            rng = f" (range {p.min_w:g}-{p.max_w:g} W)" if p.min_w is not None and p.max_w is not None else ""
            plan.decide(f"GPU {gpu.index} power limit", f"{want:g} W",
                        f"the profile asks for it; now {p.limit_w:g} W{rng}" if p.limit_w is not None
                        else f"the profile asks for it{rng}")
        plan.gpus.append(setting)
    return plan
