"""Data: the one way hostctl defines a data type (docs/house.md, "One data layer").

Everything that is data (profiles, recipes, cluster profiles, boxes, facts, plans, state files,
results, reports) is a record: a pydantic v2 class deriving from `Data` (in hostctl's words
"model" is the checkpoint, never a data type). Classes are cheap to define
(`defer_build`: the validator is built on first use, not at import), unknown keys are errors, and
input hostctl did not write itself (a file, a snapshot, a state file another run left) is read
with `strict=True` at the boundary, so a boolean is never a number and "8000" never a port:

    HostFacts.model_validate_json(text, strict=True)

What hostctl makes itself is validated as pydantic validates any constructor call.
"""

from __future__ import annotations

import os

from pydantic import BaseModel, ConfigDict

# pydantic looks for plugins by reading every installed distribution's entry points the first time
# a validator is built: 224 distributions on the H200 machine (its PyTorch stack) cost ~60 ms on
# every command that validates anything (benchmarks/results/doctor_quick-h200-house.txt). hostctl
# uses no pydantic plugin, so it turns the search off with pydantic's own switch; a user who sets
# the variable keeps their value. (It is read when the first validator is built, not at import.)
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")


class Data(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        # ~0.5 ms to define a class instead of ~2.5 ms with its validator (2-CPU machine): a
        # read-only command defines many and validates few (benchmarks/doctor_quick.py).
        defer_build=True,
        # JSON has no inf or NaN: written as null, as JSON readers expect.
        ser_json_inf_nan="null",
    )


class Document(Data):
    """A record that is a JSON document of its own (facts, a plan, a state file, a manifest): its
    format's tag is the key "schema", held as the attribute `schema_` (BaseModel has a schema()),
    which each document declares as `schema_: Literal["hostctl.NAME/v1"] = Field(..., alias="schema")`."""

    model_config = ConfigDict(validate_by_name=True, serialize_by_alias=True)
