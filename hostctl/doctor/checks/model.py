"""Model check: the checkpoint the recipe names is on this host, is the revision the recipe (or
the profile) pins, passes the quick verify, and when it was last fully verified. A model inside
the runtime image has nothing to check. Reads the live reading of the checkpoint directory (sizes and
hostctl's manifest; hostctl/facts/checkpoint.py) and the models file the recipe resolves through."""

from __future__ import annotations

from hostctl.doctor.registry import CheckContext, CheckResult, check, failed, passed, skipped, warned
from hostctl.errors import InputError


@check("model.checkpoint", "the checkpoint is present, pinned and verified")
def checkpoint(ctx: CheckContext) -> CheckResult:
    if ctx.config is None:
        return ctx.no_profile("no checkpoint to check")
    # Imported only with a profile: the models file's YAML reader and the manifest's schema
    # are doctor's start-up cost otherwise (benchmarks/doctor_quick.py).
    from hostctl.facts.manifest import MANIFEST_NAME
    from hostctl.model.resolve import load_ref
    from hostctl.model.verify import judge

    try:
        ref = load_ref(ctx.config)
    except InputError as exc:
        return failed(exc.message, fix=exc.fix or "correct the recipe's model", source=ctx.config.source)
    if ref.kind == "image":
        return skipped(f"the model {ref.model} is inside the runtime image: nothing to verify")
    if not ref.model_dir:
        return failed("runtime.model_dir is not set: the checkpoint has nowhere to be",
                      fix="set runtime.model_dir in the profile, then `hostctl model pull`", source=ctx.config.source)
    cp = ctx.checkpoint
    if cp is None or cp.path != ref.model_dir:
        return skipped(f"{ref.model_dir} is read on the host itself, not from a facts snapshot")
    v = judge(ref, cp, "quick")
    m = cp.manifest
    source = f"{ref.model_dir}/{MANIFEST_NAME}, config.json, model.safetensors.index.json"
    expected = (f"{ref.repo}@{ref.revision}" if ref.revision else (ref.repo or ref.model)) + \
        ", every indexed shard at the manifest's size, a full verify on record"
    observed = (f"{cp.path}: " + (f"{m.repo}@{m.revision}" if m else "no manifest") +
                f", {len(v.files)} files checked, last full verify {m.verified_full_at if m and m.verified_full_at else 'never'}")
    if not v.ok:
        return failed("; ".join(v.problems), fix=v.fix or "hostctl model pull", observed=observed, expected=expected,
                      source=source)
    if ref.pin_problem:
        return warned(ref.pin_problem, fix=ref.pin_fix or "pin a commit", observed=observed, expected=expected,
                      source=source)
    if m is None:
        return warned(v.warnings[0] if v.warnings else "no manifest", fix=v.fix or "hostctl model pull",
                      observed=observed, expected=expected, source=source)
    if not m.verified_full_at:
        return warned("present and the pinned revision, but never fully verified (no hash recomputed on record)",
                      fix="hostctl model verify", observed=observed, expected=expected, source=source)
    return passed(f"{m.repo}@{m.revision[:12]}, {len(v.files)} files; last full verify {m.verified_full_at}",
                  observed, expected, source)


CHECKS = (checkpoint,)
