"""Service checks: what was proven about the served model itself. `service.qualified` judges the
stored qualify verdict (the context ladder of `hostctl bench --suite qualify`) against the
service this profile's plan describes now, through the service fingerprint
(hostctl/service/fingerprint.py): a verdict measured under another recipe, image or plan proves
nothing about this one."""

from __future__ import annotations

from hostctl.doctor.registry import CheckContext, CheckResult, check, failed, passed, skipped, warned
from hostctl.service import fingerprint

SOURCE = "/var/lib/hostctl/qualify.json (stored by `hostctl bench --suite qualify`)"
RUN_QUALIFY = "with the service up (`hostctl up`), run `hostctl bench --suite qualify`"


@check("service.qualified", "the served context is proven (qualify verdict)")
def qualified(ctx: CheckContext) -> CheckResult:
    if ctx.config is None or ctx.plan is None:
        return ctx.no_profile("the qualify verdict is judged against this profile's plan")
    verdict = ctx.facts.state.qualify
    context = ctx.config.recipe.context
    if verdict is None and not ctx.live:
        # Snapshots made before the verdict existed (the bundled hosts of docs/field-reports.md) cannot tell.
        return skipped(f"the snapshot {ctx.facts_source} carries no qualify verdict", source=SOURCE)
    if verdict is None:
        return warned(f"no qualify verdict stored: the {context:,}-token context is configured but not proven",
                      fix=RUN_QUALIFY, observed="no qualify.json", expected="a passed verdict for this service",
                      source=SOURCE)
    image_ref = ctx.plan.runtime.image
    image = next((i for i in ctx.facts.engine.images if i.ref == image_ref), None)
    stored = fingerprint.ServiceFingerprint.from_dict(verdict.fingerprint)
    notes = []
    if image is None:
        # A snapshot made without the image (or by an older hostctl) cannot tell: compare the rest.
        image_id = stored.image_id
        notes.append("image id not in these facts: compared compose.yaml and runtime.env names only")
    else:
        image_id = image.id
    current = fingerprint.of_plan(ctx.plan, image_id)
    why = fingerprint.differences(stored, current)
    if verdict.recipe and verdict.recipe != ctx.config.recipe.id:
        why.insert(0, f"measured under recipe {verdict.recipe}; this profile serves {ctx.config.recipe.id}")
    observed = (f"{'passed' if verdict.passed else 'failed'} at {verdict.measured_at} under service "
                f"{stored.digest[:12]}; this plan's service is {current.digest[:12]}"
                + (f" ({'; '.join(notes)})" if notes else ""))
    if why:
        return warned("the stored qualify verdict was measured under another recipe, image or plan: " + "; ".join(why),
                      fix=RUN_QUALIFY + " again", observed=observed, expected=f"service {current.digest[:12]}",
                      source=SOURCE)
    rungs = ", ".join(f"{r.get('name')} {'ok' if r.get('pass') else 'FAILED'}" for r in verdict.rungs)
    if not verdict.passed:
        return failed(f"the context ladder failed on this service at {verdict.context or context:,} tokens: {rungs}",
                      fix="read the result file for each rung's evidence; lower the recipe's context or fix what the "
                          "failed rung names (KV capacity, max_num_seqs, the model), then qualify again",
                      observed=observed + (f"; result {verdict.result}" if verdict.result else ""), source=SOURCE)
    return passed(f"qualified at {verdict.context or context:,} tokens on this service: {rungs}", observed=observed,
                  source=SOURCE)


SUPERVISION_SOURCE = "/var/lib/hostctl/restarts.json (written by `hostctl up --foreground`, README \"Supervision\")"


@check("service.supervision", "the supervised runtime has not died or hung recently")
def supervision(ctx: CheckContext) -> CheckResult:
    from datetime import datetime, timezone

    from hostctl.service.restarts import summary

    endings = ctx.facts.state.supervised
    if not endings:
        return passed("no death or hang of a supervised runtime recorded", source=SUPERVISION_SOURCE)
    doc = summary(endings, datetime.now(timezone.utc))
    last = endings[-1]
    lines = "; ".join(last.lines)
    observed = f"last: {last.kind} at {last.ended_at} [{last.cause}] {last.title or ''}".strip() + (
        f" ({lines})" if lines else "")
    if not last.restart_at:
        return failed(f"the supervised runtime ended [{last.cause}] and was not restarted: {doc['text']}",
                      fix="fix what the cause names (`hostctl status`, `journalctl -u hostctl-runtime`), then "
                          "`systemctl reset-failed hostctl-runtime.service && systemctl start hostctl-runtime.service`",
                      observed=observed, source=SUPERVISION_SOURCE)
    if doc["restarts_in_window"]:
        return warned(doc["text"], fix="read the causes (`hostctl status`, `journalctl -u hostctl-runtime`); a repeated "
                      "cause is a real fault to fix, not noise", observed=observed, source=SUPERVISION_SOURCE)
    return passed(f"no restart in the last hour ({doc['text']})", observed=observed, source=SUPERVISION_SOURCE)


CHECKS = (qualified, supervision)
