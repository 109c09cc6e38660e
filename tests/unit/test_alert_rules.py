"""The shipped alerting rules (prometheus/hostctl-alerts.yml): promtool accepts them and passes their
unit tests (prometheus/hostctl-alerts.test.yml), the alerts are the ones README "Watching the host" lists, and
their expressions name only metrics `hostctl metrics` exports."""

from __future__ import annotations

import re
import shutil
import subprocess

import pytest
import yaml
from conftest import ROOT
from need import need

from hostctl.metrics.exposition import METRICS

RULES = "prometheus/hostctl-alerts.yml"
RULE_TESTS = "prometheus/hostctl-alerts.test.yml"

ALERTS = ("HostctlRuntimeHang", "HostctlRuntimeDown", "HostctlRestartLoop", "HostctlPowerLimitDrift",
          "HostctlCacheDriveNearlyFull", "HostctlKvCacheSaturated", "HostctlQualifyFailed", "HostctlMetricsStale")

EXPORTED = tuple(METRICS)  # what `hostctl metrics` exports

METRIC = re.compile(r"\bhostctl_[a-zA-Z0-9_]+")


def _rules() -> list[dict]:
    doc = yaml.safe_load((ROOT / RULES).read_text())
    assert [g["name"] for g in doc["groups"]] == ["hostctl"]
    return doc["groups"][0]["rules"]


def _promtool(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("promtool")
    need(exe, "promtool not installed (Debian's prometheus package; test.sh installs it)")
    return subprocess.run([exe, *args], capture_output=True, text=True, cwd=ROOT, timeout=60)


def test_promtool_accepts_the_rules():
    done = _promtool("check", "rules", RULES)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_rules_pass_their_unit_tests():
    done = _promtool("test", "rules", RULE_TESTS)
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_alerts_are_the_ones_shipped():
    assert [r.get("alert") for r in _rules()] == list(ALERTS)


def test_each_alert_fires_in_a_unit_test():
    doc = yaml.safe_load((ROOT / RULE_TESTS).read_text())
    fired = {case["alertname"] for test in doc["tests"] for case in test["alert_rule_test"] if case.get("exp_alerts")}
    assert sorted(fired) == sorted(ALERTS)


@pytest.mark.parametrize("alert", ALERTS)
def test_each_alert_says_where_how_much_and_what_to_do(alert):
    rule = next(r for r in _rules() if r["alert"] == alert)
    assert rule["labels"] == {"severity": rule["labels"]["severity"]}
    assert rule["labels"]["severity"] in ("warning", "critical")
    assert "for" in rule
    notes = rule["annotations"]
    assert sorted(notes) == ["description", "summary"]
    assert "{{ $labels.instance }}" in notes["summary"] and "{{ $labels.instance }}" in notes["description"]
    assert "$value" in notes["description"]
    assert "`hostctl " in notes["description"]


def test_the_rules_name_only_exported_metrics():
    used = {name for r in _rules() for name in METRIC.findall(r["expr"])}
    assert used, "no hostctl_ metric found in the expressions"
    assert sorted(used - set(EXPORTED)) == []


def test_the_metric_reader_finds_every_name():
    assert METRIC.findall("abs(hostctl_a_watts - hostctl_b_watts) > 1 and on(instance) hostctl_c == 1") == [
        "hostctl_a_watts", "hostctl_b_watts", "hostctl_c"]
