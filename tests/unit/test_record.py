"""hostctl.record.Record on its own: how a record is made (keywords, defaults, field order), how
`validate`/`from_json` check untrusted data (each type the checker knows, the `loc` of each error,
unknown and missing keys, aliases, bounds, every error reported), how `to_dict`/`to_json` write the
JSON form, and copy, equality and hashing."""

from __future__ import annotations

import json
import math
from typing import Literal

import pytest

from hostctl.record import Record, RecordError, field

# ---------------------------------------------------------------- records for the tests
# Module-level, so Record.hints() (typing.get_type_hints) resolves their string annotations.


class Base(Record):
    first: int
    second: str = "b"


class Child(Base):
    third: bool = False
    second: str = "child"  # a base field redefined keeps its place, with the child's default


class Device(Record):
    index: int
    uuid: str
    tags: list[str] = field(default_factory=list)


class Box(Record):
    schema_: Literal["box/v1"] = field(default="box/v1", alias="schema")
    name: str
    count: int = field(default=0, ge=0)
    ratio: float = 0.0
    enabled: bool = False
    mode: Literal["on", "off"] = "off"
    flag: Literal[1, 2] | None = None
    note: str | None = None
    devices: list[Device] = field(default_factory=list)
    pair: tuple[str, int] | None = None
    sizes: tuple[int, ...] = ()
    labels: dict[str, int] = field(default_factory=dict)
    raw: dict = field(default_factory=dict)
    items: list = field(default_factory=list)
    child: Device | None = None
    either: str | int | None = None
    extra_note: str | None = None

    _omit_when = {"extra_note": None, "labels": {}}


class Twin(Record):  # the same fields as Device, another class
    index: int
    uuid: str
    tags: list[str] = field(default_factory=list)


class Unsupported(Record):
    ids: set[int] = field(default_factory=set)


class Num(Record):
    x: float


class Aliased(Record):
    kind_: str = field(alias="kind")  # required, with a JSON name


def errors_of(cls: type[Record], data: object) -> list[dict]:
    with pytest.raises(RecordError) as info:
        cls.validate(data)
    return info.value.errors()


def only_error(cls: type[Record], data: object) -> dict:
    errs = errors_of(cls, data)
    assert len(errs) == 1, errs
    return errs[0]


# ---------------------------------------------------------------- construction


def test_missing_required_field_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="'uuid'"):
        Device(index=0)


def test_unknown_keyword_is_a_type_error_naming_it():
    with pytest.raises(TypeError, match="'colour'"):
        Device(index=0, uuid="u", colour="red")


def test_a_field_is_set_by_its_name_not_its_json_alias():
    assert Box(name="n", schema_="box/v1").schema_ == "box/v1"
    with pytest.raises(TypeError):
        Box(name="n", schema="box/v1")


def test_default_factory_gives_each_instance_its_own_value():
    a, b = Device(index=0, uuid="a"), Device(index=1, uuid="b")
    a.tags.append("x")
    assert b.tags == []
    assert a.tags is not b.tags


def test_defaults_from_the_class_body_and_from_field():
    box = Box(name="n")
    assert (box.schema_, box.count, box.mode, box.note, box.devices) == ("box/v1", 0, "off", None, [])


def test_fields_are_base_first_in_definition_order():
    assert list(Base._fields) == ["first", "second"]
    assert list(Child._fields) == ["first", "second", "third"]
    assert list(Child(first=1).to_dict()) == ["first", "second", "third"]


def test_a_redefined_base_field_takes_the_subclass_default_and_the_base_keeps_its_own():
    assert Child(first=1).second == "child"
    assert Base(first=1).second == "b"


def test_field_specs_are_not_left_on_the_class():
    # field(...) is read once by __init_subclass__ and removed: `Box.devices` is not a _Field
    assert "devices" not in Box.__dict__
    assert "tags" not in Device.__dict__


# ---------------------------------------------------------------- validate: scalars


@pytest.mark.parametrize("bad", [True, False, "3", 3.0, 3.5, None, [3]])
def test_int_field_refuses_anything_but_an_int(bad):
    err = only_error(Device, {"index": bad, "uuid": "u"})
    assert err["loc"] == ("index",)
    assert err["type"] == "int_type"
    assert err["input"] is bad or err["input"] == bad


def test_int_field_accepts_an_int():
    assert Device.validate({"index": 7, "uuid": "u"}).index == 7


def test_float_field_accepts_an_int_and_stores_a_float():
    box = Box.validate({"name": "n", "ratio": 2})
    assert type(box.ratio) is float and box.ratio == 2.0
    # the trusted record a probe makes with 2.0 writes the same document as the validated one
    text = Box(name="n", ratio=2.0).to_json()
    assert box.to_json() == text
    assert Box.from_json(text).to_json() == text
    assert '"ratio": 2.0' in text


@pytest.mark.parametrize("bad", [True, "2.5", None])
def test_float_field_refuses_bool_str_and_none(bad):
    err = only_error(Box, {"name": "n", "ratio": bad})
    assert (err["loc"], err["type"]) == (("ratio",), "float_type")


@pytest.mark.parametrize("bad", [1, 0, "true", None])
def test_bool_field_refuses_numbers_and_strings(bad):
    err = only_error(Box, {"name": "n", "enabled": bad})
    assert (err["loc"], err["type"]) == (("enabled",), "bool_type")


@pytest.mark.parametrize("bad", [1, 1.5, True, None, ["n"], {"n": 1}])
def test_str_field_refuses_non_strings(bad):
    err = only_error(Box, {"name": bad})
    assert (err["loc"], err["type"]) == (("name",), "string_type")


def test_non_finite_float_from_json_is_kept_as_python_reads_it():
    assert math.isinf(Box.from_json('{"name": "n", "ratio": 1e400}').ratio)


# ---------------------------------------------------------------- validate: Literal, unions


@pytest.mark.parametrize("bad", ["ON", "maybe", 1, None])
def test_literal_refuses_other_values(bad):
    err = only_error(Box, {"name": "n", "mode": bad})
    assert (err["loc"], err["type"]) == (("mode",), "literal_error")


def test_literal_refuses_an_equal_value_of_another_type():
    assert Box.validate({"name": "n", "flag": 1}).flag == 1
    err = only_error(Box, {"name": "n", "flag": True})  # True == 1, but it is not the literal 1
    assert (err["loc"], err["type"]) == (("flag",), "literal_error")
    assert only_error(Box, {"name": "n", "flag": 1.0})["type"] == "literal_error"


def test_literal_schema_refuses_another_schema():
    err = only_error(Box, {"schema": "box/v2", "name": "n"})
    assert (err["loc"], err["type"], err["input"]) == (("schema",), "literal_error", "box/v2")


def test_optional_accepts_none_and_checks_the_other_arm():
    box = Box.validate({"name": "n", "note": None, "flag": None, "pair": None, "child": None})
    assert (box.note, box.flag, box.pair, box.child) == (None, None, None, None)
    assert Box.validate({"name": "n", "note": "hi"}).note == "hi"
    err = only_error(Box, {"name": "n", "note": 5})
    assert (err["loc"], err["type"]) == (("note",), "string_type")


def test_a_required_field_that_is_not_optional_refuses_null():
    err = only_error(Device, {"index": 0, "uuid": None})
    assert (err["loc"], err["type"]) == (("uuid",), "string_type")


def test_union_of_several_types_tries_each_arm():
    assert Box.validate({"name": "n", "either": "a"}).either == "a"
    assert Box.validate({"name": "n", "either": 3}).either == 3
    assert Box.validate({"name": "n", "either": None}).either is None
    err = only_error(Box, {"name": "n", "either": 1.5})
    assert (err["loc"], err["type"]) == (("either",), "union_error")


# ---------------------------------------------------------------- validate: containers and nesting


def test_nested_record_error_has_the_full_path():
    data = {"name": "n", "devices": [{"index": 0, "uuid": "a"}, {"index": 1, "uuid": 5}]}
    err = only_error(Box, data)
    assert err["loc"] == ("devices", 1, "uuid")
    assert (err["type"], err["input"]) == ("string_type", 5)


def test_nested_records_come_back_as_records_not_dicts():
    box = Box.validate({"name": "n", "devices": [{"index": 0, "uuid": "a", "tags": ["t"]}],
                        "child": {"index": 2, "uuid": "c"}})
    assert box.devices == [Device(index=0, uuid="a", tags=["t"])]
    assert type(box.devices[0]) is Device and type(box.child) is Device
    assert box.child.tags == []  # a missing field with a factory is filled


def test_a_nested_record_must_be_an_object():
    err = only_error(Box, {"name": "n", "devices": ["dev0"]})
    assert (err["loc"], err["type"]) == (("devices", 0), "model_type")
    assert only_error(Box, [1, 2])["type"] == "model_type"
    assert only_error(Box, None)["loc"] == ()


def test_list_field_refuses_a_non_list_and_checks_each_item():
    assert only_error(Box, {"name": "n", "devices": {"index": 0}})["type"] == "list_type"
    assert only_error(Box, {"name": "n", "devices": "abc"})["type"] == "list_type"
    err = only_error(Device, {"index": 0, "uuid": "u", "tags": ["a", "b", 3]})
    assert (err["loc"], err["type"]) == (("tags", 2), "string_type")


def test_tuple_field_checks_each_position_and_the_length():
    assert Box.validate({"name": "n", "pair": ["a", 1]}).pair == ("a", 1)
    assert type(Box.validate({"name": "n", "pair": ["a", 1]}).pair) is tuple
    err = only_error(Box, {"name": "n", "pair": ["a", "1"]})
    assert (err["loc"], err["type"]) == (("pair", 1), "int_type")
    assert only_error(Box, {"name": "n", "pair": ["a"]})["type"] == "tuple_length"
    assert only_error(Box, {"name": "n", "pair": ["a", 1, 2]})["type"] == "tuple_length"
    assert only_error(Box, {"name": "n", "pair": "a1"})["type"] == "tuple_type"


def test_variable_length_tuple_checks_every_item():
    assert Box.validate({"name": "n", "sizes": [1, 2, 3]}).sizes == (1, 2, 3)
    assert Box.validate({"name": "n", "sizes": []}).sizes == ()
    err = only_error(Box, {"name": "n", "sizes": [1, 2, "3"]})
    assert err["loc"] == ("sizes", 2)


def test_dict_field_checks_values_with_the_key_in_the_path():
    assert Box.validate({"name": "n", "labels": {"a": 1}}).labels == {"a": 1}
    err = only_error(Box, {"name": "n", "labels": {"a": 1, "b": "2"}})
    assert (err["loc"], err["type"]) == (("labels", "b"), "int_type")
    assert only_error(Box, {"name": "n", "labels": [["a", 1]]})["type"] == "dict_type"


def test_bare_dict_and_list_take_any_contents_but_not_another_container():
    box = Box.validate({"name": "n", "raw": {"k": [1, {"x": None}]}, "items": [1, "a", None, {}]})
    assert box.raw == {"k": [1, {"x": None}]} and box.items == [1, "a", None, {}]
    assert only_error(Box, {"name": "n", "raw": [1]})["type"] == "dict_type"
    assert only_error(Box, {"name": "n", "items": {"a": 1}})["type"] == "list_type"


# ---------------------------------------------------------------- validate: keys, bounds, errors


def test_ge_bound_refuses_a_smaller_value_and_accepts_the_bound():
    assert Box.validate({"name": "n", "count": 0}).count == 0
    err = only_error(Box, {"name": "n", "count": -1})
    assert (err["loc"], err["type"], err["input"]) == (("count",), "greater_than_equal", -1)


def test_unknown_key_is_extra_forbidden_at_every_level():
    err = only_error(Box, {"name": "n", "colour": "red"})
    assert (err["loc"], err["type"], err["input"]) == (("colour",), "extra_forbidden", "red")
    err = only_error(Box, {"name": "n", "devices": [{"index": 0, "uuid": "a", "serial": "s"}]})
    assert (err["loc"], err["type"]) == (("devices", 0, "serial"), "extra_forbidden")


def test_missing_required_key_is_reported_with_the_whole_object_as_input():
    data = {"index": 0}
    err = only_error(Device, data)
    assert (err["loc"], err["type"], err["input"]) == (("uuid",), "missing", data)


def test_alias_is_accepted_under_its_json_name_and_its_field_name():
    assert Box.validate({"schema": "box/v1", "name": "n"}).schema_ == "box/v1"
    assert Box.validate({"schema_": "box/v1", "name": "n"}).schema_ == "box/v1"
    # an error names the key the document used
    assert only_error(Box, {"schema_": "x", "name": "n"})["loc"] == ("schema_",)
    assert only_error(Box, {"schema": "x", "name": "n"})["loc"] == ("schema",)


def test_a_missing_aliased_field_is_reported_under_its_json_name():
    err = only_error(Aliased, {})
    assert (err["loc"], err["type"]) == (("kind",), "missing")
    assert Aliased.validate({"kind": "k"}).kind_ == "k"


def test_every_error_is_reported_not_only_the_first():
    data = {"name": 1, "count": -1, "mode": "x", "colour": 1,
            "devices": [{"index": "0", "uuid": "a"}, {"uuid": 3}]}
    got = {(e["loc"], e["type"]) for e in errors_of(Box, data)}
    assert got == {
        (("name",), "string_type"),
        (("count",), "greater_than_equal"),
        (("mode",), "literal_error"),
        (("colour",), "extra_forbidden"),
        (("devices", 0, "index"), "int_type"),
        (("devices", 1, "index"), "missing"),
        (("devices", 1, "uuid"), "string_type"),
    }


def test_errors_have_pydantics_shape_and_the_error_is_a_value_error():
    with pytest.raises(RecordError) as info:
        Box.validate({"name": 1, "count": "x"})
    exc = info.value
    assert isinstance(exc, ValueError)
    for err in exc.errors():
        assert set(err) == {"loc", "msg", "type", "input"}
        assert isinstance(err["loc"], tuple) and isinstance(err["msg"], str) and err["msg"]
    assert "2 error(s) for Box" in str(exc) and "name" in str(exc)
    exc.errors().clear()  # a copy: the error keeps its list
    assert len(exc.errors()) == 2


def test_validate_does_not_change_its_input():
    data = {"name": "n", "ratio": 1, "pair": ["a", 1], "devices": [{"index": 0, "uuid": "a"}]}
    before = json.dumps(data)
    Box.validate(data)
    assert json.dumps(data) == before


def test_from_json_reports_invalid_json_as_a_record_error():
    for text in ['{"name": ', "not json", b"\xff\xfe{"]:
        with pytest.raises(RecordError) as info:
            Box.from_json(text)
        assert [e["type"] for e in info.value.errors()] == ["json_invalid"]


def test_from_json_reads_bytes():
    assert Box.from_json(b'{"name": "n"}') == Box(name="n")


def test_a_type_the_checker_does_not_know_is_a_type_error_at_validate_time():
    assert Unsupported(ids={1}).ids == {1}  # defining and making one is fine
    with pytest.raises(TypeError, match="cannot check"):
        Unsupported.validate({"ids": [1]})
    # a field left out is not checked, so it is not an error there
    assert Unsupported.validate({}).ids == set()


# ---------------------------------------------------------------- to_dict / to_json


def test_to_dict_uses_json_names_and_plain_values():
    box = Box(name="n", pair=("a", 1), sizes=(1, 2), devices=[Device(index=0, uuid="a")],
              child=Device(index=1, uuid="c", tags=["t"]))
    out = box.to_dict()
    assert "schema" in out and "schema_" not in out
    assert out["pair"] == ["a", 1] and type(out["pair"]) is list
    assert out["sizes"] == [1, 2] and type(out["sizes"]) is list
    assert out["devices"] == [{"index": 0, "uuid": "a", "tags": []}]
    assert out["child"] == {"index": 1, "uuid": "c", "tags": ["t"]}
    assert list(out)[0] == "schema"  # in field order


def test_to_dict_leaves_out_fields_at_their_omit_value_only():
    out = Box(name="n").to_dict()
    assert "extra_note" not in out and "labels" not in out
    out = Box(name="n", extra_note="x", labels={"a": 1}).to_dict()
    assert out["extra_note"] == "x" and out["labels"] == {"a": 1}
    # an omitted field comes back as its default
    assert Box.validate(Box(name="n").to_dict()) == Box(name="n")


def test_non_finite_floats_become_null_at_any_depth():
    box = Box(name="n", ratio=math.inf, items=[math.nan, -math.inf, 1.5], raw={"k": math.inf})
    out = box.to_dict()
    assert out["ratio"] is None
    assert out["items"] == [None, None, 1.5]
    assert out["raw"] == {"k": None}
    doc = json.loads(box.to_json())  # strict JSON: no Infinity / NaN tokens
    assert doc["ratio"] is None and "Infinity" not in box.to_json() and "NaN" not in box.to_json()


def test_to_json_is_indented_utf8_text_ending_in_a_newline():
    text = Box(name="Grüße").to_json()
    assert text.endswith("}\n")
    assert "Grüße" in text  # not \u escapes
    assert text.startswith('{\n  "schema": "box/v1",')
    assert Box.from_json(text) == Box(name="Grüße")


def test_to_dict_of_a_record_is_independent_of_the_record():
    box = Box(name="n", devices=[Device(index=0, uuid="a", tags=["t"])])
    out = box.to_dict()
    out["devices"][0]["tags"].append("changed")
    assert box.devices[0].tags == ["t"]


# ---------------------------------------------------------------- copy


def test_shallow_copy_shares_nested_values_and_deep_copy_does_not():
    box = Box(name="n", devices=[Device(index=0, uuid="a")])
    shallow = box.copy()
    deep = box.copy(deep=True)
    assert shallow == box and deep == box
    assert shallow is not box
    assert shallow.devices is box.devices
    assert deep.devices is not box.devices and deep.devices[0] is not box.devices[0]
    box.devices.append(Device(index=1, uuid="b"))
    assert len(shallow.devices) == 2 and len(deep.devices) == 1


def test_copy_update_replaces_fields_and_leaves_the_original():
    box = Box(name="n", count=1)
    changed = box.copy(update={"count": 5, "note": "x"})
    assert (changed.count, changed.note, changed.name) == (5, "x", "n")
    assert (box.count, box.note) == (1, None)


def test_copy_update_with_an_unknown_field_is_a_type_error():
    with pytest.raises(TypeError, match="'colour'"):
        Box(name="n").copy(update={"colour": "red"})
    with pytest.raises(TypeError):  # the JSON name is not a field name
        Box(name="n").copy(update={"schema": "box/v1"})


# ---------------------------------------------------------------- equality, hashing, repr


def test_records_with_the_same_values_are_equal():
    assert Device(index=0, uuid="a") == Device(index=0, uuid="a")
    assert Device(index=0, uuid="a") != Device(index=0, uuid="b")
    assert Device(index=0, uuid="a", tags=["x"]) != Device(index=0, uuid="a")


def test_records_of_another_class_are_not_equal():
    assert Device(index=0, uuid="a") != Twin(index=0, uuid="a")
    assert Base(first=1, second="s") != Child(first=1, second="s")
    assert Device(index=0, uuid="a") != {"index": 0, "uuid": "a", "tags": []}


def test_records_are_unhashable():
    with pytest.raises(TypeError):
        hash(Device(index=0, uuid="a"))
    with pytest.raises(TypeError):
        {Device(index=0, uuid="a")}  # noqa: B018


def test_repr_names_the_class_and_each_field():
    assert repr(Device(index=0, uuid="a")) == "Device(index=0, uuid='a', tags=[])"


# ---------------------------------------------------------------- hostile numbers and depths


def test_float_field_given_an_integer_too_large_for_a_float_is_an_error_not_a_crash():
    # JSON reads 1 followed by 400 zeros as a Python int, which float() cannot hold
    with pytest.raises(RecordError) as info:
        Num.from_json('{"x": 1' + "0" * 400 + "}")
    assert info.value.errors()[0]["loc"] == ("x",) and info.value.errors()[0]["type"] == "finite_number"


def test_from_json_of_too_deeply_nested_json_is_a_record_error():
    text = '{"x": ' + "[" * 100_000 + "]" * 100_000 + "}"  # valid JSON, deeper than json.loads goes
    with pytest.raises(RecordError) as info:
        Num.from_json(text)
    assert info.value.errors()[0]["type"] == "json_invalid"


def test_a_plain_record_refuses_a_constraint_it_would_not_check():
    with pytest.raises(TypeError, match="le"):
        class Bounded(Record):  # noqa: F841
            x: int = field(default=0, le=10)
