"""The planners make the Plan and fill its sections in after making them, which pydantic does not
check: nothing may differ from what the Plan's JSON validates back to. For every bundled example
(runtime/hosts/*.toml with its facts snapshot) and for the demo profile on this host's live facts:
the JSON read back with strict=True equals the plan and writes the same bytes."""

from __future__ import annotations

from pathlib import Path

import pytest

from hostctl import examples
from hostctl.config import load_config
from hostctl.facts import collect
from hostctl.plan import build_plan
from test_facts_trusted import assert_as_validated

HOSTS = Path(__file__).resolve().parents[2] / "runtime" / "hosts"


def test_there_are_examples():
    assert len(examples.names()) >= 3, examples.names()


@pytest.mark.parametrize("name", examples.names())
def test_bundled_example_plan_is_what_validation_makes(name):
    config, facts = examples.load(name)
    assert_as_validated(build_plan(config, facts), name)


def test_live_plan_is_what_validation_makes():
    config = load_config(HOSTS / "demo-cpu.toml")
    assert_as_validated(build_plan(config, collect()), "demo-cpu on this host")
