"""The raw baseline: plain psycopg on a minimal jobs table of its own.

This is what a hand-written queue costs on the same server in the same run:
one table with a primary key and one partial claim index shaped like venturi's
(``priority, created_at, visible_at WHERE status = 'pending'``), no journal,
no wake-ups, no leases, one connection. venturi's figures are read as a
fraction of these.

A second, informational baseline (``VenturiSchemaTable``) writes with plain
psycopg into a freshly migrated venturi jobs table (ULID text keys, the
schema's indexes), so the gap to the minimal table splits into what the
schema costs and what venturi's code costs.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime

import orjson
from ulid import ULID
from venturi_bench import Prefix
from workload import NOOP_KIND, connect, fresh_name, noop_payload

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

    def drain(self, count: int, limit: int) -> float:
        """Fill ``count`` jobs (untimed), then claim ``limit`` at a time and complete them.

        Two autocommit round trips per batch (claim, complete), one connection.
        Throughput is read from the database like venturi's: jobs over the span
        between the first and the last ``finished_at``.
        """
        self.conn.execute(self.sql("TRUNCATE {t}"))
        for start in range(0, count, 5_000):
            self.copy_batch(start, min(5_000, count - start))
        self.conn.execute(self.sql("ANALYZE {t}"))
        claim, complete = self.sql(_CLAIM), self.sql(_COMPLETE)
        while True:
            rows = self.conn.execute(claim, (limit,)).fetchall()
            if not rows:
                break
            self.conn.execute(complete, ([row[0] for row in rows],))
        first, last, done = self.conn.execute(
            self.sql("SELECT min(finished_at), max(finished_at), count(*) FROM {t}")
        ).fetchone() or (None, None, 0)
        if done != count:
            raise RuntimeError(f"raw drain completed {done} of {count}")
        return count / (last - first).total_seconds()

    def close(self) -> None:
        try:
            self.conn.execute(self.sql("DROP TABLE IF EXISTS {t}"))
        finally:
            self.conn.close()


class VenturiSchemaTable:
    """Plain psycopg writes into a freshly migrated venturi jobs table; ``close()`` drops it.

    Ids are made before any clock starts (``ids``), so only the database's
    cost of the schema is measured.
    """

    def __init__(self, url: str, count: int) -> None:
        self.prefix = Prefix(url)
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

    def copy_batch(self, start: int, count: int) -> None:
        conn = self.prefix.conn
        now = datetime.now(UTC)
        with conn.transaction(), conn.cursor().copy(self._copy) as copy:
            for n in range(start, start + count):
                copy.write_row((self.ids[n], NOOP_KIND, _payload(n), 1, "pending", now, now))

    def close(self) -> None:
        self.prefix.close()


def drain(url: str, count: int, limit: int) -> float:
    """The raw claim+complete loop on a fresh minimal table; jobs/s."""
    queue = RawQueue(url)
    try:
        return queue.drain(count, limit)
    finally:
        queue.close()


def drain_threads(url: str, count: int, limit: int, threads: int) -> float:
    """The raw claim+complete loop run by ``threads`` threads, one connection each, on one
    fresh minimal table; jobs/s over the span of ``finished_at`` (as ``drain``).

    The ceiling for several worker processes: each thread is a claimer with its
    own session, contending on the same index and rows as venturi's workers do.
    """
    queue = RawQueue(url)
    try:
        queue.conn.execute(queue.sql("TRUNCATE {t}"))
        for start in range(0, count, 5_000):
            queue.copy_batch(start, min(5_000, count - start))
        queue.conn.execute(queue.sql("ANALYZE {t}"))
        claim, complete = queue.sql(_CLAIM), queue.sql(_COMPLETE)
        failures: list[BaseException] = []
        ready = threading.Barrier(threads)

        def loop() -> None:
            try:
                with connect(url) as conn:
                    ready.wait(timeout=60)
                    while rows := conn.execute(claim, (limit,)).fetchall():
                        conn.execute(complete, ([row[0] for row in rows],))
            except BaseException as exc:  # reported below, so the figure is never silently short
                failures.append(exc)

        workers = [threading.Thread(target=loop, name=f"raw-claimer-{n}") for n in range(threads)]
        for thread in workers:
            thread.start()
        for thread in workers:
            thread.join(timeout=600)
        if failures:
            raise failures[0]
        first, last, done = queue.conn.execute(
            queue.sql("SELECT min(finished_at), max(finished_at), count(*) FROM {t}")
        ).fetchone() or (None, None, 0)
        if done != count:
            raise RuntimeError(f"raw threaded drain completed {done} of {count}")
        return count / (last - first).total_seconds()
    finally:
        queue.close()
