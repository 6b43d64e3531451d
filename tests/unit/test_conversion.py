"""Decoded JSON converted back by annotation: rich types, containers, and what does not fit."""

from __future__ import annotations

import dataclasses
import enum
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID

import pytest

from venturi.conversion import converter_for
from venturi.serialization import decode_json, encode_json


@dataclasses.dataclass
class Point:
    x: float
    y: float


@dataclasses.dataclass
class Order:
    id: UUID
    placed: datetime
    total: Decimal
    points: list[Point]
    note: str | None = None


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


# -- conversion back by annotation -------------------------------------------------------


def test_converters_rebuild_rich_types_from_their_json_form() -> None:
    order = Order(
        id=UUID(int=7),
        placed=datetime(2026, 3, 1, 12, tzinfo=timezone(timedelta(hours=2))),
        total=Decimal("19.99"),
        points=[Point(1.0, 2.0)],
    )
    raw = decode_json(encode_json(order, what="payload"))
    convert = converter_for(Order)
    assert convert is not None
    assert convert(raw) == order


@pytest.mark.parametrize(
    ("annotation", "raw", "expected"),
    [
        (datetime, "2026-01-02T03:04:05+00:00", datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        (date, "2026-01-02", date(2026, 1, 2)),
        (time, "03:04:05", time(3, 4, 5)),
        (Decimal, "1.10", Decimal("1.10")),
        (Decimal, 3, Decimal(3)),
        (Color, "blue", Color.BLUE),
        (date | None, None, None),
        (list[date], ["2026-01-02"], [date(2026, 1, 2)]),
        (dict[str, UUID], {"a": str(UUID(int=1))}, {"a": UUID(int=1)}),
        (tuple[int, date], [1, "2026-01-02"], (1, date(2026, 1, 2))),
        (tuple[date, ...], ["2026-01-02"], (date(2026, 1, 2),)),
    ],
)
def test_converter_per_annotation(annotation: Any, raw: Any, expected: Any) -> None:
    convert = converter_for(annotation)
    assert convert is not None
    assert convert(raw) == expected


@pytest.mark.parametrize("annotation", [str, int, float, Any, list[int], dict[str, str], object])
def test_annotations_that_json_already_satisfies_need_no_converter(annotation: Any) -> None:
    assert converter_for(annotation) is None


@pytest.mark.parametrize(
    ("annotation", "raw"),
    [
        (datetime, 5),
        (datetime, "yesterday"),
        (Decimal, "abc"),
        (UUID, "not-a-uuid"),
        (Color, "green"),
        (Point, {"x": 1.0}),
        (Point, {"x": 1.0, "y": 2.0, "z": 3.0}),
        (tuple[int, int], [1]),
        (list[Point], "nope"),
    ],
)
def test_a_value_that_does_not_fit_its_annotation_raises(annotation: Any, raw: Any) -> None:
    convert = converter_for(annotation)
    assert convert is not None
    with pytest.raises((TypeError, ValueError)):
        convert(raw)
