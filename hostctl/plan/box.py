"""The box section of the plan: the recipe against the vLLM-MoET box the profile declares
(`[box]`, written by `hostctl init --box`), and that declaration against this host's facts.

The first half is vLLM-MoET's own verdict on the same files (bench/runner/common.py: compat):
the box's declared GPU count, VRAM per GPU and host RAM against the recipe's `requires`, compared
as the declared numbers they are (no slack: both sides are GB as a person wrote them), and every
model the recipe serves (its model and requires.extra_models) among the box's models. compat stops
at the first reason; the plan reports each, in compat's order, so one run lists all there is to
fix. Whether the checkpoint is on disk and matches its pin is the model checks' (doctor's
model.*), not a declaration's.

The second half says where this host is not the box it claims to be (fewer or more GPUs, less
VRAM or RAM than declared, another GPU model): a warning, since the plan's own sections already
judge the recipe on the facts themselves.
"""

from __future__ import annotations

from hostctl.bytesizes import fmt_gib
from hostctl.config import BoxDeclaration, Config, Recipe
from hostctl.facts.records import HostFacts
from hostctl.plan import codes
from hostctl.plan.memory import HOST_RAM_SLACK
from hostctl.plan.records import BoxPlan
from hostctl.plan.placement import VRAM_SLACK


FIT_FIX = "choose a recipe this box can run (`hostctl init --box` lists them), or correct the [box] declaration"


def box_fit(box: BoxDeclaration, recipe: Recipe) -> list[tuple[str, str]]:
    """(code, reason) for each reason the declared box cannot run the recipe, in compat's order;
    [] when it can. `hostctl init --box` chooses recipes by it, and the plan reports it."""
    req = recipe.requires
    out: list[tuple[str, str]] = []
    if box.gpus < req.gpus:
        out.append((codes.BOX_TOO_FEW_GPUS, f"needs {req.gpus} GPUs; box {box.id} declares {box.gpus}"))
    if box.vram_gb < (req.vram_gb or 0):
        out.append((codes.BOX_VRAM_SHORT, f"needs {req.vram_gb:g} GB of VRAM per GPU; box {box.id} declares "
                    f"{box.vram_gb:g}"))
    if box.host_ram_gb < (req.host_ram_gb or 0):
        out.append((codes.BOX_HOST_RAM_SHORT, f"needs {req.host_ram_gb:g} GB of host RAM; box {box.id} declares "
                    f"{box.host_ram_gb:g}"))
    for name in [recipe.model, *req.extra_models]:
        if name not in box.models:
            out.append((codes.BOX_MODEL_MISSING, f"serves model {name}, which box {box.id} does not hold (its "
                        f"models: {', '.join(box.models) or 'none'})"))
    return out


def _fit(plan: BoxPlan, config: Config) -> None:
    box = config.profile.box
    for code, reason in box_fit(box, config.recipe):
        fix = ("add the model to the box's models: map and run `hostctl init --box` again, or choose a recipe for "
               "a model the box holds") if code == codes.BOX_MODEL_MISSING else FIT_FIX
        plan.problem(code, "error", f"the recipe {reason} ({box.file})", fix=fix)


def _facts(plan: BoxPlan, config: Config, facts: HostFacts) -> None:
    box = config.profile.box
    differ: list[str] = []
    if not facts.gpus.available:
        differ.append(f"its GPUs cannot be read ({facts.gpus.reason}), so the declared {box.gpus} are not confirmed")
    else:
        gpus = sorted(facts.gpus.devices, key=lambda g: g.index)
        if len(gpus) != box.gpus:
            differ.append(f"it has {len(gpus)} GPU(s), the box declares {box.gpus}")
        small = [g for g in gpus if g.memory_total_bytes < box.vram_gb * 1e9 * VRAM_SLACK]
        if small:
            differ.append(f"GPU {small[0].index} has {fmt_gib(small[0].memory_total_bytes)} of VRAM, the box declares "
                          f"{box.vram_gb:g} GB per GPU")
        other = [g for g in gpus if box.gpu_name and box.gpu_name.lower() not in g.name.lower()]
        if other:
            differ.append(f"GPU {other[0].index} is a {other[0].name}, the box declares {box.gpu_name}")
    ram = facts.memory.mem_total_bytes
    if ram < box.host_ram_gb * 1e9 * HOST_RAM_SLACK:
        differ.append(f"MemTotal is {fmt_gib(ram)}, the box declares {box.host_ram_gb:g} GB of host RAM")
    if differ:
        plan.problem(codes.BOX_FACTS_DIFFER, "warn", f"this host is not the box {box.id} declares: " + "; ".join(differ),
                     fix=f"correct {box.file} (or the profile's [box]) to this host, or run on the host it describes")


def plan_box(config: Config, facts: HostFacts) -> BoxPlan:
    box = config.profile.box
    plan = BoxPlan(box=box.id if box is not None else None)
    if box is None:
        return plan
    plan.decide("box", f"{box.id}: {box.gpus}x {box.gpu_name or 'GPU'} ({box.vram_gb:g} GB), {box.host_ram_gb:g} GB "
                "host RAM", f"declared by {box.file}; the recipe is checked against it as vLLM-MoET's runner checks "
                "a box (bench/runner/common.py: compat)")
    _fit(plan, config)
    _facts(plan, config, facts)
    return plan
