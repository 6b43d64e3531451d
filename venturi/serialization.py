"""Strict JSON for payloads, carry and attachments, through orjson (no pickle).

Everything a job stores is JSON in a PostgreSQL ``jsonb`` column, so encoding
is where bad input is refused, at the call, with ``errors.InvalidPayload``
naming what was encoded and the path of the bad value (``$.items[3].price``).

Refused:
    * NaN and ±infinity (orjson would silently write ``null``);
    * integers outside 64 bits (orjson's range, ``-2**63 .. 2**64 - 1``);
    * strings PostgreSQL cannot store (``is_storable_text``), keys too: with
      NUL (``jsonb`` cannot hold ``\\u0000``) or lone surrogates (not UTF-8);
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

A handler gets plain JSON values back unless its annotations ask for more:
that conversion is ``venturi.conversion``'s job.

Speed: this is the enqueue hot path, so the common case costs little more
than ``orjson.dumps`` alone (bench/README.md, "Figures quoted elsewhere").
orjson encodes first, then two byte scans look for ``null`` (a NaN may hide
there) and an escaped NUL. Only when one hits does more work happen: the
output is decoded and compared with the input (C speed; equal means no NaN);
a difference (tuples, datetimes ... do not survive JSON) gets an iterative
scan for non-finite floats; and only a NaN found there, an escaped NUL or an
orjson refusal runs the Python walk that names the bad value's path.
"""

from __future__ import annotations

import dataclasses
import math
from datetime import date, datetime, time
from decimal import Decimal
from enum import Enum
from typing import Any, Final
from uuid import UUID

import orjson

from venturi.errors import InvalidPayload

__all__ = [
    "MAX_DEPTH",
    "MAX_ENCODED_BYTES",
    "decode_json",
    "encode_json",
    "is_storable_text",
]

#: Ceiling on one encoded value (payload, carry or attachment), in bytes. Assign
#: ``venturi.serialization.MAX_ENCODED_BYTES`` at start-up to change it process-wide.
MAX_ENCODED_BYTES = 1024 * 1024
#: Deepest nesting of arrays/objects orjson encodes (its own recursion limit).
MAX_DEPTH: Final = 254

_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**64 - 1


def is_storable_text(value: str) -> bool:
    """Whether PostgreSQL ``text`` (and a ``jsonb`` string) can hold ``value``.

    It cannot hold NUL, nor a string with lone surrogates (not valid UTF-8).
    The one check behind every refusal or repair of text bound for storage.
    """
    if "\x00" in value:
        return False
    try:
        value.encode()
    except UnicodeEncodeError:
        return False
    return True


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
    if value is None:
        return "null"  # every handler returning nothing: skips the "null" check below
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
    if is_storable_text(value):
        return None
    if "\x00" in value:
        return _Problem("strings must not contain NUL (\\u0000): jsonb cannot store it")
    return _Problem("string is not valid UTF-8 (lone surrogate)")


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
