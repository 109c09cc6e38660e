"""Whether a recipe's `requires` (gpus, vram_gb, host_ram_gb) fit a host, and which of several
fits it best: judged in the plan's own terms, on HostFacts."""

from __future__ import annotations

from hostctl.config import Recipe
from hostctl.facts.records import HostFacts
from hostctl.plan.memory import HOST_RAM_SLACK
from hostctl.plan.placement import VRAM_SLACK
from hostctl.bytesizes import fmt_gib


def recipe_fit(recipe: Recipe, facts: HostFacts) -> tuple[bool, str]:
    """Whether the recipe's `requires` fit this host, and why, in the plan's own terms: the first
    N GPUs by index (what the plan serves on), VRAM and host RAM with the same slack as the plan and
    doctor allow for vendor GB."""
    req = recipe.requires
    have: list[str] = []
    if req.gpus:
        if not facts.gpus.available:
            return False, f"needs {req.gpus} GPU(s); none can be read here ({facts.gpus.reason})"
        gpus = sorted(facts.gpus.devices, key=lambda g: g.index)
        if len(gpus) < req.gpus:
            return False, f"needs {req.gpus} GPUs; this host has {len(gpus)}"
        serving = gpus[: req.gpus]
        if req.vram_gb:
            small = [g for g in serving if g.memory_total_bytes < req.vram_gb * 1e9 * VRAM_SLACK]
            if small:
                g = small[0]
                return False, (f"needs {req.vram_gb:g} GB of VRAM on each of {req.gpus} GPU(s); GPU {g.index} "
                               f"({g.name}) has {fmt_gib(g.memory_total_bytes)}")
        vram = f" with >= {req.vram_gb:g} GB each" if req.vram_gb else ""
        have.append(f"{req.gpus} GPU(s){vram} (GPU {', '.join(str(g.index) for g in serving)}: "
                    f"{', '.join(fmt_gib(g.memory_total_bytes) for g in serving)})")
    else:
        have.append("no GPU")
    ram = facts.memory.mem_total_bytes
    if req.host_ram_gb:
        if ram < req.host_ram_gb * 1e9 * HOST_RAM_SLACK:
            return False, f"needs about {req.host_ram_gb:g} GB of host RAM; this host has {fmt_gib(ram)}"
        have.append(f"about {req.host_ram_gb:g} GB of host RAM (MemTotal {fmt_gib(ram)})")
    return True, "needs " + ", ".join(have)


def rank(recipe: Recipe) -> tuple:
    """More of this host used ranks first: GPUs, then VRAM per GPU, then host RAM, then context."""
    r = recipe.requires
    return (-r.gpus, -(r.vram_gb or 0), -(r.host_ram_gb or 0), -recipe.context, recipe.id)
