"""The adapter's pool: pooled sessions are reused, even on descriptors above 1023, and
one-at-a-time statements keep to one session."""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

import venturi
from venturi.postgres import PostgresBackend


@pytest.fixture
def many_descriptors() -> Iterator[None]:
    """Hold open descriptors up to 1100, so the next connection's socket is above 1023."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        pytest.skip(f"the open-files limit ({soft}) is too low to go past descriptor 1023")
    held: list[int] = []
    while not held or held[-1] < 1100:
        held.append(os.open(os.devnull, os.O_RDONLY))
    try:
        yield
    finally:
        for fd in held:
            os.close(fd)


def test_a_pooled_session_on_a_high_descriptor_is_reused_not_replaced(
    many_descriptors: None, database_url: str, prefix: str, db: Any, caplog: Any
) -> None:
    app = venturi.App(database_url, prefix=prefix, set_as_current=False)
    caplog.set_level(logging.DEBUG, logger="venturi.postgres.connections")
    try:
        backend: Any = app.backend
        pids = [backend._run(lambda conn: (conn.fileno(), conn.info.backend_pid)) for _ in range(5)]
        # The pool may open a second session in the background when the first checkout
        # comes before its first one is ready (a loaded machine): then the two alternate.
        sessions = {pid for _, pid in pids}
        assert len(sessions) <= 2, pids
        # Every session handed out is still open on the server: none was discarded.
        live = db.all("SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", (list(sessions),))
        assert {row["pid"] for row in live} == sessions, pids
    finally:
        app.close()
    assert all(fd > 1023 for fd, _ in pids), pids
    discarded = [r for r in caplog.records if "discarding a pooled connection" in r.getMessage()]
    assert discarded == [], pids


def test_one_at_a_time_statements_after_a_burst_keep_to_one_session(
    database_url: str, prefix: str
) -> None:
    """psycopg_pool hands out idle sessions first in, first out; the hot session
    (ADR 0132) keeps one-at-a-time statements from rotating through all of them."""
    app = venturi.App(database_url, prefix=prefix, set_as_current=False)
    backend: Any = app.backend
    burst = threading.Barrier(4)

    def hold_one() -> int:
        return int(backend._run(lambda conn: (burst.wait(timeout=10), conn.info.backend_pid)[1]))

    try:
        with ThreadPoolExecutor(4) as pool:
            opened = set(pool.map(lambda _: hold_one(), range(4)))
        assert len(opened) == 4  # the burst held four sessions at once
        pids = [backend._run(lambda conn: conn.info.backend_pid) for _ in range(10)]
    finally:
        app.close()
    assert len(set(pids)) == 1, pids


def test_a_session_given_back_while_a_checkout_waits_goes_to_that_checkout(
    database_url: str, prefix: str
) -> None:
    """With one session and a second thread waiting for it, giving it back hands it on
    at once rather than keeping it hot (the waiter would time out otherwise)."""
    backend = PostgresBackend(database_url, prefix=prefix, pool_size=1, connect_timeout=2)
    held, waiting = threading.Event(), threading.Event()
    got: list[int] = []

    def second() -> None:
        held.wait(timeout=10)
        waiting.set()
        got.append(backend._run(lambda conn: conn.info.backend_pid))

    thread = threading.Thread(target=second)
    thread.start()
    try:

        def first(conn: Any) -> int:
            held.set()
            waiting.wait(timeout=10)
            time.sleep(0.2)  # the second thread is in the pool's queue by now
            return int(conn.info.backend_pid)

        pid = backend._run(first)
        thread.join(timeout=10)
    finally:
        backend.close()
    assert got == [pid]


def test_the_hot_session_keeps_one_statement_cursor_and_a_replaced_session_gets_its_own(
    app: venturi.App, db: Any
) -> None:
    """``Pool.execute`` reuses the hot session's cursor; once the server ends that session,
    the next enqueue finds its goodbye unread, runs on a new session with a cursor of its
    own, and is written."""
    backend: Any = app.backend

    @app.task(kind="pool.cursor")
    def noop(n: int) -> None: ...

    def warm() -> tuple[Any, int]:
        session = backend._pool._hot._warm
        return session.cursor, session.conn.info.backend_pid

    try:
        seen = []
        for n in range(3):
            noop.delay(n)
            seen.append(warm())
        assert len({id(cur) for cur, _ in seen}) == 1, seen
        assert len({pid for _, pid in seen}) == 1, seen
        db.execute("SELECT pg_terminate_backend(%s)", (seen[0][1],))
        deadline = time.monotonic() + 10
        while db.all("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (seen[0][1],)):
            assert time.monotonic() < deadline, "the terminated session did not end"
            time.sleep(0.01)
        ref = noop.delay(3)
        cur, pid = warm()
    finally:
        app.close()
    assert pid != seen[0][1]
    assert cur is not seen[0][0]
    rows = db.all("SELECT id, payload FROM {{prefix}}_jobs ORDER BY id")
    assert [row["payload"] for row in rows] == [{"n": n} for n in range(4)]
    assert rows[3]["id"] == ref.id


def test_the_async_hot_session_keeps_its_cursor_and_a_replaced_session_gets_its_own(
    app: venturi.App, db: Any
) -> None:
    """``AsyncPool.execute``, as the sync test above: ``adelay()`` reuses the running
    loop's hot session and its cursor; once the server ends that session, the next
    ``adelay()`` finds its goodbye unread and is written on a new session."""
    backend: Any = app.backend

    @app.task(kind="pool.acursor")
    def noop(n: int) -> None: ...

    def warm() -> tuple[Any, int]:
        (pool,) = backend._async_pool._pools.values()
        session = pool._hot._warm
        return session.cursor, session.conn.info.backend_pid

    async def enqueue() -> tuple[list[tuple[Any, int]], tuple[Any, int], str]:
        seen = []
        for n in range(3):
            await noop.adelay(n)
            seen.append(warm())
        db.execute("SELECT pg_terminate_backend(%s)", (seen[0][1],))
        deadline = time.monotonic() + 10
        while db.all("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (seen[0][1],)):
            assert time.monotonic() < deadline, "the terminated session did not end"
            await asyncio.sleep(0.01)
        ref = await noop.adelay(3)
        return seen, warm(), ref.id

    try:
        seen, (cur, pid), ref_id = asyncio.run(enqueue())
    finally:
        app.close()
    assert len({id(cursor) for cursor, _ in seen}) == 1, seen
    assert len({session_pid for _, session_pid in seen}) == 1, seen
    assert pid != seen[0][1]
    assert cur is not seen[0][0]
    rows = db.all("SELECT id, payload FROM {{prefix}}_jobs ORDER BY id")
    assert [row["payload"] for row in rows] == [{"n": n} for n in range(4)]
    assert rows[3]["id"] == ref_id


def test_enqueues_from_many_threads_at_once_each_write_their_own_row(
    app: venturi.App, db: Any
) -> None:
    """Threads that share the pool never share a statement cursor: every ``.delay()``
    of 8 threads x 50 calls is one row, with its own id and arguments."""

    @app.task(kind="pool.threads")
    def noop(thread: int, n: int) -> None: ...

    start = threading.Barrier(8)

    def enqueue(thread: int) -> list[str]:
        start.wait(timeout=10)
        return [noop.delay(thread, n).id for n in range(50)]

    try:
        with ThreadPoolExecutor(8) as pool:
            ids = [job_id for ids in pool.map(enqueue, range(8)) for job_id in ids]
    finally:
        app.close()
    rows = db.all("SELECT id, payload FROM {{prefix}}_jobs")
    assert len(ids) == len(set(ids)) == 400
    assert {row["id"] for row in rows} == set(ids)
    assert sorted((r["payload"]["thread"], r["payload"]["n"]) for r in rows) == [
        (t, n) for t in range(8) for n in range(50)
    ]
