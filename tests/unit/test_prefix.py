"""Prefix validation is a security boundary (ADR 6): refused before any SQL is sent."""

from __future__ import annotations

import pytest
from support import UNREACHABLE

import venturi
from venturi.errors import ConfigurationError, InvalidPrefix
from venturi.naming import DERIVED_SUFFIXES, MAX_PREFIX_LENGTH, Prefix


@pytest.mark.parametrize(
    "raw",
    [
        "Bad",
        "a-b",
        "x; drop table y",
        "",
        "1abc",
        "ümlaut",
        "a b",
        "a\x00b",
        "x" * (MAX_PREFIX_LENGTH + 1),
    ],
)
def test_invalid_prefixes_are_refused_by_app_before_connecting(raw: str) -> None:
    with pytest.raises(InvalidPrefix) as caught:
        venturi.App(UNREACHABLE, prefix=raw, set_as_current=False)
    assert caught.value.prefix == raw
    assert isinstance(caught.value, ConfigurationError)


def test_non_string_prefix_is_refused() -> None:
    with pytest.raises(InvalidPrefix, match="must be a string"):
        Prefix.parse(42)


def test_longest_valid_prefix_keeps_every_derived_name_within_63_bytes() -> None:
    prefix = Prefix.parse("p" * MAX_PREFIX_LENGTH)
    assert max(len((prefix.value + s).encode()) for s in DERIVED_SUFFIXES) == 63


def test_too_long_message_says_the_limit() -> None:
    with pytest.raises(InvalidPrefix, match=f"at most {MAX_PREFIX_LENGTH}"):
        Prefix.parse("p" * (MAX_PREFIX_LENGTH + 1))


@pytest.mark.parametrize("raw", ["venturi", "_x", "q1_2", "a"])
def test_valid_prefixes_substitute_the_token(raw: str) -> None:
    assert (
        Prefix.parse(raw).substitute("SELECT * FROM {{prefix}}_jobs") == f"SELECT * FROM {raw}_jobs"
    )
