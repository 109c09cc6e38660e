"""Record: the base of the values hostctl builds itself (HostFacts, the Plan), and their checks.

A record is a plain class with named, annotated fields: defining one costs ~50 us and making one
is a keyword call, where a pydantic model cost ~1 ms of class creation and pulling in pydantic
(~120 ms of `doctor`, `facts` and `plan` on the 2-CPU machine, benchmarks/results/doctor_quick-*.txt,
round 5). What a probe or planner makes is trusted as made; what comes from a file (a facts
snapshot, the state files earlier runs left) goes through `validate`, which checks the field
types these records use: str, int, float, bool, None, Literal, `X | None`, list[X], tuple[X, Y],
dict[str, X], bare dict and list, and nested records, with `ge` bounds. Its errors have the shape pydantic's
have ({loc, msg, type, input}), so the profile's errors and a snapshot's read alike.

The profile and the recipe (hostctl/config.py) are StrictRecords (hostctl/strict_record.py):
pydantic validates them, because their checks are the product, and only when the config cache
(hostctl/config_cache.py) does not remember the profile.
"""

from __future__ import annotations

import copy as _copy
import json
import math
import types
import typing
from collections.abc import Callable
from typing import Any, ClassVar, Literal

_MISSING: Any = object()


class _FieldSpec:
    __slots__ = ("name", "key", "default", "factory", "required", "ge", "constraints")

    def __init__(self, name: str, key: str, default: Any, factory: Callable[[], Any] | None,
                 constraints: dict[str, Any]):
        self.name, self.key, self.default, self.factory = name, key, default, factory
        self.required = default is _MISSING and factory is None
        self.ge = constraints.get("ge")
        self.constraints = constraints  # for a StrictRecord: what pydantic checks (hostctl/strict_record.py)

    def fill(self) -> Any:
        return self.factory() if self.factory is not None else self.default


class _Field:
    """What `field()` returns: read once by Record.__init_subclass__, never seen on an instance."""

    __slots__ = ("default", "factory", "alias", "constraints")

    def __init__(self, default: Any, factory: Callable[[], Any] | None, alias: str | None, constraints: dict[str, Any]):
        self.default, self.factory, self.alias, self.constraints = default, factory, alias, constraints


def field(default: Any = _MISSING, *, default_factory: Callable[[], Any] | None = None, alias: str | None = None,
          **constraints: Any) -> Any:
    """A field with a factory for its default, a JSON name other than its own, or constraints: a
    Record checks `ge`; a StrictRecord hands all of them (pattern, ge, le, max_length, strict,
    description) to pydantic as pydantic.Field's."""
    return _Field(default, default_factory, alias, constraints)


class RecordError(ValueError):
    """A value that does not fit the record; `errors()` lists each misfit as pydantic does."""

    def __init__(self, title: str, errors: list[dict[str, Any]]):
        self.title, self._errors = title, errors
        first = errors[0]
        super().__init__(f"{len(errors)} error(s) for {title}: {'.'.join(map(str, first['loc']))}: {first['msg']}")

    def errors(self) -> list[dict[str, Any]]:
        return list(self._errors)


class Record:
    """Fields come from the class annotations, in definition order (a base's first); a default is
    the value assigned in the class body or `field(...)`. Unknown or missing keywords are a
    TypeError: a record is always complete."""

    _fields: ClassVar[dict[str, _FieldSpec]] = {}
    _omit_when: ClassVar[dict[str, Any]] = {}  # field -> the value for which to_dict leaves it out
    _hints: ClassVar[dict[str, Any] | None] = None
    # the constraints `validate` checks; None: any (a StrictRecord hands them to pydantic)
    _constraints: ClassVar[frozenset[str] | None] = frozenset({"ge"})

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        fields = dict(cls._fields)
        for name, annotation in cls.__dict__.get("__annotations__", {}).items():
            if "ClassVar" in str(annotation):
                continue
            value = cls.__dict__.get(name, _MISSING)
            if isinstance(value, _Field):
                unknown = set(value.constraints) - cls._constraints if cls._constraints is not None else set()
                if unknown:
                    raise TypeError(f"{cls.__name__}.{name}: a Record checks only {sorted(cls._constraints)}, "
                                    f"not {sorted(unknown)}")
                delattr(cls, name)
                fields[name] = _FieldSpec(name, value.alias or name, value.default, value.factory, value.constraints)
            else:
                fields[name] = _FieldSpec(name, name, value, None, {})
        cls._fields = fields
        cls._hints = None

    def __init__(self, **values: Any) -> None:
        for name, spec in self._fields.items():
            value = values.pop(name, _MISSING)
            if value is _MISSING:
                if spec.required:
                    raise TypeError(f"{type(self).__name__}: missing field {name!r}")
                value = spec.fill()
            object.__setattr__(self, name, value)
        if values:
            raise TypeError(f"{type(self).__name__}: no field {', '.join(map(repr, values))}")

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return all(getattr(self, n) == getattr(other, n) for n in self._fields)

    __hash__ = None  # type: ignore[assignment]  # mutable, as the probes fill them in

    def __repr__(self) -> str:
        return f"{type(self).__name__}({', '.join(f'{n}={getattr(self, n)!r}' for n in self._fields)})"

    def copy(self, *, update: dict[str, Any] | None = None, deep: bool = False):
        """A copy with `update`'s fields replaced (not checked: what the caller passes is trusted)."""
        new = _copy.deepcopy(self) if deep else _copy.copy(self)
        for name, value in (update or {}).items():
            if name not in self._fields:
                raise TypeError(f"{type(self).__name__}: no field {name!r}")
            object.__setattr__(new, name, value)
        return new

    # ------------------------------------------------------------ out

    def to_dict(self) -> dict[str, Any]:
        """The JSON-ready form: fields by their JSON names, records and tuples as dicts and lists."""
        out: dict[str, Any] = {}
        omit = self._omit_when
        for name, spec in self._fields.items():
            value = getattr(self, name)
            if name in omit and value == omit[name]:
                continue
            out[spec.key] = _plain(value)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, ensure_ascii=False) + "\n"

    # ------------------------------------------------------------ in

    @classmethod
    def validate(cls, data: Any):
        """A record from untrusted data (a parsed JSON document); RecordError names each bad field."""
        errors: list[dict[str, Any]] = []
        try:
            value = _check(cls, data, (), errors)
        except RecursionError:
            raise RecordError(cls.__name__, [{"loc": (), "msg": "nested too deeply", "type": "recursion_loop",
                                              "input": None}]) from None
        if errors:
            raise RecordError(cls.__name__, errors)
        return value

    @classmethod
    def from_json(cls, text: str | bytes):
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise RecordError(cls.__name__, [{"loc": (), "msg": f"Invalid JSON: {exc}", "type": "json_invalid",
                                              "input": None}]) from None
        return cls.validate(data)

    @classmethod
    def hints(cls) -> dict[str, Any]:
        # Resolved on the first validate, not at import: the annotations are strings
        # (`from __future__ import annotations`) and naming later classes is allowed.
        if cls.__dict__.get("_hints") is None:
            cls._hints = typing.get_type_hints(cls)
        return cls._hints  # type: ignore[return-value]


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_dict()
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no inf or nan
    return value


def _err(errors: list, loc: tuple, kind: str, msg: str, value: Any) -> Any:
    errors.append({"loc": loc, "msg": msg, "type": kind, "input": value})
    return None


_SCALARS: dict[type, tuple[str, str]] = {
    str: ("string_type", "Input should be a valid string"),
    bool: ("bool_type", "Input should be a valid boolean"),
    int: ("int_type", "Input should be a valid integer"),
    float: ("float_type", "Input should be a valid number"),
}


def _check(tp: Any, value: Any, loc: tuple, errors: list) -> Any:
    if isinstance(tp, type) and issubclass(tp, Record):
        return _check_record(tp, value, loc, errors)
    if tp is Any:
        return value
    if tp is type(None):
        return value if value is None else _err(errors, loc, "none_required", "Input should be None", value)
    if tp in _SCALARS:
        kind, msg = _SCALARS[tp]
        if tp is float and isinstance(value, int) and not isinstance(value, bool):
            try:
                return float(value)
            except OverflowError:
                return _err(errors, loc, "finite_number", "Input should be a finite number", value)
        if type(value) is tp:
            return value
        return _err(errors, loc, kind, msg, value)
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if origin is Literal:
        if any(value == a and type(value) is type(a) for a in args):
            return value
        options = " or ".join(repr(a) for a in args)
        return _err(errors, loc, "literal_error", f"Input should be {options}", value)
    if origin in (types.UnionType, typing.Union):
        arms = [a for a in args if a is not type(None)]
        if value is None and len(arms) < len(args):
            return None
        if len(arms) == 1:
            return _check(arms[0], value, loc, errors)
        for arm in arms:
            trial: list = []
            got = _check(arm, value, loc, trial)
            if not trial:
                return got
        return _err(errors, loc, "union_error", f"Input should be one of {', '.join(map(_name, args))}", value)
    if tp is list or origin is list:
        if not isinstance(value, list):
            return _err(errors, loc, "list_type", "Input should be a valid list", value)
        item = args[0] if args else Any
        return [_check(item, v, loc + (i,), errors) for i, v in enumerate(value)]
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            return _err(errors, loc, "tuple_type", "Input should be a valid tuple", value)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(_check(args[0], v, loc + (i,), errors) for i, v in enumerate(value))
        if len(value) != len(args):
            return _err(errors, loc, "tuple_length", f"Input should be a tuple of {len(args)} items", value)
        return tuple(_check(a, v, loc + (i,), errors) for i, (a, v) in enumerate(zip(args, value)))
    if tp is dict or origin is dict:
        if not isinstance(value, dict):
            return _err(errors, loc, "dict_type", "Input should be a valid dictionary", value)
        key_tp, item = args if args else (str, Any)
        out = {}
        for k, v in value.items():
            _check(key_tp, k, loc + (k,), errors)
            out[k] = _check(item, v, loc + (k,), errors)
        return out
    raise TypeError(f"hostctl.record cannot check {tp!r} (at {loc}): use a type record.py lists")


def _check_record(cls: type[Record], value: Any, loc: tuple, errors: list) -> Any:
    if not isinstance(value, dict):
        return _err(errors, loc, "model_type", f"Input should be an object ({cls.__name__})", value)
    hints = cls.hints()
    known = set()
    values: dict[str, Any] = {}
    before = len(errors)
    for name, spec in cls._fields.items():
        key = spec.key if spec.key in value else name  # the JSON name, or the field's own
        known.add(spec.key)
        known.add(name)
        if key not in value:
            if spec.required:
                _err(errors, loc + (spec.key,), "missing", "Field required", value)
            continue
        got = _check(hints[name], value[key], loc + (key,), errors)
        if spec.ge is not None and isinstance(got, (int, float)) and not isinstance(got, bool) and got < spec.ge:
            _err(errors, loc + (key,), "greater_than_equal", f"Input should be greater than or equal to {spec.ge}", got)
        values[name] = got
    for key in value:
        if key not in known:
            _err(errors, loc + (key,), "extra_forbidden", "Extra inputs are not permitted", value[key])
    if len(errors) > before:
        return None
    return cls(**values)


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or str(tp)
