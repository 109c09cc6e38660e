"""Cases for tests/unit/test_need.py, run by it in a child pytest (the name keeps them out of the
unit tier's own collection): each part is missing, so each case skips, or fails under CI=true."""

from need import need, need_module, needs


def test_call_with_a_missing_part():
    need(False, "part-A is missing")


@needs(False, "part-B is missing")
def test_mark_with_a_missing_part():
    raise AssertionError("a test whose part is missing must not run")


def test_module_that_is_missing():
    need_module("hostctl_no_such_module_12c")


@needs(True, "present")
def test_present_part_runs():
    need(True, "present")
