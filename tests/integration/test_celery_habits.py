"""What Celery users reach for first works under the same spelling (SPEC 6.6):
``ref.get(timeout=...)``, ``sig | sig`` for a chain (a group before a step: a chord)."""

from __future__ import annotations

import venturi
from venturi import chain, group
from venturi.testing import drain


def test_get_is_result_and_a_pipe_builds_the_chain_celery_would(app: venturi.App) -> None:
    @app.task(kind="habit.add")
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(kind="habit.total")
    def total(values: list[int]) -> int:
        return sum(values)

    piped = add.s(1, 2) | add.s(10) | add.s(100)
    assert piped == chain(add.s(1, 2), add.s(10), add.s(100))
    fanned = group(add.s(1, 1), add.s(2, 2)) | total.s()
    assert fanned == chain(group(add.s(1, 1), add.s(2, 2)), total.s())

    plain, chained, chorded = add.delay(2, 3), piped.delay(), fanned.delay()
    drain(app)

    assert plain.get(timeout=5) == 5 == plain.result(timeout=5)
    assert chained.result(timeout=5) == 113
    assert chorded.result(timeout=5) == 6
