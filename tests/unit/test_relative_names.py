"""safepaths.relative_name_problem / relative_names_problem: the one rule for a name from outside
(a hub's listing, an index, hostctl's manifest, a cache listing) that is joined onto a folder.
Each refused name is one a hostile hub or an edited manifest has used or could use to reach a
file outside the folder, or to show one name while meaning another."""

from __future__ import annotations

import pytest

from hostctl.safepaths import NAME_MAX, relative_name_problem, relative_names_problem

PLAIN = ["config.json", "model-00001-of-00002.safetensors", "tokenizer/vocab.json", "a/b/c.bin", ".gitattributes",
         "original/..weird..name", "dir.with.dots/x", "é/ü.txt", "-leading-dash", "a" * (NAME_MAX - 9)]

HOSTILE = {
    "parent": "../../outside/x",
    "parent in the middle": "a/../../x",
    "parent alone": "..",
    "absolute": "/abs/x",
    "backslash": "a\\..\\x",
    "windows absolute": "C:\\x",
    "dot component": "./x",
    "dot in the middle": "a/./x",
    "empty component": "a//x",
    "trailing slash": "a/",
    "empty": "",
    "NUL": "a\x00b",
    "newline": "a\nb",
    "escape": "a\x1b[2Jb",
    "line separator": "a\u2028b",
    "component too long": "a" * (NAME_MAX - 8),
    "whole too long": "/".join(["abcdefghij"] * 100),
    "surrogate": "a\udcffb",
}


@pytest.mark.parametrize("name", PLAIN)
def test_plain_relative_names_pass(name):
    assert relative_name_problem(name) is None


@pytest.mark.parametrize("why", sorted(HOSTILE))
def test_names_that_leave_the_folder_or_hide_what_they_are_are_refused(why):
    problem = relative_name_problem(HOSTILE[why])
    assert problem, why
    # The reason names the name (repr: a control character is shown, not obeyed); an empty or
    # oversized one is described instead.
    if HOSTILE[why] and len(HOSTILE[why]) < 300:
        assert repr(HOSTILE[why]) in problem


@pytest.mark.parametrize("value", [None, 3, b"config.json", ["a"]])
def test_a_name_that_is_not_a_string_is_refused(value):
    assert relative_name_problem(value)


def test_a_listing_is_refused_by_its_first_bad_name():
    assert relative_names_problem(["config.json", "a/b"]) is None
    bad = relative_names_problem(["config.json", "../../outside/x", "/abs"])
    assert bad is not None and bad[0] == "../../outside/x"


def test_names_that_differ_only_in_unicode_normalisation_are_one_name_twice():
    composed, decomposed = "caf\u00e9.json", "cafe\u0301.json"
    assert relative_name_problem(composed) is None and relative_name_problem(decomposed) is None
    bad = relative_names_problem([composed, decomposed])
    assert bad is not None and bad[0] == decomposed and repr(composed) in bad[1]
    assert relative_names_problem(["x", "x"])[0] == "x"
