"""The raw baseline: plain psycopg on a minimal jobs table of its own.

This is what a hand-written queue costs on the same server in the same run:
one table with a primary key and one partial claim index shaped like venturi's
(``priority, created_at, visible_at WHERE status = 'pending'``), no journal,
no wake-ups, no leases, one connection. venturi's figures are read as a
fraction of these.

A second, informational baseline (``VenturiSchemaTable``) writes with plain
psycopg into a freshly migrated venturi jobs table (ULID text keys, the
schema's indexes), and drains it with the same loop, writing the least the
schema's lifecycle asks (lease, owner, run count, a journal entry per run), so
the gap to the minimal table splits into what the schema costs and what
venturi's code costs.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import orjson
import psycopg
from ulid import ULID
from venturi_bench import Prefix
from workload import NOOP_KIND, connect, drop_prefix, fresh_name, noop_payload

#: The migrations that are the seed's schema (SPEC 5.1): V1-V3, exactly as shipped.
SEED_MIGRATIONS = (
    "V1__initial_schema.sql",
    "V2__history_pagination_index.sql",
    "V3__index_tuning.sql",
)
_MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"

_SCHEMA = """
CREATE TABLE {t} (
    id bigserial PRIMARY KEY,
    kind text NOT NULL,
    payload jsonb NOT NULL,
    priority smallint NOT NULL DEFAULT 1,
    status text NOT NULL DEFAULT 'pending',
    created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    visible_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    finished_at timestamptz
);
CREATE INDEX {t}_claim ON {t} (priority, created_at, visible_at) WHERE status = 'pending';
"""

# Claim: the same shape as venturi's claim_jobs (SKIP LOCKED under a LIMIT).
_CLAIM = """
UPDATE {t} SET status = 'claimed'
WHERE id IN (
    SELECT id FROM {t}
    WHERE status = 'pending' AND visible_at <= now()
    ORDER BY priority, created_at
    LIMIT %s
    FOR UPDATE SKIP LOCKED
)
RETURNING id, kind, payload
"""
_COMPLETE = "UPDATE {t} SET status = 'completed', finished_at = now() WHERE id = ANY(%s)"


_WORKER = "raw-claimer"
_SCHEMA_CLAIM = """
UPDATE {p}_jobs AS j
SET status = 'claimed', claimed_by = %s, run_count = j.run_count + 1,
    claim_expires_at = now() + interval '5 minutes'
WHERE id IN (
    SELECT id FROM {p}_jobs
    WHERE status = 'pending' AND visible_at <= now()
    ORDER BY priority, created_at
    LIMIT %s
    FOR UPDATE SKIP LOCKED
)
RETURNING j.id, j.kind, j.payload, j.run_count
"""
_SCHEMA_COMPLETE = """
WITH done AS (
    UPDATE {p}_jobs
    SET status = 'completed', finished_at = now(), claimed_by = NULL, claim_expires_at = NULL
    WHERE id = ANY(%s) AND claimed_by = %s
    RETURNING id, kind, run_count
)
INSERT INTO {p}_journal (job_id, kind, run_no, recorded_at, outcome)
SELECT id, kind, run_count, now(), 'completed' FROM done
"""


def _payload(n: int) -> str:
    return orjson.dumps(noop_payload(n)).decode()


class RawQueue:
    """A minimal queue table, created fresh and dropped by ``close()``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.table = fresh_name("raw") + "_jobs"
        self.conn = connect(url)
        self.conn.execute(_SCHEMA.format(t=self.table))
        self._insert = self.sql("INSERT INTO {t} (kind, payload) VALUES (%s, %s)")
        self._copy = self.sql("COPY {t} (kind, payload) FROM STDIN")
        self._claim, self._complete = self.sql(_CLAIM), self.sql(_COMPLETE)

    def sql(self, template: str) -> str:
        return template.format(t=self.table)

    def insert_one(self, n: int) -> None:
        """One single-row INSERT, its own (autocommit) transaction."""
        self.conn.execute(self._insert, (NOOP_KIND, _payload(n)))

    def copy_batch(self, start: int, count: int) -> None:
        """COPY ``count`` rows in one transaction."""
        with self.conn.transaction(), self.conn.cursor().copy(self._copy) as copy:
            for n in range(start, start + count):
                copy.write_row((NOOP_KIND, _payload(n)))

    def fill(self, count: int) -> None:
        """``count`` pending jobs (untimed), statistics fresh."""
        self.conn.execute(self.sql("TRUNCATE {t}"))
        for start in range(0, count, 5_000):
            self.copy_batch(start, min(5_000, count - start))
        self.conn.execute(self.sql("ANALYZE {t}"))

    def claim(self, conn: psycopg.Connection[Any], limit: int) -> list[Any]:
        return conn.execute(self._claim, (limit,)).fetchall()

    def complete(self, conn: psycopg.Connection[Any], rows: list[Any]) -> None:
        conn.execute(self._complete, ([row[0] for row in rows],))

    def span(self) -> tuple[Any, Any, int]:
        """(first finished_at, last finished_at, jobs finished)."""
        row = self.conn.execute(
            self.sql("SELECT min(finished_at), max(finished_at), count(*) FROM {t}")
        ).fetchone()
        return row or (None, None, 0)

    def close(self) -> None:
        try:
            self.conn.execute(self.sql("DROP TABLE IF EXISTS {t}"))
        finally:
            self.conn.close()


class SeedPrefix:
    """The seed's own tables and indexes (V1-V3 only, no later column or index) under a
    fresh prefix, made with plain psycopg from the shipped migration files; ``close()``
    drops them. The baseline every figure of round three is read against (issue 34)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.value = fresh_name("seed")
        self.conn = connect(url)
        for name in SEED_MIGRATIONS:
            text = (_MIGRATIONS_DIR / name).read_text().replace("{{prefix}}", self.value)
            self.conn.execute(text)

    def sql(self, template: str) -> str:
        return template.replace("{p}", self.value)

    def close(self) -> None:
        try:
            drop_prefix(self.conn, self.value)
        finally:
            self.conn.close()


class VenturiSchemaTable:
    """Plain psycopg writes into a freshly migrated venturi jobs table; ``close()`` drops it.

    Ids are made before any clock starts (``ids``), so only the database's
    cost of the schema is measured. ``seed=True``: the seed's own tables (V1-V3,
    ``SeedPrefix``) instead of every migration's.
    """

    def __init__(self, url: str, count: int, *, seed: bool = False) -> None:
        self.url = url
        self.prefix: Prefix | SeedPrefix = SeedPrefix(url) if seed else Prefix(url)
        self.ids = [str(ULID()) for _ in range(count)]
        self._insert = self.prefix.sql(
            "INSERT INTO {p}_jobs (id, kind, payload, priority, status, created_at, visible_at) "
            "VALUES (%s, %s, %s, 1, 'pending', now(), now())"
        )
        self._copy = self.prefix.sql(
            "COPY {p}_jobs (id, kind, payload, priority, status, created_at, visible_at) FROM STDIN"
        )

    def insert_one(self, n: int) -> None:
        self.prefix.conn.execute(self._insert, (self.ids[n], NOOP_KIND, _payload(n)))

    async def ainsert_one(self, conn: psycopg.AsyncConnection[Any], n: int) -> None:
        """``insert_one`` awaited on ``conn``, an autocommit ``AsyncConnection``."""
        await conn.execute(self._insert, (self.ids[n], NOOP_KIND, _payload(n)))

    def copy_batch(self, start: int, count: int) -> None:
        conn = self.prefix.conn
        now = datetime.now(UTC)
        with conn.transaction(), conn.cursor().copy(self._copy) as copy:
            for n in range(start, start + count):
                copy.write_row((self.ids[n], NOOP_KIND, _payload(n), 1, "pending", now, now))

    # The drain loop's side: the least any queue keeping this schema's lifecycle
    # writes (ADR 5, 16, 19): the claim's lease, owner and run count, the finish
    # fenced on the owner, one journal entry per run.

    def fill(self, count: int) -> None:
        self.prefix.conn.execute(self.prefix.sql("TRUNCATE {p}_jobs CASCADE"))
        for start in range(0, count, 5_000):
            self.copy_batch(start, min(5_000, count - start))
        self.prefix.conn.execute(self.prefix.sql("ANALYZE {p}_jobs"))

    def claim(self, conn: psycopg.Connection[Any], limit: int) -> list[Any]:
        return conn.execute(self.prefix.sql(_SCHEMA_CLAIM), (_WORKER, limit)).fetchall()

    def complete(self, conn: psycopg.Connection[Any], rows: list[Any]) -> None:
        conn.execute(self.prefix.sql(_SCHEMA_COMPLETE), ([row[0] for row in rows], _WORKER))

    def span(self) -> tuple[Any, Any, int]:
        row = self.prefix.conn.execute(
            self.prefix.sql(
                "SELECT min(recorded_at), max(recorded_at), count(*) FROM {p}_journal "
                "WHERE outcome = 'completed'"
            )
        ).fetchone()
        return row or (None, None, 0)

    def close(self) -> None:
        self.prefix.close()


class DrainQueue(Protocol):
    """What the raw drain loops need of a table: fill it, claim, complete, read the span."""

    url: str

    def fill(self, count: int) -> None: ...
    def claim(self, conn: psycopg.Connection[Any], limit: int) -> list[Any]: ...
    def complete(self, conn: psycopg.Connection[Any], rows: list[Any]) -> None: ...
    def span(self) -> tuple[Any, Any, int]: ...
    def close(self) -> None: ...


def _rate(queue: DrainQueue, count: int) -> float:
    """Jobs/s between the first and the last finish, read from the table like venturi's."""
    first, last, done = queue.span()
    if done != count:
        raise RuntimeError(f"raw drain finished {done} of {count}")
    return count / (last - first).total_seconds()


def _drain_loop(queue: DrainQueue, conn: psycopg.Connection[Any], limit: int) -> None:
    """Two autocommit round trips per batch (claim, complete) until the table is empty."""
    while rows := queue.claim(conn, limit):
        queue.complete(conn, rows)


def drain(queue: DrainQueue, count: int, limit: int) -> float:
    """Fill ``count`` jobs (untimed), then claim ``limit`` at a time and complete them on
    one connection; jobs/s. Closes ``queue``."""
    try:
        queue.fill(count)
        with connect(queue.url) as conn:
            _drain_loop(queue, conn, limit)
        return _rate(queue, count)
    finally:
        queue.close()


def drain_threads(queue: DrainQueue, count: int, limit: int, threads: int) -> float:
    """The same loop run by ``threads`` threads, one connection each, on one table; jobs/s.
    Closes ``queue``.

    The ceiling for several worker processes: each thread is a claimer with its
    own session, contending on the same index and rows as venturi's workers do.
    """
    try:
        queue.fill(count)
        failures: list[BaseException] = []
        ready = threading.Barrier(threads)

        def loop() -> None:
            try:
                with connect(queue.url) as conn:
                    ready.wait(timeout=60)
                    _drain_loop(queue, conn, limit)
            except BaseException as exc:  # reported below, so the figure is never silently short
                failures.append(exc)

        workers = [threading.Thread(target=loop, name=f"raw-claimer-{n}") for n in range(threads)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join(timeout=600)
        if failures:
            raise failures[0]
        return _rate(queue, count)
    finally:
        queue.close()
