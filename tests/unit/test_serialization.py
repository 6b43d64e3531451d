"""Strict JSON for payloads, carry and attachments (SPEC 3): what is refused, where, and why."""

from __future__ import annotations

import dataclasses
import enum
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from venturi.errors import InvalidPayload
from venturi.serialization import (
    MAX_DEPTH,
    MAX_ENCODED_BYTES,
    decode_json,
    encode_json,
    is_storable_text,
)


@dataclasses.dataclass
class Point:
    x: float
    y: float


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


def refusal(value: object, what: str = "payload") -> str:
    with pytest.raises(InvalidPayload) as caught:
        encode_json(value, what=what)
    return str(caught.value)


# -- accepted values ---------------------------------------------------------------------


def test_plain_json_round_trips() -> None:
    value = {"a": 1, "b": [1.5, "x", None, True], "c": {"d": []}}
    assert decode_json(encode_json(value, what="payload")) == value


def test_none_values_and_the_text_null_are_not_mistaken_for_nan() -> None:
    value = {"nullable": None, "text": "null", "list": [None, 0.0]}
    assert decode_json(encode_json(value, what="payload")) == value


def test_a_literal_backslash_u0000_text_is_not_a_nul_character() -> None:
    value = {"path": "C:\\u0000dir"}
    assert decode_json(encode_json(value, what="payload")) == value


def test_integers_at_the_64_bit_bounds_are_accepted() -> None:
    value = [-(2**63), 2**64 - 1]
    assert decode_json(encode_json(value, what="payload")) == value


def test_documented_encodings_of_rich_types() -> None:
    moment = datetime(2026, 1, 2, 3, 4, 5, 6000, tzinfo=UTC)
    ident = UUID("12345678-1234-5678-1234-567812345678")
    encoded = decode_json(
        encode_json(
            {
                "aware": moment,
                "naive": datetime(2026, 1, 2, 3, 4, 5),
                "day": date(2026, 1, 2),
                "clock": time(3, 4, 5),
                "id": ident,
                "amount": Decimal("12345678901234567890.123456789"),
                "color": Color.RED,
                "point": Point(1.0, 2.5),
                "pair": (1, 2),
            },
            what="payload",
        )
    )
    assert encoded == {
        "aware": "2026-01-02T03:04:05.006000+00:00",
        "naive": "2026-01-02T03:04:05",
        "day": "2026-01-02",
        "clock": "03:04:05",
        "id": "12345678-1234-5678-1234-567812345678",
        "amount": "12345678901234567890.123456789",
        "color": "red",
        "point": {"x": 1.0, "y": 2.5},
        "pair": [1, 2],
    }


def test_nesting_up_to_the_limit_is_accepted() -> None:
    value: Any = 1
    for _ in range(MAX_DEPTH):
        value = [value]
    encode_json(value, what="payload")


# -- refusals ----------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_floats_are_refused_not_written_as_null(bad: float) -> None:
    message = refusal({"amount": bad}, what="payload of 'shop.charge'")
    assert "payload of 'shop.charge'" in message
    assert "at $.amount" in message


def test_non_finite_float_inside_a_dataclass_is_found() -> None:
    assert "at $.points[1].y" in refusal(
        {
            "points": [Point(0.0, 0.0), Point(1.0, float("nan"))],
        }
    )


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"when": datetime(2026, 1, 1), "none": None, "pair": (1.0, float("nan"))}, "$.pair[1]"),
        ({"none": None, "id": UUID(int=1), "deep": [{"x": [float("inf")]}]}, "$.deep[0].x[0]"),
        ({"none": None, "color": Color.RED, "point": Point(0.0, float("-inf"))}, "$.point.y"),
    ],
)
def test_non_finite_floats_beside_nulls_and_rich_types_are_found(value: Any, path: str) -> None:
    assert refusal(value).endswith(f"at {path}")


@pytest.mark.parametrize("bad", [2**64, -(2**63) - 1, 10**30])
def test_integers_beyond_64_bits_are_refused(bad: int) -> None:
    assert "64 bits" in refusal({"n": [0, bad]})


def test_nul_in_a_string_is_refused() -> None:
    message = refusal({"name": "a\x00b"})
    assert "NUL" in message and "at $.name" in message


def test_nul_in_a_key_is_refused() -> None:
    assert "NUL" in refusal({"outer": {"a\x00": 1}})


def test_lone_surrogates_are_refused() -> None:
    assert "at $.s" in refusal({"s": "\ud800"})


@pytest.mark.parametrize("key", [1, 1.5, None, ("a",)])
def test_non_string_keys_are_refused(key: object) -> None:
    assert "keys must be plain strings" in refusal({"outer": {key: 1}})


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        (b"raw", "bytes"),
        (bytearray(b"raw"), "bytes"),
        ({1, 2}, "sets"),
        (frozenset(), "sets"),
        (timedelta(seconds=1), "timedelta"),
        (object(), "object"),
        (Decimal("NaN"), "not finite"),
        (Decimal("Infinity"), "not finite"),
    ],
)
def test_values_that_are_not_json_are_refused_with_the_reason(bad: object, reason: str) -> None:
    message = refusal({"items": [1, bad]})
    assert reason in message and "at $.items[1]" in message


def test_keys_that_are_not_identifiers_are_quoted_in_the_path() -> None:
    assert '$["a key"]' in refusal({"a key": float("nan")})


def test_nesting_beyond_the_limit_is_refused() -> None:
    value: Any = 1
    for _ in range(MAX_DEPTH + 1):
        value = [value]
    assert "nested deeper" in refusal(value)


def test_encoded_size_is_capped_by_default_and_per_call() -> None:
    big = {"blob": "x" * MAX_ENCODED_BYTES}
    assert "over the limit" in refusal(big)
    assert encode_json(big, what="payload", max_bytes=2 * MAX_ENCODED_BYTES)
    with pytest.raises(InvalidPayload, match="over the limit of 10"):
        encode_json({"a": "0123456789"}, what="payload", max_bytes=10)


def test_decoding_text_that_is_not_json_is_a_typed_error() -> None:
    with pytest.raises(InvalidPayload):
        decode_json("{not json")


# -- property: anything JSON-shaped passes; one poisoned value anywhere is found --------

keys = st.from_regex(r"[a-z][a-z0-9_]{0,7}", fullmatch=True)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00")),
)
json_values = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(keys, children, max_size=4),
    max_leaves=20,
)
poison = st.one_of(
    st.sampled_from([float("nan"), float("inf"), float("-inf"), b"x", {1}, "\x00", "a\x00"]),
    st.integers(min_value=2**64),
    st.integers(max_value=-(2**63) - 1),
)


@settings(deadline=None)  # no timing: the machine may be busy
@given(json_values)
def test_json_shaped_values_round_trip_unchanged(value: Any) -> None:
    assert decode_json(encode_json(value, what="payload")) == value


@st.composite
def poisoned(draw: st.DrawFn) -> tuple[Any, str]:
    """A poison value buried in safe containers, and the path that leads to it."""
    value: Any = draw(poison)
    steps: list[str] = []
    for _ in range(draw(st.integers(min_value=0, max_value=5))):
        siblings = draw(st.lists(scalars, max_size=3))
        if draw(st.booleans()):
            index = draw(st.integers(min_value=0, max_value=len(siblings)))
            value = [*siblings[:index], value, *siblings[index:]]
            steps.append(f"[{index}]")
        else:
            key = draw(keys)
            names = draw(st.lists(keys, min_size=len(siblings), max_size=len(siblings)))
            others = {k: s for k, s in zip(names, siblings, strict=True) if k != key}
            value = {**others, key: value}
            steps.append(f".{key}")
    return value, "$" + "".join(reversed(steps))


@settings(deadline=None)  # no timing: the machine may be busy
@given(poisoned())
def test_a_poisoned_value_anywhere_is_refused_with_its_path(case: tuple[Any, str]) -> None:
    value, path = case
    with pytest.raises(InvalidPayload) as caught:
        encode_json(value, what="payload")
    assert str(caught.value).endswith(f"at {path}")


# -- the one text check ------------------------------------------------------------------


@pytest.mark.parametrize("text", ["", "plain", "Ünïcode ✓", "tab\tnewline\n", "\\u0000 as text"])
def test_text_without_nul_or_lone_surrogates_is_storable(text: str) -> None:
    assert is_storable_text(text)


@pytest.mark.parametrize("text", ["\x00", "a\x00b", "\ud800", "lone \udfff surrogate"])
def test_nul_and_lone_surrogates_are_not_storable(text: str) -> None:
    assert not is_storable_text(text)
