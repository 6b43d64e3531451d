"""What every role's verbs share: a prefix's pools and statements, and how a verb runs on them.

``Store`` is the base of the role modules (``enqueue.py``, ``claims.py``, ...);
``PostgresBackend`` (``backend.py``) composes them and sets the attributes
declared here when it is built. A verb runs its statements through ``_run``
(a pooled session, driver errors translated) or, for the worker's statements,
``_run_bounded`` (the same, with the reply watchdog's deadline, ADR 0123).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

import psycopg

from venturi.naming import Prefix
from venturi.postgres.driver_errors import reraise_translated, translated_errors
from venturi.postgres.pools import AsyncPool, Pool
from venturi.postgres.queries import Queries, Query
from venturi.postgres.sessions import Connection
from venturi.postgres.watchdog import ReplyWatchdog
from venturi.types import JobRow, Priority, Status

__all__ = ["RESULT_CHANNEL", "Store", "job_row"]

T = TypeVar("T")

#: Per-job wake-up channels of result waiters (ADR 0124): this text and the job id.
#: Not derived from the prefix (a long prefix would not fit in a channel name);
#: ULIDs do not repeat across prefixes, and a stray wake-up only costs a read.
RESULT_CHANNEL = "venturi_result_"


class Store:
    """The state and the session helpers every role's verbs use."""

    #: ``url`` is a transaction-mode pooler (``PostgresBackend``'s option).
    is_transaction_pooled: bool
    _prefix: Prefix
    #: The prefix's wake-up channel (``Prefix.channel``), made once.
    _channel: str
    _url: str
    _direct_url: str | None
    _connect_timeout: float
    _queries: Queries
    _watchdog: ReplyWatchdog
    #: Enqueues, outcomes, leases and every other pooled statement.
    _pool: Pool
    #: Claims, on sessions that plan them once (``sessions.configure_claim_session``).
    _claim_pool: Pool
    #: Async enqueue's sessions: one pool per event loop, none until first used.
    _async_pool: AsyncPool

    @property
    def _session_url(self) -> str | None:
        """Where a connection that needs a session of its own goes; None: nowhere."""
        if self._direct_url is not None:
            return self._direct_url
        return None if self.is_transaction_pooled else self._url

    @property
    def prefix(self) -> str:
        return self._prefix.value

    @contextmanager
    def _connection(self, pool: Pool | None = None) -> Iterator[Connection]:
        with (pool or self._pool).connection() as conn, translated_errors(self._prefix):
            yield conn

    def _run(self, action: Callable[[Connection], T], pool: Pool | None = None) -> T:
        try:
            return (pool or self._pool).run(action)
        except psycopg.Error as exc:
            reraise_translated(exc, self._prefix)

    def _execute(self, query: Query, params: Mapping[str, Any]) -> None:
        """``_run`` of one statement that returns no rows, on the hot session's reused
        cursor (``Pool.execute``)."""
        try:
            self._pool.execute(query, params)
        except psycopg.Error as exc:
            reraise_translated(exc, self._prefix)

    def _run_bounded(self, action: Callable[[Connection], T], pool: Pool | None = None) -> T:
        """``_run`` for the worker's statements: at most ``reply_timeout`` for the reply."""
        with self._connection(pool) as conn, self._watchdog.bounded(conn):
            return action(conn)

    def _end_dependants(self, conn: Connection, step_ids: list[str]) -> None:
        """End dead the waiting descendants of ``step_ids`` (ended dead in ``conn``'s
        transaction); nothing to do, and no statement, without any. Recovery and the
        operator's cancels end steps outside a finish (ADR 0125)."""
        if step_ids:
            self._queries.end_dependants.many(conn, ids=step_ids, result_channel=RESULT_CHANNEL)


def job_row(row: Mapping[str, Any]) -> JobRow:
    """A ``_jobs`` row as venturi's ``JobRow`` (operator reads, beat's lookups)."""
    return JobRow(
        id=row["id"],
        kind=row["kind"],
        payload=row["payload"],
        priority=Priority(row["priority"]),
        status=Status(row["status"]),
        created_at=row["created_at"],
        visible_at=row["visible_at"],
        claim_expires_at=row["claim_expires_at"],
        claimed_by=row["claimed_by"],
        finished_at=row["finished_at"],
        run_count=row["run_count"],
        failure_count=row["failure_count"],
        carry=row["carry"],
        dedup_key=row["dedup_key"],
        cancel_requested_at=row["cancel_requested_at"],
        expires_at=row["expires_at"],
    )
