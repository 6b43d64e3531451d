"""Decoded JSON back into annotated Python values.

JSON has no types, so a handler receives plain JSON values (strings, numbers,
lists, dicts) unless its parameters say otherwise. ``converter_for`` turns an
annotation into a converter for the values ``serialization.encode_json``
writes: ``datetime``, ``date``, ``time``, ``UUID``, ``Decimal``, an ``Enum``, a
dataclass, and those nested in ``X | None``, ``list[X]``, ``tuple[...]`` and
``dict[str, X]``. Annotations that JSON already satisfies (``str``, ``int``,
``Any``, unresolved names ...) get no converter, so they cost nothing.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import typing
from collections.abc import Callable, Mapping
from datetime import date, datetime, time
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import Any
from uuid import UUID

__all__ = [
    "Converter",
    "converter_for",
    "resolve_annotations",
]

#: A function turning a decoded JSON value into the annotated Python type.
Converter = Callable[[Any], Any]


def converter_for(annotation: object) -> Converter | None:
    """A converter from decoded JSON to ``annotation``, or None when none is needed.

    Converters raise ``TypeError``/``ValueError`` when a value does not fit;
    values that already have the annotated type pass through unchanged.
    Other annotations (``Any``, ``str``, ``int``, unresolved names) need none.
    """
    try:
        return _converters[annotation]
    except KeyError:
        converter = _converters[annotation] = _build_converter(annotation)
        return converter
    except TypeError:  # an unhashable annotation, e.g. with Annotated metadata
        return _build_converter(annotation)


_converters: dict[object, Converter | None] = {}


def _build_converter(annotation: object) -> Converter | None:
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return converter_for(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return _union_converter(typing.get_args(annotation))
    if origin in (list, tuple, dict):
        return _generic_converter(origin, typing.get_args(annotation))
    if not isinstance(annotation, type):
        return None
    if annotation in (datetime, date, time, UUID):
        return _text_converter(annotation)
    if annotation is Decimal:
        return _to_decimal
    if issubclass(annotation, Enum):
        return _enum_converter(annotation)
    if dataclasses.is_dataclass(annotation):
        return _DataclassConverter(annotation)
    return None


def _text_converter(kind: type) -> Converter:
    parse: Callable[[str], Any] = UUID if kind is UUID else kind.fromisoformat  # type: ignore[attr-defined]

    def convert(value: Any) -> Any:
        if value is None or isinstance(value, kind):
            return value
        if not isinstance(value, str):
            raise TypeError(f"expected {kind.__qualname__} as text, got {value!r}")
        return parse(value)

    return convert


def _to_decimal(value: Any) -> Decimal | None:
    if value is None or isinstance(value, Decimal):
        return value
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise TypeError(f"expected a decimal as text or number, got {value!r}")
    try:
        return Decimal(str(value)) if isinstance(value, float) else Decimal(value)
    except InvalidOperation as exc:
        raise ValueError(f"{value!r} is not a decimal number") from exc


def _enum_converter(kind: type[Enum]) -> Converter:
    def convert(value: Any) -> Any:
        if value is None or isinstance(value, kind):
            return value
        return kind(value)

    return convert


def _union_converter(members: tuple[Any, ...]) -> Converter | None:
    present = [m for m in members if m is not type(None)]
    if len(present) != 1:
        return None
    inner = converter_for(present[0])
    if inner is None:
        return None

    def convert(value: Any) -> Any:
        return None if value is None else inner(value)

    return convert


def _generic_converter(origin: object, args: tuple[Any, ...]) -> Converter | None:
    if origin is list:
        return _list_converter(converter_for(args[0])) if args else None
    if origin is dict:
        return _dict_converter(converter_for(args[1])) if len(args) == 2 else None
    if len(args) == 2 and args[1] is Ellipsis:
        return _tuple_converter(converter_for(args[0]) or _identity, None)
    return _tuple_converter(None, [converter_for(a) or _identity for a in args])


def _list_converter(item: Converter | None) -> Converter | None:
    if item is None:
        return None
    return lambda value: [item(v) for v in _sequence(value)]


def _dict_converter(item: Converter | None) -> Converter | None:
    if item is None:
        return None
    return lambda value: {k: item(v) for k, v in _mapping(value).items()}


def _tuple_converter(repeated: Converter | None, items: list[Converter] | None) -> Converter:
    """``tuple[X, ...]`` (``repeated``) or ``tuple[A, B]`` (``items``, one per position)."""

    def convert(value: Any) -> tuple[Any, ...]:
        values = _sequence(value)
        if repeated is not None:
            return tuple(repeated(v) for v in values)
        assert items is not None
        if len(values) != len(items):
            raise ValueError(f"expected {len(items)} items, got {len(values)}")
        return tuple(c(v) for c, v in zip(items, values, strict=True))

    return convert


def _identity(value: Any) -> Any:
    return value


def _sequence(value: Any) -> list[Any] | tuple[Any, ...]:
    if not isinstance(value, list | tuple):
        raise TypeError(f"expected an array, got {type(value).__qualname__}")
    return value


def _mapping(value: Any) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TypeError(f"expected an object, got {type(value).__qualname__}")
    return value


class _DataclassConverter:
    """Builds a dataclass from a JSON object, converting its fields by their annotations.

    Field converters are resolved on first use, so a dataclass that refers to
    itself (or to one declared later in its module) works.
    """

    def __init__(self, cls: type) -> None:
        self._cls = cls
        self._fields: dict[str, Converter | None] | None = None

    def _field_converters(self) -> dict[str, Converter | None]:
        if self._fields is None:
            hints = resolve_annotations(
                self._cls,
                {f.name: f.type for f in dataclasses.fields(self._cls) if f.init},
            )
            self._fields = {name: converter_for(hint) for name, hint in hints.items()}
        return self._fields

    def __call__(self, value: Any) -> Any:
        if isinstance(value, self._cls) or value is None:
            return value
        fields = self._field_converters()
        data = dict(_mapping(value))
        unknown = data.keys() - fields.keys()
        if unknown:
            raise TypeError(f"{self._cls.__qualname__} has no field(s) {sorted(unknown)}")
        for name, convert in fields.items():
            if convert is not None and name in data:
                data[name] = convert(data[name])
        return self._cls(**data)


def resolve_annotations(owner: object, annotations: Mapping[str, object]) -> dict[str, object]:
    """Evaluate string annotations (``from __future__ import annotations``) one by one.

    Names that cannot be resolved (e.g. imported only under ``TYPE_CHECKING``)
    resolve to ``object``: their values are passed through unconverted rather
    than failing the whole handler.
    """
    globalns = getattr(owner, "__globals__", None)
    if globalns is None:
        module = sys.modules.get(getattr(owner, "__module__", ""))
        globalns = vars(module) if module is not None else {}
    resolved: dict[str, object] = {}
    for name, annotation in annotations.items():
        holder = types.SimpleNamespace(__annotations__={name: annotation})
        try:
            hints = typing.get_type_hints(holder, globalns=globalns, include_extras=True)
            resolved[name] = hints[name]
        except Exception:  # any failure to evaluate means: no conversion
            resolved[name] = object
    return resolved
