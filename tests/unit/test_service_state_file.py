"""service.json is one record (facts.records.LastUp): `up`, `down` and the supervisor write it, and
status, bench, tune and the facts read the same type back. last-smoke.json is the SmokeReport that
`up`'s gate or `hostctl smoke` ran, read back as one. A file that does not validate is no record,
never a crash nor half a record."""

from __future__ import annotations

import json

import pytest

from hostctl.facts.records import LastUp
from hostctl.facts.state import probe_state
from hostctl.service import saved


@pytest.fixture
def state_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HOSTCTL_SYSROOT", str(tmp_path))
    d = tmp_path / "var" / "lib" / "hostctl"
    d.mkdir(parents=True)
    return d


def test_what_up_saves_reads_back_as_the_same_record(state_dir):
    last = LastUp(state="ready", profile="demo", recipe="demo-cpu", endpoint="http://127.0.0.1:8000",
                  container="vllm-demo", project="hostctl-demo", project_dir="/var/lib/hostctl/project",
                  ready_at="2026-12-05T10:00:00+00:00", timings={"ready_s": 41.5},
                  kv={"tokens": 8192, "max_concurrency": 4.0, "per_request_tokens": 2048, "full_context_requests": 4,
                      "context": 2048})
    saved.save_service(last)
    doc = json.loads((state_dir / "service.json").read_text())
    assert doc["schema"] == "hostctl.service/v1" and "failed_at" not in doc  # unset keys stay out of the file
    assert saved.load_service() == last
    down = last.model_copy(update={"state": "down", "down_at": "2026-12-05T11:00:00+00:00"})
    saved.save_service(down)
    facts, notes = probe_state(state_dir)
    assert not notes and facts.service.state == "down" and facts.service.at == "2026-12-05T11:00:00+00:00"


def test_a_failed_record_is_dated_by_its_failure_not_by_the_ready_before_it(state_dir):
    saved.save_service(LastUp(state="failed", container="c", ready_at="2026-12-05T10:00:00+00:00",
                              failed_at="2026-12-05T10:30:00+00:00", cause="engine-core-failed", after_ready=True))
    facts, _ = probe_state(state_dir)
    assert facts.service.at == "2026-12-05T10:30:00+00:00"


@pytest.mark.parametrize("doc", [
    {"state": "ready", "container": ["not", "a", "name"]},
    {"state": "serving", "container": "c"},  # no such state
    {"schema": "hostctl.service/v9", "state": "ready"},
    {"state": "ready", "port": 8000},  # a key hostctl never writes
    {"state": "ready", "kv": {"tokens": "8192", "context": 2048}},  # a number as text
    ["ready"],
])
def test_a_file_that_does_not_validate_is_no_record(state_dir, doc):
    (state_dir / "service.json").write_text(json.dumps(doc))
    assert saved.load_service() is None
    facts, notes = probe_state(state_dir)
    assert facts.service is None and len(notes) == 1 and notes[0].startswith("ignored ")


def _smoke_report():
    from hostctl.service.smoke_report import SmokeReport, SmokeResult

    return SmokeReport(url="http://127.0.0.1:8000", served_name="tiny-moe", started_at="2026-12-05T10:00:00+00:00",
                       results=[SmokeResult(name="arithmetic", kind="chat", ok=True, latency_s=0.038, got="323"),
                                SmokeResult(name="tool-call", kind="tool_call", ok=False, latency_s=0.066,
                                            expected="get_weather", got="none")])


def test_the_last_smoke_reads_back_as_the_report_that_was_saved(state_dir):
    report = _smoke_report()
    saved.save_smoke(report)
    doc = json.loads((state_dir / "last-smoke.json").read_text())
    assert doc["schema"] == "hostctl.smoke/v1" and doc["ok"] is False  # `ok` is in the file for other readers
    assert saved.load_smoke() == report


@pytest.mark.parametrize("damage", [
    lambda d: d.update(schema="something-else/v1"),
    lambda d: d["results"][0].update(latency_s="fast"),
    lambda d: d["results"][0].pop("name"),
    lambda d: d.update(results={"arithmetic": True}),
    lambda d: d.update(started_at=1733392800),
    lambda d: d.update(planted="x"),
])
def test_a_damaged_last_smoke_is_no_report_not_a_crash(state_dir, damage):
    saved.save_smoke(_smoke_report())
    path = state_dir / "last-smoke.json"
    doc = json.loads(path.read_text())
    damage(doc)
    path.write_text(json.dumps(doc))
    assert saved.load_smoke() is None


def test_the_qualify_verdict_reads_back_as_stored_and_a_damaged_one_is_none(state_dir):
    from hostctl.facts.records import QualifyVerdict

    v = QualifyVerdict(passed=True, measured_at="2026-12-05T10:00:00+00:00", recipe="demo-cpu-tiny-moe", context=2048,
                       fingerprint={"image_id": "sha256:" + "1" * 64}, rungs=[{"name": "needle 25%", "pass": True}])
    saved.save_qualify(v)
    assert json.loads((state_dir / "qualify.json").read_text())["schema"] == "hostctl.qualify/v1"
    assert saved.load_qualify() == v
    facts, notes = probe_state(state_dir)
    assert not notes and facts.qualify == v  # the facts read the same file as the same record
    (state_dir / "qualify.json").write_text(json.dumps({**v.model_dump(mode="json"), "passed": "yes"}))
    assert saved.load_qualify() is None
