"""Enqueue-time checks of argument values against a handler's annotations (SPEC 6.6).

A worker hands a handler its arguments as decoded JSON, converted back by the
annotations (``venturi.conversion``). A value that cannot become the annotated
type there (``"1"`` for an ``int``, a dataclass for a ``str``) would be written,
then fail at every run until the backstop; ``checker_for`` catches it at
enqueue instead. It checks what the worker converts and what JSON already is:
``int``, ``float``, ``str``, ``bool``, ``None``, lists, tuples, dicts, dataclasses,
enums, ``Literal``, ``Optional`` and unions, and the text-encoded types
(``datetime``, ``date``, ``time``, ``UUID``, ``Decimal``: an instance, or text the
worker can parse). Numbers follow Python's typing: an ``int`` fits ``float``,
a ``bool`` fits ``int``. Any other annotation (``Any``, ``object``, a plain class,
a ``TypeVar``, a name that does not resolve) accepts every value, as the worker
converts nothing for it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from datetime import date, datetime, time
from decimal import Decimal
from enum import Enum
from typing import Any
from uuid import UUID

from venturi.conversion import converter_for, resolve_annotations

__all__ = ["Checker", "checker_for"]

#: True when a value fits the annotation the checker was made for.
Checker = Callable[[Any], bool]

_TEXT_ENCODED = (datetime, date, time, UUID, Decimal)


def checker_for(annotation: object) -> Checker | None:
    """A checker for values of ``annotation``, or None when every value fits it."""
    try:
        return _checkers[annotation]
    except KeyError:
        checker = _checkers[annotation] = _build_checker(annotation)
        return checker
    except TypeError:  # an unhashable annotation, e.g. with Annotated metadata
        return _build_checker(annotation)


_checkers: dict[object, Checker | None] = {}


def _build_checker(annotation: object) -> Checker | None:
    if annotation is None or annotation is type(None):
        return _is_none
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return checker_for(typing.get_args(annotation)[0])
    if origin is typing.Literal:
        allowed = typing.get_args(annotation)
        return lambda value: any(type(value) is type(a) and value == a for a in allowed)
    if origin is typing.Union or origin is types.UnionType:
        return _union_checker(typing.get_args(annotation))
    if origin in (list, tuple, dict):
        return _generic_checker(origin, typing.get_args(annotation))
    supertype = getattr(annotation, "__supertype__", None)  # typing.NewType
    if supertype is not None:
        return checker_for(supertype)
    if not isinstance(annotation, type):
        return None
    return _class_checker(annotation)


def _class_checker(kind: type) -> Checker | None:
    if kind is bool:
        return lambda value: value is True or value is False
    if kind is int:
        return lambda value: isinstance(value, int)
    if kind is float:
        return lambda value: isinstance(value, int | float)
    if kind is str:
        return lambda value: isinstance(value, str)
    if kind is list:
        return lambda value: isinstance(value, list | tuple)
    if kind is tuple:
        return lambda value: isinstance(value, list | tuple)
    if kind is dict:
        return _is_object
    if kind in _TEXT_ENCODED or issubclass(kind, Enum):
        return _converts(kind)
    if dataclasses.is_dataclass(kind):
        return _DataclassChecker(kind)
    return None


def _is_none(value: Any) -> bool:
    return value is None


def _is_object(value: Any) -> bool:
    return isinstance(value, Mapping) and all(isinstance(k, str) for k in value)


def _converts(kind: type) -> Checker:
    """An instance of ``kind``, or a value the worker's converter turns into one."""
    convert = converter_for(kind)
    assert convert is not None

    def check(value: Any) -> bool:
        if value is None:
            return False
        if isinstance(value, kind):
            return True
        try:
            convert(value)
        except (TypeError, ValueError, ArithmeticError):
            return False
        return True

    return check


def _union_checker(members: tuple[Any, ...]) -> Checker | None:
    checkers = [checker_for(m) for m in members]
    if any(c is None for c in checkers):
        return None
    present = [c for c in checkers if c is not None]
    return lambda value: any(check(value) for check in present)


def _generic_checker(origin: object, args: tuple[Any, ...]) -> Checker | None:
    if origin is dict:
        item = checker_for(args[1]) if len(args) == 2 else None
        if item is None:
            return _is_object
        return lambda value: _is_object(value) and all(item(v) for v in value.values())
    if origin is list or (len(args) == 2 and args[1] is Ellipsis):
        each = checker_for(args[0]) if args else None
        if each is None:
            return lambda value: isinstance(value, list | tuple)
        return lambda value: isinstance(value, list | tuple) and all(each(v) for v in value)
    positions = [checker_for(a) for a in args]
    return lambda value: (
        isinstance(value, list | tuple)
        and len(value) == len(positions)
        and all(check is None or check(v) for check, v in zip(positions, value, strict=True))
    )


class _DataclassChecker:
    """An instance of the dataclass, or a JSON object that builds one: known fields only,
    every required field present, each value fitting its field's annotation.

    Field checkers are resolved on first use, so a dataclass that refers to itself
    (or to one declared later in its module) works.
    """

    def __init__(self, cls: type) -> None:
        self._cls = cls
        self._fields: dict[str, Checker | None] | None = None
        self._required: frozenset[str] = frozenset()

    def _field_checkers(self) -> dict[str, Checker | None]:
        if self._fields is None:
            fields = [f for f in dataclasses.fields(self._cls) if f.init]
            hints = resolve_annotations(self._cls, {f.name: f.type for f in fields})
            self._required = frozenset(
                f.name
                for f in fields
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
            )
            self._fields = {name: checker_for(hint) for name, hint in hints.items()}
        return self._fields

    def __call__(self, value: Any) -> bool:
        if isinstance(value, self._cls):
            return True
        if not _is_object(value):
            return False
        fields = self._field_checkers()
        if not self._required <= value.keys() <= fields.keys():
            return False
        return all(
            (check := fields[name]) is None or check(item) for name, item in value.items()
        )
