"""System checks: the profile and recipe load and the plan's remaining problems (the runtime
section; every other section has its own checks), whether the readings come from inside
a virtual machine, where GPU topology, P2P and NUMA may not describe the hardware, and whether
the code the boot units run as root is root's alone (hostctl/provision/boot_code.py decides)."""

from __future__ import annotations

from hostctl.doctor.registry import CheckContext, CheckResult, check, failed, passed, skipped, warned
from hostctl.plan import codes

RUNTIME_CODES = (codes.RUNTIME_NO_IMAGE, codes.RUNTIME_NO_MODEL_DIR, codes.RUNTIME_MODELS_DIR_UNSET)
BOX_CODES = (codes.BOX_TOO_FEW_GPUS, codes.BOX_VRAM_SHORT, codes.BOX_HOST_RAM_SHORT, codes.BOX_MODEL_MISSING,
             codes.BOX_FACTS_DIFFER)


@check("system.config", "profile, recipe and plan", codes=RUNTIME_CODES)
def config(ctx: CheckContext) -> CheckResult:
    if ctx.config is None or ctx.plan is None:
        return skipped(f"{ctx.no_config_reason}: profile-dependent checks skip (pass --config PATH)")
    cfg, plan = ctx.config, ctx.plan
    observed = f"profile {cfg.profile.name} from {cfg.source}: recipe {cfg.recipe.id}, {cfg.profile.phase} phase"
    problems = ctx.problems(RUNTIME_CODES)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        return failed("; ".join(p.message for p in errors), fix=errors[0].fix or "see `hostctl plan`",
                      observed=observed, source=cfg.source)
    warnings = [p.message for p in problems] + list(cfg.warnings)
    if warnings:
        return warned("; ".join(warnings), fix=(problems[0].fix if problems and problems[0].fix else
                                                "see `hostctl plan`; prefer serial:, wwn: or by-id: drive identities"),
                      observed=observed, source=cfg.source)
    n_errors = len(plan.errors)
    return passed(f"{cfg.profile.name}: recipe {cfg.recipe.id}, {cfg.profile.phase} phase"
                  + (f"; {n_errors} plan error(s), reported by the checks below" if n_errors else ""),
                  observed=observed, source=cfg.source)


@check("system.box", "the recipe fits the declared vLLM-MoET box, and this host is that box", codes=BOX_CODES)
def box(ctx: CheckContext) -> CheckResult:
    if ctx.config is None or ctx.plan is None:
        return skipped(f"{ctx.no_config_reason}: profile-dependent checks skip (pass --config PATH)")
    declared = ctx.config.profile.box
    if declared is None:
        return skipped("the profile declares no vLLM-MoET box ([box], written by `hostctl init --box`)")
    source = f"{declared.file} as the profile's [box] keeps it"
    problems = ctx.problems(BOX_CODES)
    errors = [p for p in problems if p.severity == "error"]
    if errors:
        return failed("; ".join(p.message for p in errors), fix=errors[0].fix or "see `hostctl plan`", source=source)
    if problems:
        return warned("; ".join(p.message for p in problems), fix=problems[0].fix or "see `hostctl plan`",
                      source=source)
    return passed(f"recipe {ctx.config.recipe.id} fits box {declared.id}, and this host matches it", source=source)


@check("system.virtualization", "readings come from the host itself")
def virtualization(ctx: CheckContext) -> CheckResult:
    k = ctx.facts.kernel
    source = k.virtualization_evidence or "systemd-detect-virt, DMI, /proc/cpuinfo"
    if not k.virtualization:
        return passed("not virtualised", observed=k.virtualization_evidence or "no hypervisor detected", source=source)
    if ctx.facts.gpus.available and ctx.facts.gpus.devices:
        return warned(f"running inside a VM ({k.virtualization}): GPU topology, P2P status, BAR1 size and NUMA nodes "
                      "describe the virtual machine, not the hardware", fix="for placement and P2P decisions, run "
                      "`hostctl facts` / `hostctl doctor` on the host itself", observed=k.virtualization_evidence or "",
                      source=source)
    return passed(f"virtualised ({k.virtualization}); no GPU readings to distrust", observed=k.virtualization_evidence or "",
                  source=source)


@check("system.boot_code", "the hostctl the boot units run is root's alone")
def boot_code(ctx: CheckContext) -> CheckResult:
    from hostctl.errors import RefusedError
    from hostctl.provision.boot_code import INSTALL_ROUTE, problem

    chain = ctx.boot_code
    if chain is None:
        return skipped("the executable the boot units call is read on the host itself, not from a facts snapshot")
    source = f"{chain.path}, the links, interpreter and Python environment behind it (owners and modes)"
    found = problem(chain)
    if found is None:
        return passed(f"{chain.path} and the {len(chain.entries)} files and folders behind it can be changed by root only",
                      source=source)
    if isinstance(found, RefusedError):
        return failed(found.message, fix=INSTALL_ROUTE, observed="; ".join(found.details), source=source)
    if not ctx.boot_units:
        return skipped(f"no boot unit is installed yet and {chain.path} does not exist; before `hostctl provision`: "
                       "`sudo ./install.sh` in a hostctl checkout", source=source)
    return failed(f"{', '.join(ctx.boot_units)} call {chain.path}, which does not exist: they fail at every boot",
                  fix=INSTALL_ROUTE, source=source)


CHECKS = (config, box, virtualization, boot_code)
