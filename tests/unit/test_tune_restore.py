"""tune's bring-back of the service that was up before: the refusal rules (pure) and the
comparison of fingerprints after `up` (with the `up` and the observation handed in)."""

from types import SimpleNamespace

from hostctl.errors import EXIT_REFUSED, FailedError
from hostctl.interrupt import Interrupted
from hostctl.service.fingerprint import of_files
from hostctl.tune import restore

FP = of_files("services: {runtime: {image: x}}\n", "A=1\nB=2\n", "sha256:" + "a" * 64)
OTHER = of_files("services: {runtime: {image: y}}\n", "A=1\nB=2\n", "sha256:" + "a" * 64)


def before(**kw) -> restore.Before:
    base = dict(container="p-runtime", running=True, state="ready", recipe="demo", running_fp=FP, profile_fp=FP)
    base.update(kw)
    return restore.Before(**base)


def test_nothing_running_needs_nothing_and_a_ready_one_matching_the_profile_may_be_stopped():
    assert restore.decide(before(running=False, state=None, running_fp=None, profile_fp=None)) is None
    assert restore.decide(before()) is None


def test_a_running_service_not_declared_ready_is_refused_before_anything_is_stopped():
    err = restore.decide(before(state="failed"))
    assert err.exit_code == EXIT_REFUSED and "state: failed" in err.message and "nothing was changed" in err.details


def test_a_service_started_from_another_configuration_is_refused():
    err = restore.decide(before(profile_fp=OTHER, differences=["the rendered compose.yaml differs (x)"]))
    assert err.exit_code == EXIT_REFUSED and "another configuration" in err.message
    assert "the rendered compose.yaml differs (x)" in err.details
    assert restore.decide(before(running_fp=None)).exit_code == EXIT_REFUSED  # unknown: refused, not guessed


def _up(outcome=None, exc=None, calls=None):
    def up(cfg, plan, facts, **kw):
        if calls is not None:
            calls.append(kw)
        if exc is not None:
            raise exc
        return outcome
    return up


def test_brought_back_with_the_same_fingerprint_is_done():
    calls = []
    part = restore.bring_back(before(), None, None, None, why="interrupted", say=lambda m: None, hostctl_bin="h",
                              up=_up(SimpleNamespace(ready=True), calls=calls), observe_after=lambda: before())
    assert part["done"] is True and part["same_fingerprint"] is True and part["after"] == "interrupted"
    assert part["fingerprint_before"] == part["fingerprint_after"] == FP.to_dict()
    assert calls == [{"timeout": None, "keep_on_failure": False, "say": calls[0]["say"], "hostctl_bin": "h"}]


def test_up_again_under_another_fingerprint_is_a_failed_restore_naming_the_difference():
    part = restore.bring_back(before(), None, None, None, why="ended", say=lambda m: None, hostctl_bin="h",
                              up=_up(SimpleNamespace(ready=True)), observe_after=lambda: before(running_fp=OTHER))
    assert part["done"] is False and part["failed"] is True and part["same_fingerprint"] is False
    assert "NOT as it was" in part["summary"] and "compose.yaml differs" in part["summary"]


def test_a_failed_or_interrupted_restart_is_reported_not_raised():
    failed = restore.bring_back(before(), None, None, None, why="failed", say=lambda m: None, hostctl_bin="h",
                                up=_up(exc=FailedError("preflight: port taken")))
    assert failed["failed"] is True and failed["summary"] == "up failed: preflight: port taken"
    cause = SimpleNamespace(id="container-oom", title="killed")
    gate = restore.bring_back(before(), None, None, None, why="ended", say=lambda m: None, hostctl_bin="h",
                              up=_up(SimpleNamespace(ready=False, cause=cause)))
    assert gate["failed"] is True and "container-oom" in gate["summary"]
    again = restore.bring_back(before(), None, None, None, why="interrupted", say=lambda m: None, hostctl_bin="h",
                               up=_up(exc=Interrupted(15)))
    assert again["done"] is False and "NOT brought back" in again["summary"] and "SIGTERM" in again["summary"]


def test_nothing_was_running_nothing_is_started():
    part = restore.bring_back(before(running=False), None, None, None, why="ended", say=lambda m: None,
                              hostctl_bin="h", up=_up(exc=AssertionError("up must not run")))
    assert part == {"needed": False, "done": True, "summary": "none was running before tune; none is running now"}
