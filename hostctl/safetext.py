"""The character sets a string may use for each place hostctl writes it: systemd unit lines,
Compose YAML, the server's argv, environment names and values, image references. Each rule is a
`*_problem` function and, for what people write, an annotated type (Printable, RecipeId,
ServedName, EnvName, ModelName, ImageRef) that the config records use as a field's type: checked
at load time (exit 2, the field named), so nothing rendered later can be bent by a newline, a `%`
specifier or a `$` that Compose would interpolate.

Each rule is the narrowest set that still takes every real value: recipe ids such as
`deepseek-v4-flash/pro6000x2-tp2`, served names such as `deepseek-ai/DeepSeek-V4`, JSON serve
arguments such as `--speculative-config {"method":"mtp"}`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Annotated

from pydantic import AfterValidator

CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\ufeff]")
# Goes into unit Description= lines, Compose labels and the rendered files' header comments.
RECIPE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+/-]{0,127}")
# --served-model-name and the /v1/models id: Hugging Face style names, no spaces or quotes.
SERVED_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,199}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")
# A registry name of a model: one directory under /models.
MODEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
FLAG = re.compile(r"--?[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")
# Docker's reference grammar, simplified: [host[:port]/]path[:tag][@digest].
# The first component is a registry only when it has a dot or a port or is localhost (as Docker reads it).
_LABEL = r"[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
IMAGE = re.compile(
    rf"(?:(?:{_LABEL}(?:\.{_LABEL})+(?::[0-9]{{1,5}})?|{_LABEL}:[0-9]{{1,5}}|localhost|\[[0-9a-fA-F:]+\](?::[0-9]{{1,5}})?)/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(?:@sha256:[0-9a-f]{64})?")
# A path that also goes into a systemd unit (RequiresMountsFor= splits on spaces, expands %).
UNIT_PATH = re.compile(r"/[A-Za-z0-9._@+=,:/-]*")
MAX_TEXT = 4096  # one argv entry or env value: larger is not a setting


def control_problem(value: str) -> str | None:
    m = CONTROL.search(value)
    if m:
        return (f"contains the control character {m.group()!r} at position {m.start()}: rendered files would "
                "carry it (a newline starts a new line in a systemd unit or Compose file)")
    return None


def match_problem(value: object, rule: re.Pattern, expected: str) -> str | None:
    if not isinstance(value, str):
        return f"expected a string ({expected}), got {type(value).__name__}"
    problem = control_problem(value)
    if problem:
        return problem
    if not rule.fullmatch(value):
        return f"expected {expected}, got {value!r}"
    return None


def text_problem(value: object, *, limit: int = MAX_TEXT) -> str | None:
    """Free text that reaches argv, env or a JSON-quoted Compose value: any printable characters."""
    if not isinstance(value, str):
        return f"expected a string, got {type(value).__name__}"
    if len(value) > limit:
        return f"is {len(value)} characters long; at most {limit} are accepted"
    return control_problem(value)


def image_problem(value: object) -> str | None:
    if isinstance(value, str) and len(value) > 255:
        return f"an image reference is at most 255 characters; this one has {len(value)}"
    return match_problem(value, IMAGE, "an image reference such as registry.example.com:5000/vllm-moet:0a927ea "
                                       "(lower-case name, optional tag and @sha256 digest)")


def unit_path_problem(value: str) -> str | None:
    """A path that goes into a unit line: letters, digits and ._@+=,:/- only (no spaces, % or quotes)."""
    if not UNIT_PATH.fullmatch(value):
        bad = sorted({c for c in value if not re.fullmatch(r"[A-Za-z0-9._@+=,:/-]", c)})
        return (f"{value!r} holds {''.join(bad)!r}: a path that goes into the service unit "
                "(RequiresMountsFor=) may use letters, digits and ._@+=,:/- only")
    return None


def recipe_id_problem(value: object) -> str | None:
    problem = match_problem(value, RECIPE_ID, "an id such as deepseek-v4-flash/pro6000x2-tp2 (letters, digits and ._+/-)")
    if problem is None and ".." in value.split("/"):  # type: ignore[union-attr]
        return f"{value!r}: '..' is not part of an id"
    return problem


# ---------------------------------------------------------------- annotated types


def rule(problem: Callable[[str], str | None]) -> AfterValidator:
    """A field check from a `*_problem` function: its answer is the error, naming the field."""

    def check(value: str) -> str:
        found = problem(value)
        if found:
            raise ValueError(found)
        return value

    return AfterValidator(check)


# Free text that reaches argv, env or a JSON-quoted Compose value.
Printable = Annotated[str, rule(text_problem)]
# Goes into unit Description= lines, Compose labels and rendered headers.
RecipeId = Annotated[str, rule(recipe_id_problem)]
ServedName = Annotated[str, rule(lambda v: match_problem(
    v, SERVED_NAME, "a served model name such as deepseek-v4-flash or org/Model-Name (letters, digits and ._:/@+-)"))]
# Compose reads ${NAME:?...}: a name that is not an environment name (MY-KEY) turns the guard
# into a default value.
EnvName = Annotated[str, rule(lambda v: match_problem(
    v, ENV_NAME, "an environment variable name such as HOSTCTL_API_KEY (letters, digits and _, not starting with a digit)"))]
ModelName = Annotated[str, rule(lambda v: match_problem(v, MODEL_NAME, "a registry name such as DeepSeek-V4-Flash"))]
ImageRef = Annotated[str, rule(image_problem)]
