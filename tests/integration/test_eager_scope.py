"""Eager mode's scope, against real PostgreSQL: only this context, only this App (ADR 0120).

Inside ``eager(app)`` the jobs of other Apps, and the enqueues of threads
started elsewhere (a worker's), still go to the database; after the block,
``app``'s own do too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from support import UNREACHABLE, wait_until

import venturi
from venturi.testing import eager
from venturi.types import OutcomeKind
from venturi.worker import Worker


def test_a_worker_started_elsewhere_keeps_enqueueing_into_the_database(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    inside = threading.Event()

    @app.task(kind="eg.child")
    def child(n: int) -> int:
        return n + 1

    @app.task(kind="eg.parent")
    def parent() -> str:
        assert inside.wait(10)
        return child.delay(1).id

    parent_ref = parent.delay()
    start_worker()

    def both_completed() -> list[dict[str, Any]] | None:
        rows = db.jobs()
        return rows if [r["status"] for r in rows] == ["completed"] * 2 else None

    with eager(app) as session:
        inside.set()  # the worker's handler enqueues while this thread is in eager mode
        rows = wait_until(both_completed)

    assert session.runs == []  # nothing ran in this thread
    parent_row, child_row = rows
    assert (parent_row["id"], child_row["kind"], child_row["payload"]) == (
        parent_ref.id,
        "eg.child",
        {"n": 1},
    )
    notes = {e["job_id"]: (e["outcome"], e["note"]) for e in db.journal()}
    assert notes == {
        parent_ref.id: ("completed", child_row["id"]),
        child_row["id"]: ("completed", "2"),
    }


def test_inside_eager_mode_of_one_app_the_tasks_of_another_app_are_written(
    app: venturi.App, db: Any
) -> None:
    elsewhere = venturi.App(UNREACHABLE, prefix="t_eager_elsewhere", set_as_current=False)

    @app.task(kind="eg.real")
    def real(n: int) -> None: ...

    @elsewhere.task(kind="eg.eager")
    def inline(n: int) -> str:
        return real.delay(n).id

    with eager(elsewhere) as session:
        ref = real.delay(7)
        inline_ref = inline.delay(8)

    assert [(row["id"], row["payload"]) for row in db.jobs()] == [
        (ref.id, {"n": 7}),
        (session.outcome_of(inline_ref).note, {"n": 8}),
    ]
    assert [(run.kind, run.outcome.kind) for run in session.runs] == [
        ("eg.eager", OutcomeKind.COMPLETED)
    ]


def test_after_the_block_delay_writes_the_row_again(app: venturi.App, db: Any) -> None:
    @app.task(kind="eg.after")
    def after(n: int) -> None: ...

    with eager(app) as session:
        after.delay(1)
    ref = after.delay(2)

    assert [run.payload for run in session.runs] == [{"n": 1}]
    assert [(row["id"], row["payload"], row["status"]) for row in db.jobs()] == [
        (ref.id, {"n": 2}, "pending")
    ]
