"""The Durable role on PostgreSQL: steps recorded fenced on the claim, events sent (ADR 0137).

A step is one statement (``record_step``: the fence and the insert together),
a run's read of its steps and events one more (``load_durable``), an event one
(``send_event``, wake-up included), on a pooled session or inside the caller's
transaction.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import psycopg

from venturi.durable import DurableState, NewDurableStep, RecordedStep, SentEvent, StepKind
from venturi.errors import (
    EventAlreadySent,
    InvalidArgument,
    InvalidState,
    JobFinished,
    JobNotFound,
)
from venturi.postgres.driver_errors import translated_errors
from venturi.postgres.sessions import AsyncConnection, Connection
from venturi.postgres.store import Store, job_row
from venturi.types import Claim, JobRow

__all__ = ["DurableVerbs"]


class DurableVerbs(Store):
    """``Durable``'s verbs (venturi/backend/)."""

    def load_steps(self, job_id: str) -> DurableState:
        rows = self._run_bounded(lambda conn: self._queries.load_durable.many(conn, id=job_id))
        steps: list[RecordedStep] = []
        events: list[SentEvent] = []
        now = None
        for row in rows:
            kind = row["kind"]
            if kind == "now":
                now = row["at"]
            elif kind == "event":
                events.append(SentEvent(row["name"], row["value"], row["at"]))
            else:
                steps.append(_recorded(row, at="at", value="value"))
        assert now is not None  # the statement's last row is always there
        return DurableState(tuple(steps), tuple(events), now)

    def record_step(self, claim: Claim, step: NewDurableStep) -> RecordedStep | None:
        row = self._run_bounded(
            lambda conn: self._queries.record_step.one(
                conn,
                id=claim.job_id,
                claimed_by=claim.claimed_by,
                run_count=claim.run_count,
                kind=step.kind.value,
                name=step.name,
                result=step.result,
                wake_after=step.wake_after,
            )
        )
        return None if row is None else _recorded(row, at="recorded_at", value="result")

    def send_event(
        self, job_id: str, name: str, payload: str, *, connection: object | None = None
    ) -> None:
        params = {"id": job_id, "name": name, "payload": payload, "channel": self._channel}
        if connection is None:
            row = self._run(lambda conn: self._queries.send_event.one(conn, **params))
        else:
            with self._send_transaction(connection) as conn:
                row = self._queries.send_event.one(conn, **params)
        _check_sent(job_id, name, row)

    async def asend_event(
        self, job_id: str, name: str, payload: str, *, connection: object | None = None
    ) -> None:
        params = {"id": job_id, "name": name, "payload": payload, "channel": self._channel}
        async with self._asend_transaction(connection) as conn:
            row = await self._queries.send_event.aone(conn, **params)
        _check_sent(job_id, name, row)

    def retry_job_from_start(self, job_id: str) -> JobRow:
        with self._connection() as conn, conn.transaction():
            # The operator's retry under its row lock, then the steps, in one transaction.
            current = self._queries.lock_job.one(conn, id=job_id)
            if current is None:
                raise JobNotFound(job_id)
            self._queries.reset_steps.exec(conn, id=job_id)
            row = self._queries.retry_job.one(conn, id=job_id)
            if row is None:
                raise InvalidState(job_id, current["status"], "retry", "dead")
            if row["workflow_id"] is not None:
                self._queries.resume_dependants.many(conn, ids=[job_id])
            self._queries.notify_wakeup.exec(conn, channel=self._channel)
            return job_row(row)

    @contextmanager
    def _send_transaction(self, connection: object) -> Iterator[Connection]:
        """A savepoint (or transaction) on the caller's connection: the event exists
        exactly when the caller commits."""
        if not isinstance(connection, psycopg.Connection):
            raise _wrong_handle(connection, "send", psycopg.Connection)
        with translated_errors(self._prefix):
            if _is_outside_transaction(connection):
                self._queries.ping.one(connection)
            with connection.transaction():
                yield connection

    @asynccontextmanager
    async def _asend_transaction(self, connection: object | None) -> AsyncIterator[AsyncConnection]:
        if connection is None:
            with translated_errors(self._prefix):
                async with self._async_pool.connection() as conn:
                    yield conn
            return
        if not isinstance(connection, psycopg.AsyncConnection):
            raise _wrong_handle(connection, "asend", psycopg.AsyncConnection)
        with translated_errors(self._prefix):
            if _is_outside_transaction(connection):
                await self._queries.ping.aone(connection)
            async with connection.transaction():
                yield connection


def _recorded(row: Mapping[str, Any], *, at: str, value: str) -> RecordedStep:
    return RecordedStep(
        kind=StepKind(row["kind"]),
        name=row["name"],
        run_no=row["run_no"],
        recorded_at=row[at],
        result=row[value],
        wake_at=row["wake_at"],
    )


def _check_sent(job_id: str, name: str, row: Mapping[str, Any] | None) -> None:
    """The refusals of ``send_event``, from the row its statement returns."""
    assert row is not None  # the statement always returns its one row
    status = row["status"]
    if status is None:
        raise JobNotFound(job_id)
    if status in ("completed", "dead"):
        raise JobFinished(job_id, status)
    if not row["is_sent"]:
        raise EventAlreadySent(job_id, name)


def _is_outside_transaction(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """As in enqueue.py: an idle non-autocommit handle is given a query first, so the
    send is a savepoint inside the caller's implicit transaction, not a commit."""
    idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    return idle and not conn.autocommit


def _wrong_handle(connection: object, verb: str, expected: type) -> InvalidArgument:
    return InvalidArgument(
        f"{verb}'s connection= takes a {expected.__module__}.{expected.__name__}, "
        f"got {type(connection).__module__}.{type(connection).__name__}"
    )
