"""Enqueueing against real PostgreSQL: the rows `.delay()`, `.apply_async()` and
`.delay_many()` write, the calls they refuse (writing nothing), the current App of
default-registry tasks, and enqueueing inside the caller's own transaction."""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Sequence
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import venturi
from venturi.context import Context
from venturi.errors import (
    ArgumentsMismatch,
    DuplicateKind,
    EnqueueError,
    InvalidDelay,
    InvalidPayload,
    InvalidPriority,
)
from venturi.job_template import JobTemplate
from venturi.postgres.backend import COPY_THRESHOLD
from venturi.refs import JobRef
from venturi.registry import set_current_app
from venturi.task import task
from venturi.types import NewJob, Priority


class CountingBackend:
    """The real backend, with a count of ``enqueue`` round trips (not a fake)."""

    def __init__(self, backend: Any) -> None:
        self._backend = backend
        self.enqueue_calls: list[int] = []
        self._lock = threading.Lock()

    def enqueue(self, jobs: Sequence[NewJob], *, connection: object | None = None) -> list[JobRef]:
        with self._lock:
            self.enqueue_calls.append(len(jobs))
        return self._backend.enqueue(jobs, connection=connection)

    def enqueue_alike(
        self,
        template: JobTemplate,
        ids: Sequence[str],
        payloads: Sequence[str],
        *,
        connection: object | None = None,
    ) -> None:
        with self._lock:
            self.enqueue_calls.append(len(ids))
        self._backend.enqueue_alike(template, ids, payloads, connection=connection)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._backend, name)


@pytest.fixture
def counting(app: venturi.App) -> Iterator[tuple[venturi.App, CountingBackend]]:
    """A second App on the same tables whose enqueues are counted; not the current App."""
    backend = CountingBackend(app.backend)
    counted = venturi.App(
        app.database_url, prefix=app.prefix, backend=backend, set_as_current=False
    )
    yield counted, backend


def count_jobs(db: Any) -> int:
    return int(db.scalar("SELECT count(*) FROM {{prefix}}_jobs"))


# -- delay / apply_async -------------------------------------------------------------


def test_delay_writes_one_pending_row_of_named_arguments(app: venturi.App, db: Any) -> None:
    @app.task(kind="mail.send")
    def send(ctx: Context, to: str, subject: str = "") -> str:
        return to

    ref = send.delay("a@x.org", subject="hi")

    [row] = db.jobs()
    assert ref == JobRef(row["id"], merged=False)
    assert len(row["id"]) == 26
    assert row["kind"] == "mail.send"
    assert row["payload"] == {"to": "a@x.org", "subject": "hi"}
    assert row["priority"] == Priority.NORMAL
    assert row["status"] == "pending"
    assert row["visible_at"] == row["created_at"]
    assert (row["claimed_by"], row["claim_expires_at"], row["finished_at"]) == (None, None, None)
    assert (row["run_count"], row["failure_count"], row["carry"], row["dedup_key"]) == (
        0,
        0,
        None,
        None,
    )
    assert db.journal() == []


def test_the_tasks_priority_is_the_rows_tier(app: venturi.App, db: Any) -> None:
    @app.task(kind="urgent", priority=Priority.HIGH)
    def urgent(n: int) -> None: ...

    urgent.delay(1)
    assert db.scalar("SELECT priority FROM {{prefix}}_jobs") == Priority.HIGH


def test_apply_async_takes_positional_and_keyword_arguments_and_a_priority(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="report")
    def report(day: str, *, fmt: str = "pdf") -> None: ...

    ref = report.apply_async(args=("2026-01-01",), kwargs={"fmt": "csv"}, priority=Priority.LOW)

    row = db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (ref.id,))
    assert row["payload"] == {"day": "2026-01-01", "fmt": "csv"}
    assert row["priority"] == Priority.LOW


@pytest.mark.parametrize("countdown", [30, 2.5, timedelta(hours=3)])
def test_countdown_delays_visibility_from_the_enqueue_time(
    app: venturi.App, db: Any, countdown: float | timedelta
) -> None:
    @app.task(kind="later")
    def later() -> None: ...

    later.apply_async(countdown=countdown)

    row = db.one("SELECT created_at, visible_at FROM {{prefix}}_jobs")
    expected = countdown if isinstance(countdown, timedelta) else timedelta(seconds=countdown)
    assert row["visible_at"] - row["created_at"] == expected


def test_eta_is_the_visibility_time_whatever_its_zone(app: venturi.App, db: Any) -> None:
    @app.task(kind="at")
    def at() -> None: ...

    eta = datetime(2031, 6, 1, 9, 30, tzinfo=timezone(timedelta(hours=-7)))
    at.apply_async(eta=eta)

    assert db.scalar("SELECT visible_at FROM {{prefix}}_jobs") == eta


def test_an_eta_in_the_past_is_eligible_at_once(app: venturi.App, db: Any) -> None:
    @app.task(kind="overdue")
    def overdue() -> None: ...

    overdue.apply_async(eta=datetime(2001, 1, 1, tzinfo=UTC))
    assert db.scalar("SELECT visible_at <= now() FROM {{prefix}}_jobs") is True


def test_dedup_keys_are_stored_from_the_function_or_the_call(app: venturi.App, db: Any) -> None:
    @app.task(kind="sync", dedup=lambda account, **_: f"account:{account}")
    def sync(account: int, full: bool = False) -> None: ...

    first = sync.delay(7)
    second = sync.apply_async(args=(8,), dedup_key="override")

    rows = {r["id"]: r["dedup_key"] for r in db.all("SELECT id, dedup_key FROM {{prefix}}_jobs")}
    assert rows == {first.id: "account:7", second.id: "override"}


# -- refusals write nothing ----------------------------------------------------------


def refused_calls() -> list[tuple[str, type[EnqueueError], Callable[[Any], Any]]]:
    aware = datetime(2030, 1, 1, tzinfo=UTC)
    return [
        ("missing argument", ArgumentsMismatch, lambda t: t.delay()),
        ("unknown keyword", ArgumentsMismatch, lambda t: t.delay("a", subjekt="x")),
        ("too many", ArgumentsMismatch, lambda t: t.delay("a", "b", "c")),
        ("nan", InvalidPayload, lambda t: t.delay(float("nan"))),
        ("infinity", InvalidPayload, lambda t: t.delay("a", subject=float("inf"))),
        ("big int", InvalidPayload, lambda t: t.delay(2**70)),
        ("nul", InvalidPayload, lambda t: t.delay("a\x00b")),
        ("bytes", InvalidPayload, lambda t: t.delay(b"a")),
        ("set", InvalidPayload, lambda t: t.delay({"a"})),
        ("int key", InvalidPayload, lambda t: t.delay({1: "a"})),
        ("tier 5", InvalidPriority, lambda t: t.apply_async(("a",), priority=5)),
        ("negative", InvalidDelay, lambda t: t.apply_async(("a",), countdown=-1)),
        ("naive eta", InvalidDelay, lambda t: t.apply_async(("a",), eta=datetime(2030, 1, 1))),
        ("both", InvalidDelay, lambda t: t.apply_async(("a",), countdown=1, eta=aware)),
        (
            "eta past 9999",
            InvalidDelay,
            lambda t: t.apply_async(
                ("a",), eta=datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-3)))
            ),
        ),
        ("dedup nul", InvalidPayload, lambda t: t.apply_async(("a",), dedup_key="a\x00")),
        ("dedup type", InvalidPayload, lambda t: t.apply_async(("a",), dedup_key=1.5)),
        ("many: one bad", InvalidPayload, lambda t: t.delay_many([{"to": "a"}, {"to": b"b"}])),
        ("many: bad shape", ArgumentsMismatch, lambda t: t.delay_many([{"to": "a"}, "b"])),
    ]


@pytest.mark.parametrize(
    ("error", "call"),
    [(error, call) for _, error, call in refused_calls()],
    ids=[name for name, _, _ in refused_calls()],
)
def test_a_refused_enqueue_raises_a_typed_error_and_writes_nothing(
    app: venturi.App, db: Any, error: type[EnqueueError], call: Callable[[Any], Any]
) -> None:
    @app.task(kind="refusals")
    def handler(to: Any, subject: Any = "") -> None: ...

    with pytest.raises(error):
        call(handler)
    assert count_jobs(db) == 0


def test_calling_the_task_runs_the_handler_and_enqueues_nothing(app: venturi.App, db: Any) -> None:
    @app.task(kind="direct")
    def double(ctx: Context, n: int) -> dict[str, Any]:
        return {"n": n * 2, "job_id": ctx.job_id, "run_count": ctx.run_count}

    assert double(21) == {"n": 42, "job_id": None, "run_count": 0}
    assert count_jobs(db) == 0


def test_a_second_function_under_an_existing_kind_is_refused(app: venturi.App) -> None:
    @app.task(kind="taken")
    def first() -> None: ...

    with pytest.raises(DuplicateKind):

        @app.task(kind="taken")
        def second() -> None: ...

    assert app.tasks()["taken"].fn is first.fn


# -- default-registry tasks and the current App ---------------------------------------


@task(kind="tests.integration.enqueue.shared")
def shared(n: int) -> int:
    return n


def test_a_default_registry_task_enqueues_through_the_current_app(
    app: venturi.App, db: Any, counting: tuple[venturi.App, CountingBackend]
) -> None:
    _, backend = counting  # created with set_as_current=False: app stays current
    ref = shared.delay(1)
    assert backend.enqueue_calls == []
    assert db.one("SELECT kind, payload FROM {{prefix}}_jobs WHERE id = %s", (ref.id,)) == {
        "kind": "tests.integration.enqueue.shared",
        "payload": {"n": 1},
    }
    assert app.tasks()["tests.integration.enqueue.shared"] is shared


def test_the_most_recently_created_app_becomes_current(app: venturi.App, db: Any) -> None:
    backend = CountingBackend(app.backend)
    venturi.App(app.database_url, prefix=app.prefix, backend=backend)
    try:
        shared.delay(2)
    finally:
        set_current_app(app)
    assert backend.enqueue_calls == [1]
    assert count_jobs(db) == 1


# -- delay_many ----------------------------------------------------------------------


def test_delay_many_writes_every_item_in_one_round_trip_per_batch(
    counting: tuple[venturi.App, CountingBackend], db: Any
) -> None:
    counted, backend = counting

    @counted.task(kind="bulk")
    def bulk(n: int, tag: str = "") -> None: ...

    n, batch_size = 10_000, 3_000
    items: list[Any] = [{"n": i} if i % 2 else (i, "odd-one") for i in range(n)]
    refs = bulk.delay_many(items, batch_size=batch_size)

    assert backend.enqueue_calls == [3000, 3000, 3000, 1000]
    assert len(backend.enqueue_calls) == math.ceil(n / batch_size)
    rows = db.all("SELECT id, payload FROM {{prefix}}_jobs ORDER BY created_at, id")
    assert [r["id"] for r in rows] == [ref.id for ref in refs]
    assert [r["payload"] for r in rows[:3]] == [
        {"n": 0, "tag": "odd-one"},
        {"n": 1},
        {"n": 2, "tag": "odd-one"},
    ]
    assert not any(ref.merged for ref in refs)


def test_delay_many_uses_batches_of_5000_by_default(
    counting: tuple[venturi.App, CountingBackend], db: Any
) -> None:
    counted, backend = counting

    @counted.task(kind="bulk.default")
    def bulk(n: int) -> None: ...

    bulk.delay_many({"n": i} for i in range(5001))
    assert backend.enqueue_calls == [5000, 1]
    assert count_jobs(db) == 5001


def test_a_refused_item_writes_nothing_of_its_batch_and_keeps_the_earlier_ones(
    counting: tuple[venturi.App, CountingBackend], db: Any
) -> None:
    counted, backend = counting

    @counted.task(kind="bulk.bad")
    def bulk(n: int) -> None: ...

    items: list[Any] = [{"n": i} for i in range(10)]
    items[7] = {"n": float("nan")}
    with pytest.raises(InvalidPayload) as caught:
        bulk.delay_many(items, batch_size=5)

    assert backend.enqueue_calls == [5, 5]  # the second batch is checked as it is written
    assert sorted(r["payload"]["n"] for r in db.jobs()) == [0, 1, 2, 3, 4]
    assert any("item 7" in note and "5 job(s)" in note for note in caught.value.__notes__)


def test_an_item_refused_in_the_middle_of_a_copied_batch_writes_nothing_of_it(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="bulk.copied")
    def bulk(n: int) -> None: ...

    size = COPY_THRESHOLD * 2  # batches this large are sent by COPY
    items: list[Any] = [{"n": i} for i in range(size * 2)]
    items[size + COPY_THRESHOLD] = {"n": "not a number"}
    with pytest.raises(ArgumentsMismatch) as caught:
        bulk.delay_many(items, batch_size=size)

    assert count_jobs(db) == size
    assert f"item {size + COPY_THRESHOLD} of delay_many('bulk.copied'); {size} job(s)" in "".join(
        caught.value.__notes__
    )
    bulk.delay_many([{"n": i} for i in range(size)])  # the session was given back clean
    assert count_jobs(db) == size * 2


def test_a_copied_batch_refused_inside_the_callers_transaction_leaves_the_rest_of_it(
    app: venturi.App, db: Any, database_url: str
) -> None:
    @app.task(kind="tx.copied")
    def handler(n: int) -> None: ...

    refused: list[Any] = [{"n": i} for i in range(COPY_THRESHOLD)] + [{"m": 0}]
    with psycopg.connect(database_url) as conn:
        before = handler.apply_async(args=(-1,), connection=conn)
        with pytest.raises(ArgumentsMismatch):
            handler.delay_many(refused, connection=conn)
        after = handler.apply_async(args=(-2,), connection=conn)
        conn.commit()

    assert [row["id"] for row in db.jobs()] == [before.id, after.id]


@pytest.mark.parametrize("batch_size", [0, -1, 1.5, True])
def test_delay_many_refuses_a_batch_size_below_one(app: venturi.App, batch_size: Any) -> None:
    @app.task(kind="bulk.size")
    def bulk(n: int) -> None: ...

    with pytest.raises(EnqueueError, match="batch_size"):
        bulk.delay_many([{"n": 1}], batch_size=batch_size)


# -- the caller's transaction --------------------------------------------------------


@pytest.fixture
def listener(database_url: str, prefix: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection LISTENing on the prefix's wake-up channel."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(f"LISTEN {prefix}_wakeup")
        yield conn


def wake_ups(conn: psycopg.Connection[Any], timeout: float) -> int:
    """Notifications received within ``timeout`` seconds (returns at the first one)."""
    return sum(1 for _ in conn.notifies(timeout=timeout, stop_after=1))


def test_enqueue_on_a_rolled_back_transaction_leaves_no_row_and_wakes_nobody(
    app: venturi.App, db: Any, database_url: str, listener: psycopg.Connection[Any]
) -> None:
    @app.task(kind="tx")
    def handler(n: int) -> None: ...

    with psycopg.connect(database_url) as conn:
        ref = handler.apply_async((1,), connection=conn)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        assert count_jobs(db) == 0  # not visible outside the transaction
        conn.rollback()

    assert db.all("SELECT id FROM {{prefix}}_jobs WHERE id = %s", (ref.id,)) == []
    assert wake_ups(listener, timeout=0.5) == 0


def test_enqueue_on_a_committed_transaction_writes_the_row_and_wakes_workers(
    app: venturi.App, db: Any, database_url: str, listener: psycopg.Connection[Any]
) -> None:
    @app.task(kind="tx")
    def handler(n: int) -> None: ...

    with psycopg.connect(database_url) as conn:
        ref = handler.apply_async((1,), connection=conn)
        assert count_jobs(db) == 0
        assert wake_ups(listener, timeout=0.2) == 0  # NOTIFY is delivered at commit
        conn.commit()

    assert db.scalar("SELECT status FROM {{prefix}}_jobs WHERE id = %s", (ref.id,)) == "pending"
    assert wake_ups(listener, timeout=10) == 1


def test_deduplicated_enqueue_inside_the_callers_transaction_is_rolled_back_with_it(
    app: venturi.App, db: Any, database_url: str
) -> None:
    @app.task(kind="tx.dedup", dedup=lambda n: n)
    def handler(n: int) -> None: ...

    existing = handler.delay(1)
    with psycopg.connect(database_url) as conn:
        assert handler.apply_async((1,), connection=conn) == JobRef(existing.id, merged=True)
        handler.apply_async((2,), connection=conn)
        conn.rollback()

    assert [r["id"] for r in db.jobs()] == [existing.id]
    assert db.journal() == []


def test_delay_many_inside_the_callers_transaction_is_all_or_nothing(
    app: venturi.App, db: Any, database_url: str
) -> None:
    @app.task(kind="tx.many")
    def handler(n: int) -> None: ...

    with psycopg.connect(database_url) as conn:
        handler.delay_many([{"n": i} for i in range(12)], batch_size=5, connection=conn)
        conn.rollback()
    assert count_jobs(db) == 0

    with psycopg.connect(database_url) as conn:
        handler.delay_many([{"n": i} for i in range(12)], batch_size=5, connection=conn)
        conn.commit()
    assert count_jobs(db) == 12


def test_enqueue_on_a_connection_from_the_callers_own_pool(
    app: venturi.App, db: Any, database_url: str
) -> None:
    @app.task(kind="tx.pool")
    def handler(n: int) -> None: ...

    with ConnectionPool(database_url, min_size=1, max_size=2, open=True) as pool:
        with pool.connection() as conn:  # commits when the block ends without error
            committed = handler.apply_async((1,), connection=conn)
            assert count_jobs(db) == 0

        class Abort(Exception):
            pass

        with pytest.raises(Abort), pool.connection() as conn:  # rolls back on the error
            rolled_back = handler.apply_async((2,), connection=conn)
            raise Abort

    assert [r["id"] for r in db.jobs()] == [committed.id]
    assert rolled_back.id != committed.id
