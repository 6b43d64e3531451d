"""Async enqueue through the task layer: ``adelay``, ``aapply_async``, ``adelay_many``
(ADR 0122). The same validation and typed errors as the sync forms, the caller's async
transaction, and the async pools' lifecycle (opened only when used, closed by close())."""

from __future__ import annotations

import asyncio
import secrets
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from support import TcpProxy, wait_until

import venturi
from venturi.context import Context
from venturi.errors import (
    ArgumentsMismatch,
    BackendUnavailable,
    EnqueueError,
    InvalidArgument,
    InvalidDelay,
    InvalidPayload,
    InvalidPriority,
    SchemaMissing,
)
from venturi.postgres import PostgresBackend
from venturi.postgres.backend import COPY_THRESHOLD
from venturi.refs import JobRef
from venturi.types import Priority

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def send(app: venturi.App) -> venturi.Task[Any, Any]:
    @app.task(kind="mail.send", dedup=lambda to, **_: to)
    def send(ctx: Context, to: str, subject: str = "") -> str:
        return to

    return send


async def test_adelay_writes_the_row_delay_would(
    app: venturi.App, send: venturi.Task[Any, Any], db: Any
) -> None:
    ref = await send.adelay("a@x.org", subject="hi")

    [row] = db.jobs()
    assert ref == JobRef(row["id"])
    assert (row["kind"], row["payload"], row["dedup_key"]) == (
        "mail.send",
        {"to": "a@x.org", "subject": "hi"},
        "a@x.org",
    )
    assert await send.adelay("a@x.org", subject="again") == JobRef(row["id"], merged=True)


async def test_aapply_async_takes_the_options_of_apply_async(
    app: venturi.App, send: venturi.Task[Any, Any], db: Any
) -> None:
    eta = datetime(2031, 6, 1, 9, 30, tzinfo=UTC)
    at = await send.aapply_async(args=("a@x.org",), eta=eta, priority=Priority.LOW)
    later = await send.aapply_async(kwargs={"to": "b@x.org"}, countdown=30, dedup_key="mine")

    rows = {row["id"]: row for row in db.jobs()}
    assert (rows[at.id]["visible_at"], rows[at.id]["priority"]) == (eta, Priority.LOW)
    assert rows[later.id]["visible_at"] - rows[later.id]["created_at"] == timedelta(seconds=30)
    assert rows[later.id]["dedup_key"] == "mine"


@pytest.mark.parametrize(
    ("call", "error"),
    [
        (lambda t: t.adelay(42, subjekt="hi"), ArgumentsMismatch),
        (lambda t: t.adelay("a@x.org", subject=float("nan")), InvalidPayload),
        (lambda t: t.aapply_async(args=("a@x.org",), priority=7), InvalidPriority),
        (lambda t: t.aapply_async(args=("a@x.org",), countdown=-1), InvalidDelay),
        (lambda t: t.aapply_async(args=("a@x.org",), eta=datetime(2031, 1, 1)), InvalidDelay),
        (lambda t: t.adelay_many([{"to": "a"}], batch_size=0), EnqueueError),
    ],
    ids=["arguments", "payload", "priority", "countdown", "naive-eta", "batch-size"],
)
async def test_a_refused_call_raises_the_sync_forms_error_before_any_io(
    database_url: str, prefix: str, call: Any, error: type[Exception]
) -> None:
    """On an App whose database cannot be reached: the check comes first, so the error
    is the call's, never BackendUnavailable."""
    unreachable = venturi.App(
        backend=PostgresBackend(
            "postgresql://nobody@127.0.0.1:1/none", prefix=prefix, connect_timeout=1
        ),
        set_as_current=False,
    )

    @unreachable.task(kind="mail.send")
    def send(to: str, subject: str = "") -> None: ...

    try:
        with pytest.raises(error):
            await call(send)
        with pytest.raises(BackendUnavailable):
            await send.adelay("a@x.org")
    finally:
        await unreachable.aclose()


async def test_delay_and_adelay_on_a_prefix_never_migrated_raise_schema_missing(
    database_url: str,
) -> None:
    """The one-statement paths (``Pool.run``, no context manager) translate the driver's
    missing-table error as every other call does."""
    unmigrated = f"t_{secrets.token_hex(5)}"
    bare = venturi.App(database_url, prefix=unmigrated, set_as_current=False)

    @bare.task(kind="mail.send")
    def send(to: str) -> None: ...

    try:
        with pytest.raises(SchemaMissing, match=unmigrated):
            send.delay("a@x.org")
        with pytest.raises(SchemaMissing, match=unmigrated):
            await send.adelay("a@x.org")
    finally:
        await bare.aclose()


async def test_adelay_many_writes_every_item_in_order_in_batches(app: venturi.App, db: Any) -> None:
    @app.task(kind="bulk")
    def bulk(n: int, *, tag: str = "") -> None: ...

    refs = await bulk.adelay_many([{"n": n} for n in range(5)] + [(5,)], batch_size=2)

    assert [row["id"] for row in db.jobs()] == [ref.id for ref in refs]
    assert [row["payload"]["n"] for row in db.jobs()] == [0, 1, 2, 3, 4, 5]


async def test_a_refusal_in_a_later_batch_of_adelay_many_says_what_was_written(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="bulk")
    def bulk(n: int) -> None: ...

    with pytest.raises(ArgumentsMismatch) as caught:
        await bulk.adelay_many([{"n": 0}, {"n": 1}, {"n": 2}, {"m": 3}], batch_size=2)

    assert "item 3" in "".join(caught.value.__notes__)
    assert "2 job(s) of earlier batches were already enqueued" in "".join(caught.value.__notes__)
    assert len(db.jobs()) == 2


async def test_an_item_refused_in_the_middle_of_a_copied_batch_of_adelay_many_writes_nothing_of_it(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="bulk.copied")
    def bulk(n: int) -> None: ...

    size = COPY_THRESHOLD * 2  # batches this large are sent by COPY
    items: list[Any] = [{"n": i} for i in range(size * 2)]
    items[size + COPY_THRESHOLD] = {"m": 0}
    with pytest.raises(ArgumentsMismatch) as caught:
        await bulk.adelay_many(items, batch_size=size)

    assert len(db.jobs()) == size
    assert f"item {size + COPY_THRESHOLD} of delay_many('bulk.copied'); {size} job(s)" in "".join(
        caught.value.__notes__
    )
    await bulk.adelay_many([{"n": i} for i in range(size)])  # the session was given back clean
    assert len(db.jobs()) == size * 2


# -- the caller's async transaction ---------------------------------------------------


async def test_aapply_async_in_a_rolled_back_transaction_leaves_no_row(
    app: venturi.App, send: venturi.Task[Any, Any], database_url: str, db: Any
) -> None:
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        await send.aapply_async(args=("a@x.org",), connection=conn)
        await conn.rollback()

    assert db.jobs() == []


async def test_aapply_async_in_a_committed_transaction_leaves_one_row_from_the_commit(
    app: venturi.App, send: venturi.Task[Any, Any], database_url: str, db: Any
) -> None:
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        async with conn.transaction():
            ref = await send.aapply_async(args=("a@x.org",), connection=conn)
            await send.adelay_many([{"to": "b@x.org"}], connection=conn)
            assert db.jobs() == []
        assert {row["id"] for row in db.jobs()} >= {ref.id}
    assert len(db.jobs()) == 2


async def test_a_sync_connection_is_refused_with_a_typed_error(
    app: venturi.App, send: venturi.Task[Any, Any], database_url: str, db: Any
) -> None:
    with psycopg.connect(database_url) as conn, pytest.raises(InvalidArgument):
        await send.aapply_async(args=("a@x.org",), connection=conn)
    assert db.jobs() == []


# -- the async pools' lifecycle --------------------------------------------------------


@pytest.fixture
def tagged_url(database_url: str) -> Iterator[str]:
    """The test database under an application_name of its own, to count the App's sessions."""
    yield make_conninfo(database_url, application_name=f"venturi_{secrets.token_hex(4)}")


def sessions(database_url: str, tagged_url: str) -> int:
    name = psycopg.conninfo.conninfo_to_dict(tagged_url)["application_name"]
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
        ).fetchone()
    assert row is not None
    return int(row[0])


async def test_the_async_pool_opens_on_first_async_enqueue_and_aclose_closes_it(
    app: venturi.App, database_url: str, prefix: str, tagged_url: str, db: Any
) -> None:
    tagged = venturi.App(tagged_url, prefix=prefix, set_as_current=False)

    @tagged.task(kind="pool.probe")
    def probe() -> None: ...

    probe.delay()
    assert pool_tasks() == []  # sync enqueue opened no async pool on this loop
    await probe.adelay()
    assert any(name.endswith("-scheduler") for name in pool_tasks())
    await tagged.aclose()
    assert pool_tasks() == []
    wait_until(lambda: sessions(database_url, tagged_url) == 0)
    assert len(db.jobs()) == 2


def pool_tasks() -> list[str]:
    """The running loop's live tasks of venturi's async pools (psycopg_pool names them)."""
    return [
        task.get_name()
        for task in asyncio.all_tasks()
        if "-async-" in task.get_name() and not task.done()
    ]


def test_each_event_loop_gets_a_pool_and_close_ends_those_of_ended_loops(
    app: venturi.App, database_url: str, prefix: str, tagged_url: str, db: Any
) -> None:
    tagged = venturi.App(tagged_url, prefix=prefix, set_as_current=False)

    @tagged.task(kind="pool.probe")
    def probe() -> None: ...

    asyncio.run(probe.adelay())
    asyncio.run(probe.adelay())  # a new loop: the first loop's pool cannot serve it

    assert len(db.jobs()) == 2
    assert sessions(database_url, tagged_url) >= 1
    tagged.close()
    wait_until(lambda: sessions(database_url, tagged_url) == 0)


def test_a_loop_that_ends_while_its_pool_is_still_connecting_ends(
    database_url: str, prefix: str
) -> None:
    """asyncio.run cancels every task at its end. psycopg_pool's connection attempt takes
    that cancellation for a failed connect and schedules another, so without venturi
    closing the pool at that moment the loop's end waited forever for the attempt's
    task (seen once in a few hundred runs of asyncio.run(task.adelay()); made certain
    here by a path that holds the connection attempt)."""
    proxy = TcpProxy.in_front_of(database_url)
    proxy.blackhole()
    held = venturi.App(
        proxy.url(database_url),
        prefix=prefix,
        set_as_current=False,
    )

    @held.task(kind="pool.held")
    def probe() -> None: ...

    async def give_up_waiting() -> None:
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(probe.adelay(), timeout=0.3)

    ended = threading.Event()

    def run() -> None:
        asyncio.run(give_up_waiting())
        ended.set()

    threading.Thread(target=run, daemon=True).start()
    try:
        assert ended.wait(timeout=10), "asyncio.run did not return: the pool's task never ended"
    finally:
        proxy.restore()
        held.close()
        proxy.stop()


async def test_one_at_a_time_enqueues_after_a_burst_keep_to_one_session(
    app: venturi.App, database_url: str, prefix: str, tagged_url: str, db: Any
) -> None:
    """The async pool's idle sessions are handed out first in, first out; the hot
    session (ADR 0132) keeps one-at-a-time enqueues from rotating through all of them."""
    tagged = venturi.App(tagged_url, prefix=prefix, set_as_current=False)

    @tagged.task(kind="pool.probe")
    def probe(n: int) -> None: ...

    await asyncio.gather(*(probe.adelay(n) for n in range(40)))
    assert sessions(database_url, tagged_url) >= 2  # the burst opened several
    mark = db.scalar("SELECT clock_timestamp()")
    for n in range(10):
        await probe.adelay(n)
    name = psycopg.conninfo.conninfo_to_dict(tagged_url)["application_name"]
    used = db.scalar(
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND query_start > %s",
        (name, mark),
    )
    await tagged.aclose()
    assert used == 1
    wait_until(lambda: sessions(database_url, tagged_url) == 0)


async def test_a_burst_wider_than_the_async_pool_is_served_by_its_one_session(
    app: venturi.App, database_url: str, prefix: str, db: Any
) -> None:
    """A session given back while a checkout waits goes to that checkout, not aside."""
    narrow = venturi.App(
        backend=PostgresBackend(database_url, prefix=prefix, pool_size=1, connect_timeout=2),
        prefix=prefix,
        set_as_current=False,
    )

    @narrow.task(kind="pool.probe")
    def probe(n: int) -> None: ...

    await asyncio.gather(*(probe.adelay(n) for n in range(8)))
    await narrow.aclose()
    assert len(db.jobs()) == 8
