"""One case of each class of the hostile-input generator (tests/hostile_inputs.py), in-process
through main(argv): refused with exit 2 and the field named, or (benign classes) still working;
never a crash. `python3 benchmarks/hostile_inputs.py` runs all of them (2,200+, the cluster profile's among them)."""

import pytest

import hostile_inputs as h

CASES = h.generate()
ONE_PER_CLASS = h.one_per_class(CASES)


def test_the_generator_covers_every_class_the_issue_names_with_many_cases():
    classes = {c.cls for c in CASES}
    assert len(CASES) >= 1500 and len(classes) >= 45
    for needed in ("profile/injection", "profile/bool-as-number", "profile/guard-disabled-or-absurd-size",
                   "profile/api-key-env-name", "profile/system-directory", "profile/drive-identity", "profile/infinity",
                   "recipe/injection", "recipe/number", "recipe/yaml11-rewrite", "recipe/duplicate-key",
                   "recipe/alias-bomb", "recipe/deep-nesting", "file/profile-encoding", "file/recipe-encoding",
                   "file/config-path", "facts/unknown-topology", "facts/deep-nesting", "output/render-out",
                   "output/doctor-bundle", "benign/env-value", "cluster/address", "cluster/name",
                   "cluster/across-hosts", "cluster/file-encoding", "cluster/ssh", "cluster/member",
                   "cluster/every-command", "benign/cluster", "recipe/owned-flag", "recipe/owned-flag-render",
                   "benign/serve-flag", "profile/huge-integer", "recipe/huge-integer",
                   "tune/huge-integer", "tune/alias-bomb", "cluster/huge-integer", "facts/huge-integer",
                   "doctor/pathological-log", "profile/huge-size"):
        assert needed in classes, needed


@pytest.mark.parametrize("case", ONE_PER_CLASS, ids=[c.cls for c in ONE_PER_CLASS])
def test_one_case_per_class(case, tmp_path):
    result = h.run_case(case, tmp_path / "w")
    assert result.problem is None, f"{case.label()}: {result.problem}"
