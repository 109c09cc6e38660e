"""StrictRecord: a record that pydantic validates, for what people write (the host profile and the
recipe, hostctl/config.py).

Its fields, constraints (`field(pattern=..., ge=..., max_length=...)`) and checks (`@validates`,
`@validates_record`) are plain Python until something is validated: then pydantic builds a
validator from them (strict: a boolean is not a number and "8000" is not 8000; no inf or NaN;
no unknown key). A profile the config cache remembers (hostctl/config_cache.py) is read back
without importing pydantic, which was ~120 ms of every `plan` and `status` on the 2-CPU machine
(benchmarks/results/doctor_quick-2vcpu-shared.txt, round 5).

Making one (`Drive(name=..., identity=...)`) validates, as a pydantic model's constructor does;
`copy(update=...)` does not (what the caller passes is trusted). Instances are frozen.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hostctl.record import Record

_ADAPTERS: dict[type, Any] = {}


def validates(*names: str, mode: str = "after") -> Callable[[Any], Any]:
    """Mark a classmethod as a check of the fields `names`: mode "before" sees the raw input,
    "after" the value of the field's type; it returns the value to keep or raises ValueError."""
    if mode not in ("before", "after"):
        raise ValueError(f"mode {mode!r}: before or after")

    def mark(method: Any) -> Any:
        getattr(method, "__func__", method).__validates__ = (names, mode)
        return method

    return mark


def validates_record(method: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """Mark a method as a check of the whole record, run after its fields: it raises ValueError,
    or the record stands (what it returns is not used)."""
    method.__validates_record__ = True  # type: ignore[attr-defined]
    return method


class StrictRecord(Record):
    _constraints = None  # pydantic.Field's: pattern, ge, le, max_length, strict, description, ...

    def __init__(self, **values: Any) -> None:
        made = type(self).validate(values)
        for name in self._fields:
            object.__setattr__(self, name, getattr(made, name))

    @classmethod
    def _make(cls, values: dict[str, Any]):
        obj = cls.__new__(cls)
        Record.__init__(obj, **values)
        return obj

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen: make a changed one with copy(update=...)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{type(self).__name__} is frozen")

    def __hash__(self) -> int:
        return hash((type(self),) + tuple(_hashable(getattr(self, n)) for n in self._fields))

    @classmethod
    def validate(cls, data: Any):
        """A record from untrusted data; raises pydantic's ValidationError naming each bad field."""
        return _adapter(cls).validate_python(data)

    @classmethod
    def from_json(cls, text: str | bytes):
        return _adapter(cls).validate_json(text)

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        return _schema(cls, handler)


def _hashable(value: Any) -> Any:
    if isinstance(value, list):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


# strict: no coercion between types (`api_port = true` is not port 1, "8000" is not 8000);
# allow_inf_nan: an infinity passes every range check and overflows later. Set on each record's
# schema, where pydantic-core builds the fields' validators under it.
_CORE_CONFIG = {"strict": True, "allow_inf_nan": False, "extra_fields_behavior": "forbid"}


def _adapter(cls: type) -> Any:
    adapter = _ADAPTERS.get(cls)
    if adapter is None:
        from pydantic import ConfigDict, TypeAdapter

        adapter = _ADAPTERS[cls] = TypeAdapter(cls, config=ConfigDict(title=cls.__name__))
    return adapter


def _schema(cls: type[StrictRecord], handler: Any) -> Any:
    from typing import Annotated

    from pydantic import Field
    from pydantic_core import core_schema as cs

    hints = cls.hints()
    field_checks: dict[str, list[tuple[str, Callable[[Any], Any]]]] = {}
    record_checks: list[Callable[[Any], Any]] = []
    # by name, the subclass's winning: an overridden check runs once, as the subclass has it
    members: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        members.update(vars(klass))
    for attr, value in members.items():
        func = getattr(value, "__func__", value)
        marked = getattr(func, "__validates__", None)
        if marked is not None:
            names, mode = marked
            for name in names:
                if name not in cls._fields:
                    raise TypeError(f"{cls.__name__}.{attr} checks {name!r}, which is not a field")
                field_checks.setdefault(name, []).append((mode, getattr(cls, attr)))
        elif getattr(func, "__validates_record__", False):
            record_checks.append(func)

    fields = {}
    for name, spec in cls._fields.items():
        tp = hints[name]
        if spec.constraints:
            tp = Annotated[tp, Field(**spec.constraints)]
        schema = handler.generate_schema(tp)
        # pydantic's order: "before" checks run last-defined first, then the type, then the
        # "after" checks in the order they are defined.
        for mode, check in field_checks.get(name, []):
            wrap = cs.no_info_before_validator_function if mode == "before" else cs.no_info_after_validator_function
            schema = wrap(check, schema)
        if not spec.required:
            schema = (cs.with_default_schema(schema, default_factory=spec.factory) if spec.factory is not None
                      else cs.with_default_schema(schema, default=spec.default))
        fields[name] = cs.typed_dict_field(schema, required=spec.required,
                                           validation_alias=spec.key if spec.key != name else None)

    def make(values: dict[str, Any]) -> Any:
        record = cls._make(values)
        for check in record_checks:
            check(record)  # raises, or the record stands as made
        return record

    def instance_or_dict(value: Any, inner: Callable[[Any], Any]) -> Any:
        if isinstance(value, cls):
            return value  # already validated (or made by trusted code): kept as it is
        if not isinstance(value, dict):
            from pydantic_core import PydanticCustomError

            raise PydanticCustomError("model_type", "Input should be a valid dictionary or instance of {name}",
                                      {"name": cls.__name__})
        return inner(value)

    built = cs.no_info_after_validator_function(
        make, cs.typed_dict_schema(fields, extra_behavior="forbid", cls_name=cls.__name__, config=_CORE_CONFIG))
    # JSON input goes straight to the fields: a function in between would hand them Python
    # values, and an array would then not be a tuple.
    return cs.json_or_python_schema(
        json_schema=built, python_schema=cs.no_info_wrap_validator_function(instance_or_dict, built),
        serialization=cs.plain_serializer_function_ser_schema(lambda r: r.to_dict()))

