"""The planners make the Plan's records directly (hostctl/plan/model.py says why): nothing
may differ from what validation would have made. For every bundled example (runtime/hosts/*.toml
with its facts snapshot) and for the demo profile on this host's live facts: validating the
plan's own values gives the same types and values, and the same JSON document byte for byte."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostctl import examples
from hostctl.config import load_config
from hostctl.facts import collect
from hostctl.plan import build_plan
from hostctl.plan.model import Plan
from test_facts_trusted import assert_same

HOSTS = Path(__file__).resolve().parents[2] / "runtime" / "hosts"


def assert_plan_as_validated(plan: Plan, where: str) -> None:
    trusted_json = plan.to_json()
    validated = Plan.validate(plan.to_dict())
    assert_same(plan, validated, where)
    assert trusted_json == validated.to_json(), where
    assert Plan.from_json(trusted_json).to_json() == trusted_json, where


def test_there_are_examples():
    assert len(examples.names()) >= 3, examples.names()


@pytest.mark.parametrize("name", examples.names())
def test_bundled_example_plan_is_what_validation_makes(name):
    config, facts = examples.load(name)
    assert_plan_as_validated(build_plan(config, facts), name)


def test_live_plan_is_what_validation_makes():
    config = load_config(HOSTS / "demo-cpu.toml")
    assert_plan_as_validated(build_plan(config, collect()), "demo-cpu on this host")
