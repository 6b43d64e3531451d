"""Arguments are checked against the handler's annotations at enqueue (SPEC 6.6):
a value the worker could not turn into the annotated type is refused, naming the
parameter, before anything is written; what the worker converts is admitted."""

from __future__ import annotations

import dataclasses
import enum
import uuid
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Literal, NewType

import pytest

import venturi
from venturi.argument_types import checker_for
from venturi.options import TaskOptions
from venturi.registry import Registry
from venturi.task import Task, TaskDecorator


@dataclasses.dataclass
class Address:
    street: str
    number: int = 1


@dataclasses.dataclass
class Tree:
    label: str
    children: list[Tree] = dataclasses.field(default_factory=list)


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


UserId = NewType("UserId", int)


def fits(annotation: object, value: Any) -> bool:
    check = checker_for(annotation)
    return check is None or check(value)


@pytest.mark.parametrize(
    ("annotation", "good", "bad"),
    [
        (int, [0, -3, True], ["1", 1.5, None, [1]]),
        (float, [1.5, 2, False], ["1.5", None]),
        (str, ["", "x"], [1, b"x", Address("a"), None]),
        (bool, [True, False], [1, 0, "true"]),
        (list[int], [[], [1, 2], (1,)], [[1, "2"], "12", {"a": 1}]),
        (list, [[], [1, "a"]], ["ab", {}]),
        (dict[str, int], [{}, {"a": 1}], [{"a": "1"}, {1: 1}, [("a", 1)]]),
        (dict, [{"a": object()}], [[]]),
        (tuple[int, str], [(1, "a"), [1, "a"]], [(1,), ("a", 1), (1, "a", 2)]),
        (tuple[int, ...], [(), (1, 2, 3)], [(1, "2")]),
        (int | None, [None, 3], ["3"]),
        (int | str, [1, "a"], [1.5, None]),
        (Address, [Address("a"), {"street": "a"}, {"street": "a", "number": 2}],
         [{"number": 2}, {"street": 1}, {"street": "a", "floor": 3}, "a"]),
        (Tree, [{"label": "a", "children": [{"label": "b"}]}],
         [{"label": "a", "children": [{"label": 2}]}]),
        (Colour, [Colour.RED, "blue"], ["green", None]),
        (Literal["a", 1], ["a", 1], ["b", True, 2]),
        (datetime, [datetime(2026, 1, 1), "2026-01-01T10:00:00+00:00"], ["soon", 3]),
        (date, [date(2026, 1, 1), "2026-01-01"], ["2026-13-01"]),
        (uuid.UUID, [uuid.uuid4(), str(uuid.uuid4())], ["not-a-uuid"]),
        (Decimal, [Decimal("1.5"), "1.5", 2], ["abc", None]),
        (UserId, [UserId(3)], ["3"]),
    ],
    ids=repr,
)
def test_values_the_worker_can_convert_fit_and_others_do_not(
    annotation: object, good: list[Any], bad: list[Any]
) -> None:
    assert [v for v in good if not fits(annotation, v)] == []
    assert [v for v in bad if fits(annotation, v)] == []


@pytest.mark.parametrize("annotation", [Any, object, Exception, "Unresolved", Any | None])
def test_annotations_the_worker_converts_nothing_for_take_any_value(annotation: object) -> None:
    assert checker_for(annotation) is None or all(
        checker_for(annotation)(v)  # type: ignore[misc]
        for v in [None, [1], "x"]
    )


def make(fn: Any) -> Task[Any, Any]:
    return TaskDecorator(TaskOptions.parse(), registry=Registry())(fn)


def add(a: int, b: int) -> int:
    return a + b


def greet(
    name: str,
    address: Address | None = None,
    *,
    tier: str = None,  # type: ignore[assignment]  # noqa: RUF013 (a None default admits None)
) -> str:
    return name


def untyped(a, b=None):  # type: ignore[no-untyped-def]
    return a


def test_a_wrong_type_raises_invalid_argument_naming_the_parameter() -> None:
    with pytest.raises(venturi.InvalidArgument, match=r"argument 'a' must be int, got str '1'"):
        make(add).new_job(("1", 2))
    with pytest.raises(venturi.ArgumentTypeMismatch) as caught:
        make(greet).new_job((Address("x"),))
    assert caught.value.parameter == "name"
    assert isinstance(caught.value, venturi.ArgumentsMismatch)


def test_optional_parameters_none_defaults_and_unannotated_ones_admit_what_they_should() -> None:
    make(greet).new_job(("ana",), {"address": None, "tier": None})
    make(greet).new_job(("ana",), {"address": {"street": "Main"}})
    make(untyped).new_job(([1, {"any": "json"}],), {"b": "x"})
    with pytest.raises(venturi.ArgumentTypeMismatch, match="'address'"):
        make(greet).new_job(("ana",), {"address": "Main street"})
