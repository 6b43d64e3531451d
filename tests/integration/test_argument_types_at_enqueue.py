"""A call whose values do not fit the handler's annotations writes nothing, on every
enqueue path (SPEC 6.6): it is refused at once rather than retried at run time."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

import venturi
from venturi.context import Context
from venturi.testing import drain


@dataclasses.dataclass
class Order:
    sku: str
    quantity: int


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def count(db: Any) -> int:
    n: int = db.one("SELECT count(*) AS n FROM {{prefix}}_jobs")["n"]
    return n


@pytest.mark.anyio
async def test_every_enqueue_path_refuses_a_wrong_type_and_writes_nothing(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="types.add")
    def add(ctx: Context, a: int, b: int) -> int:
        return a + b

    @app.task(kind="types.label")
    def label(name: str) -> str:
        return name

    attempts = [
        lambda: add.delay("1", 2),  # type: ignore[arg-type]
        lambda: add.apply_async(args=[1], kwargs={"b": "2"}),
        lambda: add.delay_many([{"a": 1, "b": 2}, {"a": 1.5, "b": 2}]),
        lambda: label.delay(Order("x", 1)),  # type: ignore[arg-type]
        lambda: venturi.chain(add.si(1, 2), add.s("2")).delay(),
        lambda: add.si(1, "2"),
    ]
    for attempt in attempts:
        with pytest.raises(venturi.InvalidArgument):
            attempt()
    with pytest.raises(venturi.ArgumentTypeMismatch, match="'a'"):
        await add.adelay("1", 2)  # type: ignore[arg-type]
    assert count(db) == 0

    ref = add.delay(1, 2)
    drain(app)
    assert ref.result() == 3
