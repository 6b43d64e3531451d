"""Strict JSON for payloads, carry and attachments, through orjson (no pickle).

Everything a job stores is JSON in a PostgreSQL ``jsonb`` column, so encoding
is where bad input is refused, at the call, with ``errors.InvalidPayload``
naming what was encoded and the path of the bad value (``$.items[3].price``).

Refused:
    * NaN and ±infinity (orjson would silently write ``null``);
    * integers outside 64 bits (orjson's range, ``-2**63 .. 2**64 - 1``);
    * strings containing NUL (``jsonb`` cannot hold ``\\u0000``), keys too;
      strings with lone surrogates (not valid UTF-8);
    * object keys that are not plain ``str``;
    * bytes, sets, ``timedelta`` and any type orjson cannot encode;
    * containers nested deeper than ``MAX_DEPTH`` (orjson's limit);
    * an encoding longer than ``MAX_ENCODED_BYTES`` (1 MiB; assign the module
      attribute to change it, or pass ``max_bytes`` to one call): a queue row
      is not a blob store.

Encoded on the way in, and what comes back:
    * ``datetime`` -> RFC 3339 text (with its offset when aware; a naive one
      stays naive); ``date`` -> ``"YYYY-MM-DD"``; ``time`` -> ``"HH:MM:SS[.ffffff]"``;
    * ``UUID`` -> canonical text; ``Decimal`` (finite) -> its exact text, so no
      precision is lost to a float; an ``Enum`` member -> its value;
    * a dataclass instance -> an object of its fields; a tuple -> an array.

JSON has no types, so a handler receives plain JSON values back (strings,
numbers, lists, dicts) unless its parameters say otherwise:
``Task.invoke`` converts, by the handler's annotations, values for parameters
annotated ``datetime``, ``date``, ``time``, ``UUID``, ``Decimal``, an ``Enum``,
a dataclass, or those nested in ``X | None``, ``list[X]``, ``tuple[...]`` and
``dict[str, X]`` (see ``converter_for``). Parameters whose annotations need no
conversion cost nothing. ``decode_carry`` does the same for a task's
``carry=SomeDataclass``.

Speed: this is the enqueue hot path (a 1 KiB payload costs about 2-3x
``orjson.dumps`` alone, a few microseconds). orjson encodes first, then two byte
scans look for ``null`` (a NaN may hide there) and an escaped NUL. Only when
one hits does more work happen: the output is decoded and compared with the
input (C speed; equal means no NaN); a difference (tuples, datetimes ... do
not survive JSON) gets an iterative scan for non-finite floats; and only a
NaN found there, an escaped NUL or an orjson refusal runs the Python walk
that names the bad value's path.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import types
import typing
from collections.abc import Callable, Mapping
from datetime import date, datetime, time
from decimal import Decimal, InvalidOperation
from enum import Enum
from typing import Any, Final
from uuid import UUID

import orjson

from venturi.errors import InvalidPayload

#: Ceiling on one encoded value (payload, carry or attachment), in bytes. Assign
#: ``venturi.serialization.MAX_ENCODED_BYTES`` at start-up to change it process-wide.
MAX_ENCODED_BYTES = 1024 * 1024
#: Deepest nesting of arrays/objects orjson encodes (its own recursion limit).
MAX_DEPTH: Final = 254

_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**64 - 1

#: A function turning a decoded JSON value into the annotated Python type.
Converter = Callable[[Any], Any]


def _encode_default(value: object) -> object:
    """orjson's hook for types it does not know: only finite Decimals pass."""
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise TypeError(f"Decimal {value} is not finite")
        return str(value)
    raise TypeError(f"Type is not JSON serializable: {type(value).__name__}")


def encode_json(value: object, *, what: str, max_bytes: int | None = None) -> str:
    """Encode ``value`` as strict JSON text, or raise ``InvalidPayload``.

    ``what`` names the value in the error ("payload of 'mail.send'");
    ``max_bytes`` overrides ``MAX_ENCODED_BYTES`` for this call.
    """
    try:
        out = orjson.dumps(value, default=_encode_default)
    except TypeError as exc:
        raise _refusal(value, what, exc) from exc
    limit = MAX_ENCODED_BYTES if max_bytes is None else max_bytes
    if len(out) > limit:
        raise InvalidPayload(
            f"{what} is {len(out)} bytes encoded, over the limit of {limit}; "
            "store large data elsewhere and pass a reference"
        )
    # orjson writes NaN and infinities as null. Decoding and comparing is C-speed and
    # equal only if nothing turned into null; a difference (NaN, or merely types JSON
    # does not keep, like tuples and datetimes) calls for a closer look.
    if (b"null" in out and orjson.loads(out) != value and _has_non_finite(value)) or (
        b"\\u0000" in out
    ):
        problem = _find_problem(value, 0)
        if problem is not None:
            raise _refusal(value, what, None, problem)
    return out.decode()


def decode_json(text: str | bytes) -> Any:
    """Decode JSON text read back from storage; ``InvalidPayload`` if it is not JSON."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise InvalidPayload(f"stored value is not valid JSON: {exc}") from exc


_LEAF_TYPES: Final = frozenset({str, int, bool, type(None), datetime, date, time, UUID, Decimal})


def _has_non_finite(value: object) -> bool:
    """Whether a value orjson accepted may hold a NaN or infinity (True when unsure).

    Iterative and exact-type based: cheaper than the walk that names the path.
    """
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is float:
            if not math.isfinite(item):
                return True
        elif kind is dict:
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif kind not in _LEAF_TYPES:
            return True
    return False


class _Problem:
    """A refused value: why, and the path to it, gathered while unwinding the walk."""

    __slots__ = ("reason", "steps")

    def __init__(self, reason: str) -> None:
        self.reason = reason
        self.steps: list[str] = []

    def within(self, step: str) -> _Problem:
        self.steps.append(step)
        return self

    @property
    def path(self) -> str:
        return "$" + "".join(reversed(self.steps))


def _refusal(
    value: object, what: str, exc: TypeError | None, problem: _Problem | None = None
) -> InvalidPayload:
    if problem is None:
        problem = _find_problem(value, 0)
    if problem is None:
        return InvalidPayload(f"{what} is not strict JSON: {exc}")
    return InvalidPayload(f"{what} is not strict JSON: {problem.reason} at {problem.path}")


def _key_step(key: str) -> str:
    if key.isidentifier():
        return f".{key}"
    return f"[{orjson.dumps(key).decode(errors='replace')}]"


def _find_problem(value: object, depth: int) -> _Problem | None:
    """The first refused value under ``value``; None if all is well.

    Mirrors orjson's rules plus venturi's own (finite numbers, no NUL), so an
    error can say exactly where the bad value is. Only runs on the slow path.
    """
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, str):
        return _string_problem(value)
    if isinstance(value, int):
        if not _INT_MIN <= value <= _INT_MAX:
            return _Problem(f"integer {value} does not fit in 64 bits")
        return None
    if isinstance(value, float):
        if not math.isfinite(value):
            return _Problem(f"{value} is not a JSON number (NaN and infinities are refused)")
        return None
    if isinstance(value, dict | list | tuple) or _is_dataclass_instance(value):
        if depth >= MAX_DEPTH:
            return _Problem(f"nested deeper than {MAX_DEPTH} levels")
        return _container_problem(value, depth + 1)
    if isinstance(value, bytes | bytearray | memoryview):
        return _Problem("bytes are not JSON; encode them into a string (e.g. base64)")
    if isinstance(value, set | frozenset):
        return _Problem("sets are not JSON; pass a list")
    if isinstance(value, Decimal):
        return None if value.is_finite() else _Problem(f"Decimal {value} is not finite")
    if isinstance(value, Enum):
        return _find_problem(value.value, depth)
    if isinstance(value, datetime | date | time | UUID):
        return None
    return _Problem(f"type {type(value).__qualname__} is not JSON serializable")


def _string_problem(value: str) -> _Problem | None:
    if "\x00" in value:
        return _Problem("strings must not contain NUL (\\u0000): jsonb cannot store it")
    try:
        value.encode()
    except UnicodeEncodeError:
        return _Problem("string is not valid UTF-8 (lone surrogate)")
    return None


def _container_problem(value: object, depth: int) -> _Problem | None:
    if isinstance(value, dict):
        for key, item in value.items():
            if type(key) is not str:
                kind = type(key).__qualname__
                return _Problem(f"object keys must be plain strings, not {kind} {key!r}")
            problem = _string_problem(key)
            if problem is not None:
                return problem.within(f" (key {key!r})")
            problem = _find_problem(item, depth)
            if problem is not None:
                return problem.within(_key_step(key))
        return None
    if isinstance(value, list | tuple):
        for index, item in enumerate(value):
            problem = _find_problem(item, depth)
            if problem is not None:
                return problem.within(f"[{index}]")
        return None
    for field in dataclasses.fields(value):  # type: ignore[arg-type]
        problem = _find_problem(getattr(value, field.name), depth)
        if problem is not None:
            return problem.within(_key_step(field.name))
    return None


def _is_dataclass_instance(value: object) -> bool:
    return dataclasses.is_dataclass(value) and not isinstance(value, type)


def encode_carry(value: object, carry_type: type | None) -> str:
    """Encode a run's carry. With a declared ``carry_type``, the value must be one (or None)."""
    if carry_type is not None and value is not None and not isinstance(value, carry_type):
        raise InvalidPayload(
            f"carry must be a {carry_type.__qualname__} or None, not {type(value).__qualname__}"
        )
    return encode_json(value, what="carry")


def decode_carry(raw: Any, carry_type: type | None) -> Any:
    """Turn a decoded carry (JSON value) back into ``carry_type`` when one is declared.

    ``None`` stays ``None`` (the first run). Raises ``InvalidPayload`` when the
    stored object no longer fits the dataclass (fields renamed or removed).
    """
    if raw is None or carry_type is None:
        return raw
    convert = converter_for(carry_type)
    if convert is None:
        return raw
    try:
        return convert(raw)
    except (TypeError, ValueError) as exc:
        raise InvalidPayload(f"stored carry does not fit {carry_type.__qualname__}: {exc}") from exc


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
