"""StrictRecord (hostctl/strict_record.py): pydantic validates it, with the semantics the profile
and recipe had as strict, frozen, extra-forbidding BaseModels; a made one is a plain object that
pickles, hashes and reads back without pydantic (the config cache, hostctl/config_cache.py).

The records below are module-level: their annotations are strings resolved from this module's
globals when a validator is first built.
"""

from __future__ import annotations

import json
import math
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator, model_validator

from hostctl import paths
from hostctl.record import field
from hostctl.strict_record import StrictRecord, validates, validates_record

DEMO = paths.hosts_dir() / "demo-cpu.toml"
MIB = 1024**2

# What the checks below saw, so a test can tell whether (and on what) a check ran.
SEEN: list[tuple[str, Any]] = []


@pytest.fixture(autouse=True)
def _fresh_seen():
    SEEN.clear()
    yield
    SEEN.clear()


# ---------------------------------------------------------------- records under test


class Item(StrictRecord):
    n: int


class Scalars(StrictRecord):
    i: int = 0
    f: float = 0.0
    s: str = ""
    b: bool = False


class Basket(StrictRecord):
    name: str
    items: list[Item] = field(default_factory=list)
    by_key: dict[str, Item] = field(default_factory=dict)
    main: Item | None = None


class Bounded(StrictRecord):
    port: int = field(default=8000, ge=1, le=65535)
    name: str = field(default="a", pattern=r"^[a-z]+$", max_length=5)
    tags: list[str] = field(default_factory=list, max_length=2)
    hard: int = field(default=0, strict=True)
    lax: int = field(default=0, strict=False)


class Leaf(StrictRecord):
    n: int = 7


class Defaults(StrictRecord):
    # ge=0 with a default below it: pydantic does not validate defaults, nor does a StrictRecord
    port: int = field(default=-1, ge=0)
    tags: list[str] = field(default_factory=list)
    fixed: list[int] = [1]
    leaf: Leaf = field(default_factory=Leaf)

    @validates("port")
    @classmethod
    def _port(cls, v: int) -> int:
        SEEN.append(("port", v))
        return v


class Sized(StrictRecord):
    size: int
    limit: int = 0
    text: str = ""

    @validates("size", mode="before")
    @classmethod
    def _parse(cls, v: Any) -> Any:
        SEEN.append(("before", v))
        if isinstance(v, str) and v.endswith("MiB"):
            return int(v[:-3]) * MIB
        return v

    @validates("size")
    @classmethod
    def _typed(cls, v: int) -> int:
        SEEN.append(("after", v))
        if v > 64 * MIB:
            raise ValueError(f"{v} bytes is more than 64MiB")
        return v

    # two after-checks of one field: definition order, each sees the one before's result
    @validates("limit")
    @classmethod
    def _double(cls, v: int) -> int:
        return v * 2

    @validates("limit")
    @classmethod
    def _plus_one(cls, v: int) -> int:
        return v + 1

    # two before-checks of one field: as pydantic, the last defined runs first
    @validates("text", mode="before")
    @classmethod
    def _append_a(cls, v: Any) -> Any:
        return v + "a"

    @validates("text", mode="before")
    @classmethod
    def _append_b(cls, v: Any) -> Any:
        return v + "b"


class Range(StrictRecord):
    lo: int
    hi: int

    @validates("hi")
    @classmethod
    def _hi(cls, v: int) -> int:
        return v * 10

    @validates_record
    def _ordered(self) -> "Range":
        SEEN.append(("record", (self.lo, self.hi)))
        if self.lo > self.hi:
            raise ValueError(f"lo {self.lo} is above hi {self.hi}")
        return self


class Ranges(StrictRecord):
    ranges: list[Range]


class ChecksNoField(StrictRecord):
    x: int

    @validates("nope")
    @classmethod
    def _nope(cls, v: Any) -> Any:
        return v


class Counted(StrictRecord):
    n: int
    tags: list[str] = field(default_factory=list)

    @validates("n")
    @classmethod
    def _count(cls, v: int) -> int:
        SEEN.append(("counted", v))
        return v


class Pair(StrictRecord):
    pair: tuple[int, str]


class Holder(BaseModel):
    # a lax pydantic model: the record inside it is strict all the same
    basket: Basket
    count: int = 0


# The same checks as a pydantic model and as a StrictRecord subclass overriding a check by name.


class _PydBase(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
    x: int

    @field_validator("x")
    @classmethod
    def _c(cls, v: int) -> int:
        return v + 1

    @model_validator(mode="after")
    def _r(self) -> "_PydBase":
        SEEN.append(("pyd-base", self.x))
        return self


class _PydSub(_PydBase):
    @field_validator("x")
    @classmethod
    def _c(cls, v: int) -> int:
        return v * 10

    @model_validator(mode="after")
    def _r(self) -> "_PydSub":
        SEEN.append(("pyd-sub", self.x))
        return self


class _RecBase(StrictRecord):
    x: int

    @validates("x")
    @classmethod
    def _c(cls, v: int) -> int:
        return v + 1

    @validates_record
    def _r(self) -> "_RecBase":
        SEEN.append(("rec-base", self.x))
        return self


class _RecSub(_RecBase):
    @validates("x")
    @classmethod
    def _c(cls, v: int) -> int:
        return v * 10

    @validates_record
    def _r(self) -> "_RecSub":
        SEEN.append(("rec-sub", self.x))
        return self


def errors_of(call, *args, **kwargs) -> list[dict]:
    with pytest.raises(ValidationError) as info:
        call(*args, **kwargs)
    return info.value.errors()


def locs_types(errors: list[dict]) -> list[tuple[tuple, str]]:
    return [(tuple(e["loc"]), e["type"]) for e in errors]


# ---------------------------------------------------------------- strictness


@pytest.mark.parametrize("bad", [True, False, "8000", 8000.0, 1.5, None, [1]])
def test_int_field_refuses_what_is_not_an_int(bad):
    assert locs_types(errors_of(Scalars.validate, {"i": bad})) == [(("i",), "int_type")]


def test_int_field_takes_an_int():
    assert Scalars.validate({"i": 8000}).i == 8000


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_float_field_refuses_infinity_and_nan(bad):
    assert locs_types(errors_of(Scalars.validate, {"f": bad})) == [(("f",), "finite_number")]


@pytest.mark.parametrize("bad", [True, "1.5", None])
def test_float_field_refuses_a_bool_and_a_string(bad):
    assert locs_types(errors_of(Scalars.validate, {"f": bad})) == [(("f",), "float_type")]


def test_float_field_takes_an_int_as_a_float():
    got = Scalars.validate({"f": 2})
    assert got.f == 2.0 and type(got.f) is float


@pytest.mark.parametrize("bad", [1, 1.5, b"x", None, ["x"]])
def test_str_field_refuses_what_is_not_a_string(bad):
    assert locs_types(errors_of(Scalars.validate, {"s": bad})) == [(("s",), "string_type")]


@pytest.mark.parametrize("bad", [1, 0, "true", "yes", None])
def test_bool_field_refuses_numbers_and_strings(bad):
    assert locs_types(errors_of(Scalars.validate, {"b": bad})) == [(("b",), "bool_type")]


def test_strictness_reaches_records_in_a_list():
    data = {"name": "b", "items": [{"n": 1}, {"n": "1"}]}
    assert locs_types(errors_of(Basket.validate, data)) == [(("items", 1, "n"), "int_type")]


def test_strictness_reaches_records_in_a_dict_and_an_optional():
    data = {"name": "b", "by_key": {"k": {"n": True}}, "main": {"n": 2.0}}
    assert sorted(locs_types(errors_of(Basket.validate, data))) == [
        (("by_key", "k", "n"), "int_type"), (("main", "n"), "int_type")]


def test_strictness_holds_inside_a_lax_pydantic_model():
    # Holder is not strict (its own count takes "3"); the record inside it still is.
    assert Holder.model_validate({"basket": {"name": "b"}, "count": "3"}).count == 3
    errors = errors_of(Holder.model_validate, {"basket": {"name": "b", "items": [{"n": "1"}]}})
    assert locs_types(errors) == [(("basket", "items", 0, "n"), "int_type")]


def test_infinity_is_refused_inside_a_lax_pydantic_model():
    class Lax(BaseModel):
        s: Scalars

    assert locs_types(errors_of(Lax.model_validate, {"s": {"f": math.inf}})) == [(("s", "f"), "finite_number")]


# ---------------------------------------------------------------- unknown, missing, where


def test_unknown_key_is_refused_at_the_top():
    assert locs_types(errors_of(Basket.validate, {"name": "b", "zzz": 1})) == [(("zzz",), "extra_forbidden")]


def test_unknown_key_is_refused_in_a_nested_record():
    data = {"name": "b", "items": [{"n": 1}, {"n": 2, "m": 3}]}
    assert locs_types(errors_of(Basket.validate, data)) == [(("items", 1, "m"), "extra_forbidden")]


def test_missing_required_field_at_the_top_and_nested():
    assert locs_types(errors_of(Basket.validate, {})) == [(("name",), "missing")]
    assert locs_types(errors_of(Basket.validate, {"name": "b", "items": [{}]})) == [(("items", 0, "n"), "missing")]


def test_every_bad_field_is_reported_with_its_input():
    errors = errors_of(Basket.validate, {"name": 5, "items": [{"n": 1}, {"n": "2"}], "extra": True})
    assert sorted(locs_types(errors), key=str) == sorted(
        [(("name",), "string_type"), (("items", 1, "n"), "int_type"), (("extra",), "extra_forbidden")], key=str)
    assert {tuple(e["loc"]): e["input"] for e in errors}[("items", 1, "n")] == "2"


@pytest.mark.parametrize("bad", [[], "x", 1, None, Leaf(n=1)])
def test_a_nested_record_is_an_object_or_an_instance_not_anything_else(bad):
    errors = errors_of(Basket.validate, {"name": "b", "items": [bad]})
    assert [tuple(e["loc"]) for e in errors] == [("items", 0)]


def test_the_error_is_titled_with_the_record():
    with pytest.raises(ValidationError) as info:
        Basket.validate({})
    assert info.value.title == "Basket"


# ---------------------------------------------------------------- constraints


@pytest.mark.parametrize("port, kind", [(0, "greater_than_equal"), (65536, "less_than_equal")])
def test_ge_and_le_bounds(port, kind):
    assert locs_types(errors_of(Bounded.validate, {"port": port})) == [(("port",), kind)]


def test_bounds_are_inclusive():
    assert Bounded.validate({"port": 1}).port == 1 and Bounded.validate({"port": 65535}).port == 65535


def test_pattern():
    assert locs_types(errors_of(Bounded.validate, {"name": "Ab"})) == [(("name",), "string_pattern_mismatch")]
    assert Bounded.validate({"name": "ab"}).name == "ab"


def test_max_length_of_a_string_and_of_a_list():
    assert locs_types(errors_of(Bounded.validate, {"name": "abcdef"})) == [(("name",), "string_too_long")]
    assert locs_types(errors_of(Bounded.validate, {"tags": ["a", "b", "c"]})) == [(("tags",), "too_long")]
    assert Bounded.validate({"name": "abcde", "tags": ["a", "b"]}).tags == ["a", "b"]


def test_a_strict_field_refuses_a_string_and_a_bool():
    assert locs_types(errors_of(Bounded.validate, {"hard": "1"})) == [(("hard",), "int_type")]
    assert locs_types(errors_of(Bounded.validate, {"hard": True})) == [(("hard",), "int_type")]


def test_the_field_strict_setting_reaches_pydantic():
    # strict=False on one field relaxes it as pydantic.Field(strict=False) does in a strict model
    assert Bounded.validate({"lax": "12"}).lax == 12


def test_the_real_strict_field_swap_priority():
    from hostctl.config import Drive

    errors = errors_of(Drive.validate, {"name": "d1", "identity": "serial:S1", "swap_priority": "5"})
    assert locs_types(errors) == [(("swap_priority",), "int_type")]
    assert Drive.validate({"name": "d1", "identity": "serial:S1", "swap_priority": 5}).swap_priority == 5


# ---------------------------------------------------------------- defaults


def test_defaults_are_not_validated():
    made = Defaults()
    assert made.port == -1 and ("port", -1) not in SEEN  # the default is below ge=0 and no check saw it
    assert locs_types(errors_of(Defaults, port=-1)) == [(("port",), "greater_than_equal")]


def test_default_factory_gives_each_record_its_own_value():
    a, b = Defaults(), Defaults()
    assert a.tags == [] and a.tags is not b.tags


def test_a_list_default_from_the_class_body_is_not_shared():
    a, b = Defaults(), Defaults()
    assert a.fixed == [1] and a.fixed is not b.fixed


def test_a_nested_record_default_factory_makes_the_record():
    a, b = Defaults(), Defaults()
    assert type(a.leaf) is Leaf and a.leaf == Leaf(n=7) and a.leaf is not b.leaf
    assert Defaults.validate({"leaf": {"n": 3}}).leaf == Leaf(n=3)


# ---------------------------------------------------------------- checks


def test_a_before_check_sees_the_raw_input_and_its_result_is_type_checked():
    assert Sized(size="2MiB").size == 2 * MIB
    assert SEEN == [("before", "2MiB"), ("after", 2 * MIB)]


def test_an_after_check_sees_the_typed_value_and_does_not_run_on_a_wrong_type():
    assert locs_types(errors_of(Sized, size="2 megs")) == [(("size",), "int_type")]
    assert SEEN == [("before", "2 megs")]  # the type check failed: no after-check ran


def test_two_after_checks_run_in_definition_order():
    assert Sized(size=1, limit=3).limit == 7  # (3 * 2) + 1, not (3 + 1) * 2


def test_two_before_checks_run_last_defined_first():
    assert Sized(size=1, text="x").text == "xba"


def test_check_order_is_pydantics():
    class Pyd(BaseModel):
        model_config = ConfigDict(strict=True)
        limit: int = 0
        text: str = ""

        @field_validator("limit")
        @classmethod
        def _double(cls, v):
            return v * 2

        @field_validator("limit")
        @classmethod
        def _plus_one(cls, v):
            return v + 1

        @field_validator("text", mode="before")
        @classmethod
        def _append_a(cls, v):
            return v + "a"

        @field_validator("text", mode="before")
        @classmethod
        def _append_b(cls, v):
            return v + "b"

    made, expected = Sized(size=1, limit=3, text="x"), Pyd(limit=3, text="x")
    assert (made.limit, made.text) == (expected.limit, expected.text)


def test_a_value_error_in_a_check_is_a_validation_error_at_the_field():
    errors = errors_of(Sized, size="100MiB")
    assert [(tuple(e["loc"]), e["type"]) for e in errors] == [(("size",), "value_error")]
    assert errors[0]["msg"].startswith("Value error, ") and "64MiB" in errors[0]["msg"]


def test_a_check_error_in_a_nested_record_has_the_full_path():
    errors = errors_of(Ranges.validate, {"ranges": [{"lo": 1, "hi": 1}, {"lo": 50, "hi": 2}]})
    assert locs_types(errors) == [(("ranges", 1), "value_error")]


def test_a_record_check_runs_after_the_fields_and_sees_their_checked_values():
    assert Range(lo=5, hi=1).hi == 10  # hi's check made it 10, so 5 <= 10 passes
    assert SEEN == [("record", (5, 10))]


def test_a_record_check_error_has_an_empty_loc():
    errors = errors_of(Range, lo=50, hi=2)
    assert locs_types(errors) == [((), "value_error")] and errors[0]["msg"].startswith("Value error, ")


def test_a_record_check_does_not_run_when_a_field_is_bad():
    assert locs_types(errors_of(Range, lo="1", hi=2)) == [(("lo",), "int_type")]
    assert SEEN == []


def test_a_check_of_a_field_that_does_not_exist_is_a_type_error_when_the_validator_is_built():
    # the class itself is made (validators are built lazily); the first validation says what is wrong
    with pytest.raises(TypeError, match="nope"):
        ChecksNoField(x=1)
    with pytest.raises(TypeError, match="nope"):
        ChecksNoField.validate({"x": 1})


def test_mode_must_be_before_or_after():
    with pytest.raises(ValueError):
        validates("x", mode="wrap")


# ---------------------------------------------------------------- making, reading, copying


def test_construction_validates():
    assert Item(n=1).n == 1
    assert locs_types(errors_of(Item, n="1")) == [(("n",), "int_type")]
    assert locs_types(errors_of(Item)) == [(("n",), "missing")]
    assert locs_types(errors_of(Item, n=1, m=2)) == [(("m",), "extra_forbidden")]


def test_construction_turns_nested_dicts_into_records():
    made = Basket(name="b", items=[{"n": 1}], by_key={"k": {"n": 2}}, main={"n": 3})
    assert made.items == [Item(n=1)] and made.by_key == {"k": Item(n=2)} and made.main == Item(n=3)
    assert all(type(x) is Item for x in (made.items[0], made.by_key["k"], made.main))


def test_validate_returns_the_record():
    made = Basket.validate({"name": "b", "items": [{"n": 1}]})
    assert type(made) is Basket and made == Basket(name="b", items=[Item(n=1)])


def test_an_instance_passes_validation_as_it_is():
    item = Counted(n=1)
    SEEN.clear()
    assert Counted.validate(item) is item
    assert SEEN == []  # not validated again


def test_a_nested_instance_passes_as_it_is_even_one_copied_with_an_unchecked_value():
    item = Item(n=1)
    odd = item.copy(update={"n": "not checked"})
    made = Basket.validate({"name": "b", "items": [item, odd], "main": item})
    assert made.items[0] is item and made.items[1] is odd and made.main is item


def test_from_json():
    made = Basket.from_json('{"name": "b", "items": [{"n": 1}], "by_key": {"k": {"n": 2}}}')
    assert made == Basket(name="b", items=[Item(n=1)], by_key={"k": Item(n=2)})
    assert Basket.from_json(b'{"name": "b"}') == Basket(name="b")


@pytest.mark.parametrize("text, loc, kind", [
    ('{"name": "b", "items": [{"n": "1"}]}', ("items", 0, "n"), "int_type"),
    ('{"name": "b", "zzz": 1}', ("zzz",), "extra_forbidden"),
    ('{"f": NaN}', ("f",), "finite_number"),
    ('{"f": 1e400}', ("f",), "finite_number"),
])
def test_from_json_is_as_strict(text, loc, kind):
    cls = Scalars if '"f"' in text else Basket
    assert locs_types(errors_of(cls.from_json, text)) == [(loc, kind)]


def test_from_json_of_invalid_json_is_a_validation_error():
    assert errors_of(Basket.from_json, '{"name": ')[0]["type"] == "json_invalid"


def test_a_record_is_frozen():
    item = Item(n=1)
    with pytest.raises(AttributeError):
        item.n = 2
    with pytest.raises(AttributeError):
        item.other = 2
    with pytest.raises(AttributeError):
        del item.n
    assert item.n == 1 and not hasattr(item, "other")


def test_copy_update_makes_a_changed_record_without_validating():
    item = Counted(n=1, tags=["a"])
    SEEN.clear()
    changed = item.copy(update={"n": "not an int"})
    assert changed.n == "not an int" and changed.tags == ["a"] and item.n == 1
    assert SEEN == []
    with pytest.raises(AttributeError):
        changed.n = 3  # the copy is frozen too


def test_deep_copy_copies_the_lists():
    basket = Basket(name="b", items=[Item(n=1)])
    deep = basket.copy(deep=True)
    assert deep == basket and deep.items is not basket.items


def test_equal_records_hash_equal_even_with_list_and_dict_fields():
    a = Basket(name="b", items=[Item(n=1), Item(n=2)], by_key={"x": Item(n=1), "y": Item(n=3)})
    b = Basket(name="b", items=[Item(n=1), Item(n=2)], by_key={"y": Item(n=3), "x": Item(n=1)})
    c = Basket(name="b", items=[Item(n=2), Item(n=1)])
    assert a == b and hash(a) == hash(b)
    assert a != c and len({a, b, c}) == 2


def test_records_of_another_class_are_not_equal():
    assert Leaf(n=1) != Item(n=1)


def test_pickle_round_trip_is_equal_and_does_not_validate():
    item = Counted(n=1, tags=["a", "b"])
    SEEN.clear()
    back = pickle.loads(pickle.dumps(item))
    assert back == item and back is not item and hash(back) == hash(item) and SEEN == []
    odd = item.copy(update={"n": "kept as it is"})
    assert pickle.loads(pickle.dumps(odd)).n == "kept as it is"  # not validated on the way back
    with pytest.raises(AttributeError):
        back.n = 2  # still frozen


def test_to_dict_and_to_json():
    basket = Basket(name="b", items=[Item(n=1)], by_key={"k": Item(n=2)})
    plain = {"name": "b", "items": [{"n": 1}], "by_key": {"k": {"n": 2}}, "main": None}
    assert basket.to_dict() == plain
    text = basket.to_json()
    assert text.endswith("\n") and json.loads(text) == plain
    assert Basket.from_json(text) == basket and Basket.validate(basket.to_dict()) == basket


# ---------------------------------------------------------------- in a pydantic model


def test_a_pydantic_model_validates_a_record_field_and_dumps_it_with_to_dict():
    holder = Holder(basket={"name": "b", "items": [{"n": 1}]})
    assert type(holder.basket) is Basket and holder.basket.items == [Item(n=1)]
    assert holder.model_dump(mode="json") == {"basket": holder.basket.to_dict(), "count": 0}
    assert json.loads(holder.model_dump_json()) == {"basket": holder.basket.to_dict(), "count": 0}
    basket = Basket(name="c")
    assert Holder(basket=basket).basket is basket


def test_a_pydantic_model_reports_the_records_errors_under_its_field():
    errors = errors_of(Holder.model_validate, {"basket": {"name": "b", "zzz": 1}})
    assert locs_types(errors) == [(("basket", "zzz"), "extra_forbidden")]


# ---------------------------------------------------------------- the real models


def _demo_data() -> dict:
    from hostctl.safeload import load_toml

    return load_toml(DEMO, "host profile")


def test_parse_profile_of_the_demo_gives_what_load_config_gives(tmp_path, monkeypatch):
    from hostctl import config_cache
    from hostctl.config import HostProfile, load_config, parse_profile

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    parsed = parse_profile(_demo_data(), str(DEMO))
    assert type(parsed) is HostProfile and parsed.name == "demo-cpu" and parsed.memory.host_reserve == 4 * 1024**3
    validated = load_config(DEMO)  # an empty cache: validated, then remembered
    remembered = config_cache.remembered(DEMO)
    assert remembered is not None
    again = load_config(DEMO)
    for config in (validated, remembered, again):
        assert config.profile == parsed and hash(config.profile) == hash(parsed)
        assert config.profile.to_dict() == parsed.to_dict()
    assert remembered.recipe == validated.recipe and again.warnings == validated.warnings == []


def test_a_pickled_host_profile_is_equal_and_frozen():
    from hostctl.config import parse_profile

    profile = parse_profile(_demo_data())
    back = pickle.loads(pickle.dumps(profile))
    assert back == profile and hash(back) == hash(profile)
    assert back.runtime == profile.runtime and back.storage.compile_cache == "/var/lib/hostctl/compile-cache"
    with pytest.raises(AttributeError):
        back.name = "other"


def test_every_bundled_profile_round_trips_through_to_dict():
    from hostctl.config import HostProfile, load_profile

    for path in sorted(paths.hosts_dir().glob("*.toml")):
        profile = load_profile(path)
        assert HostProfile.validate(profile.to_dict()) == profile, path


def _run_python(code: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          cwd=cwd, timeout=120)


def test_unpickling_a_host_profile_imports_no_pydantic(tmp_path):
    from hostctl.config import parse_profile

    profile = parse_profile(_demo_data())
    (tmp_path / "profile.pickle").write_bytes(pickle.dumps(profile))
    done = _run_python("""
        import json, pickle, sys
        profile = pickle.loads(open("profile.pickle", "rb").read())
        after_load = sorted(m for m in sys.modules if m.startswith("pydantic"))
        text = profile.to_json()
        # the check sees pydantic when it is there: validating pulls it in
        type(profile).validate(profile.to_dict())
        after_validate = sorted(m for m in sys.modules if m.startswith("pydantic"))
        print(json.dumps({"after_load": after_load, "after_validate": after_validate,
                          "name": type(profile).__module__ + "." + type(profile).__name__, "text": text}))
    """, tmp_path)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["after_load"] == []
    assert "pydantic" in doc["after_validate"]
    assert doc["name"] == "hostctl.config.HostProfile" and doc["text"] == profile.to_json()


def test_importing_the_config_models_imports_no_pydantic(tmp_path):
    done = _run_python("""
        import json, sys
        import hostctl.config, hostctl.cluster.profile
        print(json.dumps(sorted(m for m in sys.modules if m.startswith(("pydantic", "annotated_types")))))
    """, tmp_path)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


# ---------------------------------------------------------------- where it differs from pydantic (bugs)


def test_a_pydantic_subclass_overriding_a_check_by_name_runs_only_the_override():
    # the reference for the test below
    assert _PydSub(x=1).x == 10 and SEEN == [("pyd-sub", 10)]


def test_a_subclass_overriding_a_check_by_name_runs_only_the_override():
    assert _RecSub(x=1).x == 10
    assert SEEN == [("rec-sub", 10)]


def test_a_tuple_field_takes_a_tuple_and_refuses_a_list_from_python():
    # as in a strict pydantic model
    assert Pair.validate({"pair": (1, "a")}).pair == (1, "a")
    assert locs_types(errors_of(Pair.validate, {"pair": [1, "a"]})) == [(("pair",), "tuple_type")]


def test_from_json_takes_an_array_for_a_tuple_field():
    assert Pair.from_json('{"pair": [1, "a"]}').pair == (1, "a")


def test_a_nested_record_given_a_non_object_says_what_it_expected():
    # as a pydantic model said it: the user reads this through config._format_validation
    with pytest.raises(ValidationError) as info:
        Basket.validate({"name": "b", "items": ["not an item"]})
    err = info.value.errors()[0]
    assert err["type"] == "model_type" and err["loc"] == ("items", 0)
    assert err["msg"] == "Input should be a valid dictionary or instance of Item"
