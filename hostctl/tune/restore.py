"""The service that was up before `hostctl tune`: what it was (its container, state and service
fingerprint), whether tune can bring it back as it was, and bringing it back afterwards.

"As it was" means the same Compose project started from the same configuration: the service
fingerprint (hostctl/service/fingerprint.py: rendered compose.yaml, runtime.env names, image id)
of the project running before tune equals the one running after, and the service is ready again
through `up`'s own lifecycle (preflight, smoke gate). Tune's boots use the profile's Compose
project (one port, one container name), so the service is stopped for the sweep and started again
from the profile afterwards -- when the sweep ends, when it fails, and after Ctrl-C / SIGTERM
(a second signal while it comes back stops that too: `up`'s own guard takes down what it started).

Tune cannot bring back what the profile does not render: a running service whose fingerprint is
not what the profile renders now (the profile, recipe, image or hostctl changed since its `up`),
or one that is running but was never declared ready, is refused before anything is stopped
(`decide` is pure; `observe` and `bring_back` touch the engine).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import ConfigDict, Field

from hostctl.data import Data
from hostctl.errors import HostctlError, RefusedError
from hostctl.service import fingerprint
from hostctl.service.fingerprint import ServiceFingerprint

Say = Callable[[str], None]


class Before(Data):
    model_config = ConfigDict(frozen=True)

    container: str
    running: bool
    state: str | None  # hostctl's record of the last up/down for this container (None: no record)
    recipe: str | None
    running_fp: ServiceFingerprint | None  # of the project running now (None: not running)
    profile_fp: ServiceFingerprint | None  # of what `up` would render from the profile now
    differences: list[str] = Field(default_factory=list)

    @property
    def ready(self) -> bool:
        return self.running and self.state == "ready"

    def to_dict(self) -> dict:
        return {"container": self.container, "running": self.running, "state": self.state, "recipe": self.recipe,
                "fingerprint": self.running_fp.to_dict() if self.running_fp else None}


def decide(before: Before) -> RefusedError | None:
    """Why tune must not stop the service that is up (None: it may, and can bring it back)."""
    if not before.running:
        return None
    keep = f"tune needs the profile's Compose project for its boots and would have to stop {before.container}"
    if before.state != "ready":
        return RefusedError(
            f"{before.container} is running, but the last `hostctl up` did not declare it ready "
            f"(state: {before.state or 'unknown'}); {keep}, and could not bring it back as it was",
            details=["nothing was changed"],
            fix="take it down with `hostctl down` (or bring it up with `hostctl up`), then run tune again")
    if before.running_fp is None or before.profile_fp is None:
        return RefusedError(f"cannot tell what {before.container} was started from (its fingerprint is unknown); "
                            f"{keep}, and could not bring it back as it was", details=["nothing was changed"],
                            fix="run `hostctl up` (it renders the project again), then run tune again")
    if before.running_fp.digest != before.profile_fp.digest:
        return RefusedError(
            f"{before.container} was started from another configuration than the profile renders now; {keep}, "
            f"and bringing it back from the profile would not bring it back as it was",
            details=before.differences + ["nothing was changed"],
            fix="run `hostctl up` to serve what the profile says now (or restore the profile), then run tune again")
    return None


def observe(cfg, plan, *, hostctl_bin: str) -> Before:
    """The container of the profile's project, hostctl's record of it, and both fingerprints."""
    from hostctl.service import saved
    from hostctl.facts.container import container_state
    from hostctl.service.lifecycle import container_name, project_dir

    name = container_name(plan)
    st = container_state(name)
    last = saved.load_service()
    mine = last is not None and last.container == name
    running_fp = fingerprint.of_project(project_dir(cfg), st.image_id) if st.running else None
    profile_fp = profile_fingerprint(cfg, plan, hostctl_bin=hostctl_bin) if st.running else None
    diff = fingerprint.differences(running_fp, profile_fp) if running_fp and profile_fp else []
    return Before(container=name, running=st.running, state=last.state if mine else None,
                  recipe=last.recipe if mine else None, running_fp=running_fp, profile_fp=profile_fp,
                  differences=diff)


def profile_fingerprint(cfg, plan, *, hostctl_bin: str) -> ServiceFingerprint | None:
    """What `up` would render from this config now (rendered exactly as `up` renders it), with the
    id the engine resolves the plan's image to (None when the engine does not have it)."""
    from hostctl.facts.container import image_id
    from hostctl.service.render import render_files

    files = render_files(plan, hostctl_bin=hostctl_bin, config_path=str(Path(cfg.source).resolve()))
    return fingerprint.of_files(files["compose.yaml"], files["runtime.env"], image_id(plan.runtime.image))


def bring_back(before: Before, cfg, plan, facts, *, why: str, say: Say, hostctl_bin: str, up=None,
               observe_after=None) -> dict:
    """Start the service again through `up`'s lifecycle and compare its fingerprint with the one
    it had. `why`: "ended", "failed" or "interrupted" (what happened to the sweep). Returns the
    tune document's `restore` part; never raises a HostctlError (the caller decides the exit)."""
    if not before.running:
        return {"needed": False, "done": True, "summary": "none was running before tune; none is running now"}
    from hostctl.interrupt import Interrupted, signals_raise

    if up is None:
        from hostctl.service.lifecycle import up
    observe_after = observe_after or (lambda: observe(cfg, plan, hostctl_bin=hostctl_bin))
    fp_before = before.running_fp.to_dict() if before.running_fp else None
    part = {"needed": True, "after": why, "container": before.container, "recipe": before.recipe,
            "fingerprint_before": fp_before, "fingerprint_after": None, "same_fingerprint": False}
    say(f"bringing {before.container} back as it was (recipe {before.recipe})"
        + ("; Ctrl-C again to leave it down" if why == "interrupted" else ""))
    try:
        with signals_raise():
            outcome = up(cfg, plan, facts, timeout=None, keep_on_failure=False, say=say, hostctl_bin=hostctl_bin)
    except Interrupted as exc:
        return {**part, "done": False, "failed": True,
                "summary": f"{before.container} was stopped for the sweep and NOT brought back: interrupted by "
                           f"{exc.signal_name} while it started again; run `hostctl up`"}
    except HostctlError as exc:
        return {**part, "done": False, "failed": True, "summary": f"up failed: {exc.message}"}
    if not outcome.ready:
        c = outcome.cause
        return {**part, "done": False, "failed": True,
                "summary": f"up failed [{c.id if c else 'not ready'}]" + (f": {c.title}" if c else "")}
    after = observe_after()
    part["fingerprint_after"] = after.running_fp.to_dict() if after.running_fp else None
    same = bool(after.running_fp and before.running_fp and after.running_fp.digest == before.running_fp.digest)
    part["same_fingerprint"] = same
    if not same:
        diff = (fingerprint.differences(before.running_fp, after.running_fp)
                if after.running_fp and before.running_fp else ["the fingerprint is unknown on one side"])
        return {**part, "done": False, "failed": True,
                "summary": f"{before.container} is up again but NOT as it was: " + "; ".join(diff)}
    short = before.running_fp.digest[:12] if before.running_fp else "?"
    return {**part, "done": True, "summary": f"{before.container} is up again as it was (recipe {before.recipe}, "
                                             f"fingerprint {short}, ready through the smoke gate)"}
