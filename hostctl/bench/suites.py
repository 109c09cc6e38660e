"""Bench suites in vLLM-MoET's format, loaded unchanged: `id`, `allow_recipe_overrides` and a list
of `probes`, each a mapping with a `kind` (and an optional `id`, `enabled`) plus that probe's
parameters. hostctl ships `quick`, `standard` and `qualify` in runtime/suites/; a PATH loads any
other file in the format, vLLM-MoET's own included.

A recipe's `suite_params` override a probe's parameters only when the suite allows it, keyed by
the probe's `id` when it has one, else by its kind (as vLLM-MoET merges them). Parameters this
module does not know are kept (they are recorded in the result) and never an error; a known
parameter of the wrong type is bad input naming its field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


from pydantic import ConfigDict, Field

from hostctl.data import Data
from hostctl import paths, safepaths
from hostctl.config import Recipe
from hostctl.errors import InputError

BUNDLED = ("quick", "standard", "qualify")

# Known parameters and their types, per kind (numbers accept ints where a float is expected).
_INT, _NUM, _BOOL, _INTS, _NUMS = "an integer", "a number", "true or false", "a list of integers", "a list of numbers"
PARAMS: dict[str, dict[str, str]] = {
    "decode": {"runs": _INT, "max_tokens": _INT},
    "batch_decode": {"concurrency": _INTS, "max_tokens": _INT, "runs": _INT, "input_tokens": _INT},
    "prefill": {"words": _INT, "context_frac": _NUM, "runs": _INT},
    "needle": {"sizes_words": _INTS, "sizes_frac": _NUMS, "depth": _NUM, "max_tokens": _INT},
    "arithmetic": {"min_score": _INT, "max_tokens": _INT},
    "coherence": {"max_tokens": _INT},
    "boundary": {"output_tokens": _INT, "concurrency": _INT},
}
COMMON = {"kind", "id", "enabled"}


def suites_dir() -> Path:
    return paths.resource_root() / "runtime" / "suites"


class ProbeSpec(Data):
    model_config = ConfigDict(frozen=True)

    key: str  # the probe's id, else its kind: what results and suite_params are keyed by
    kind: str
    params: dict[str, Any]
    enabled: bool = True
    overridden: tuple[str, ...] = ()  # parameters the recipe's suite_params set


class Suite(Data):
    model_config = ConfigDict(frozen=True)

    id: str
    source: str
    allow_recipe_overrides: bool
    probes: list[dict] = Field(default_factory=list)  # as written in the file


def suite_path(ref: str) -> Path:
    if ref in BUNDLED:
        return suites_dir() / f"{ref}.yaml"
    return Path(ref)


def _type_ok(value: Any, kind: str) -> bool:
    num = lambda v: isinstance(v, (int, float)) and not isinstance(v, bool)  # noqa: E731
    if kind == _INT:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == _NUM:
        return num(value)
    if kind == _BOOL:
        return isinstance(value, bool)
    if kind == _INTS:
        return isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    if kind == _NUMS:
        return isinstance(value, list) and all(num(v) for v in value)
    return True


def parse_suite(data: Any, source: str) -> Suite:
    if not isinstance(data, dict):
        raise InputError(f"suite {source} is not valid", details=[f"expected a mapping at the top level, got "
                                                                   f"{type(data).__name__}"])
    problems = []
    probes = data.get("probes")
    if not isinstance(probes, list) or not probes:
        problems.append("probes: expected a non-empty list of probes ({kind: decode, ...})")
        probes = []
    allow = data.get("allow_recipe_overrides", False)
    if not isinstance(allow, bool):
        problems.append(f"allow_recipe_overrides: expected true or false, got {allow!r}")
    suite_id = data.get("id") or Path(source).stem
    id_problem = safepaths.file_name_problem(suite_id)  # results are written as <stamp>-<id>.json
    if id_problem:
        problems.append(f"id: {id_problem}")
    for i, p in enumerate(probes):
        where = f"probes[{i}]"
        if not isinstance(p, dict):
            problems.append(f"{where}: expected a mapping with a kind, got {p!r}")
            continue
        if not isinstance(p.get("kind"), str) or not p["kind"]:
            problems.append(f"{where}.kind: required (decode, batch_decode, prefill, needle, arithmetic, coherence, "
                            "boundary, quality)")
        if "enabled" in p and not isinstance(p["enabled"], bool):
            problems.append(f"{where}.enabled: expected true or false, got {p['enabled']!r}")
        problems += _param_problems(where, p)
    if problems:
        raise InputError(f"suite {source} is not valid", details=problems, fix="correct the fields named above")
    return Suite(id=suite_id, source=source, allow_recipe_overrides=allow,
                 probes=[dict(p) for p in probes])


def _param_problems(where: str, p: dict) -> list[str]:
    known = PARAMS.get(p.get("kind"), {})
    out = []
    for name, value in p.items():
        want = known.get(name)
        if want and not _type_ok(value, want):
            out.append(f"{where}.{name}: expected {want}, got {value!r}")
    return out


def load_suite(ref: str) -> Suite:
    path = suite_path(ref)
    if not path.is_file():
        raise InputError(f"--suite {ref}: no such suite", fix=f"name a bundled suite ({', '.join(BUNDLED)}) or the path "
                         "of a suite file (vLLM-MoET's bench/suites/*.yaml format)")
    from hostctl.safeload import load_yaml

    return parse_suite(load_yaml(path, "suite").data, str(path))


def merge(suite: Suite, recipe: Recipe | None) -> list[ProbeSpec]:
    """The suite's probes with the recipe's suite_params applied where the suite allows them."""
    overrides = (recipe.suite_params if recipe is not None else {}) if suite.allow_recipe_overrides else {}
    out = []
    for i, probe in enumerate(suite.probes):
        key = str(probe.get("id") or probe["kind"])
        params = {k: v for k, v in probe.items() if k not in COMMON}
        mine = overrides.get(key) or {}
        if not isinstance(mine, dict):
            raise InputError(f"recipe suite_params.{key}: expected a mapping of probe parameters, got {mine!r}")
        problems = _param_problems(f"recipe suite_params.{key}", {"kind": probe["kind"], **mine})
        if "enabled" in mine and not isinstance(mine["enabled"], bool):
            # vLLM-MoET refuses it too (bench/runner/common.py: merge_suite); bool("no") would run it.
            problems.append(f"recipe suite_params.{key}.enabled: expected true or false, got {mine['enabled']!r}")
        if problems:
            raise InputError("the recipe's suite_params are not valid for this suite", details=problems)
        enabled = mine.get("enabled", probe.get("enabled", True))
        params.update({k: v for k, v in mine.items() if k != "enabled"})
        out.append(ProbeSpec(key=key, kind=probe["kind"], params=params, enabled=bool(enabled),
                             overridden=tuple(sorted(k for k in mine if k != "enabled"))))
    keys = [p.key for p in out]
    dupes = sorted({k for k in keys if keys.count(k) > 1})
    if dupes:
        raise InputError(f"suite {suite.source}: probes {', '.join(dupes)} appear more than once",
                         fix="give each probe of one kind its own `id` (results are keyed by it)")
    return out
