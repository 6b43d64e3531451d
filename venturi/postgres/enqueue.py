"""The Enqueue role on PostgreSQL: inserts, dedup merges, and beat's reads by dedup key.

Inserts of one job, a batch or a large batch (COPY), with or without trace
headers, sync and async, on a pooled session or in the caller's transaction.

The row building, the dedup lock order and the merge decision are shared by
``enqueue`` and ``aenqueue`` (module functions below the class), so both paths
write the same rows with the same statements.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import fields
from datetime import datetime, timedelta
from functools import partial
from operator import attrgetter
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg

from venturi.errors import InvalidArgument
from venturi.postgres.driver_errors import reraise_translated, translated_errors
from venturi.postgres.queries import Query
from venturi.postgres.sessions import AsyncConnection, Connection
from venturi.postgres.store import Store, job_row
from venturi.refs import JobRef
from venturi.types import JobRow, MergeAction, NewJob, Priority

if TYPE_CHECKING:
    from venturi.job_template import JobTemplate

__all__ = ["COPY_THRESHOLD", "EnqueueVerbs"]

C = TypeVar("C", psycopg.Connection[Any], psycopg.AsyncConnection[Any])

#: Batches at least this large go through COPY instead of the one-statement insert.
COPY_THRESHOLD = 256


class EnqueueVerbs(Store):
    """``Enqueue``'s verbs (venturi/backend/)."""

    def enqueue(self, jobs: Sequence[NewJob], *, connection: object | None = None) -> list[JobRef]:
        if not jobs:
            return []
        if connection is None and len(jobs) == 1 and _is_immediate(jobs[0]):
            job = jobs[0]
            self._enqueue_now(job.id, job.kind, job.payload, job.priority)
            return [JobRef(job.id)]
        plain, deduplicated = _split_for_enqueue(jobs, self._dedup_lock_name)
        if not deduplicated and connection is None:
            # The common case: one autocommit statement, insert and wake-up together.
            self._run(lambda conn: self._insert(conn, plain))
            return [JobRef(job.id) for job in jobs]
        refs: dict[str, JobRef] = {}
        with self._transaction(connection) as conn:
            if plain:
                self._insert(conn, plain)
            for job in deduplicated:
                refs[job.id] = self._enqueue_deduplicated(conn, job)
            if not plain:
                self._queries.notify_wakeup.exec(conn, channel=self._channel)
        return [refs.get(job.id) or JobRef(job.id) for job in jobs]

    def enqueue_alike(
        self,
        template: JobTemplate,
        ids: Sequence[str],
        payloads: Sequence[str],
        *,
        connection: object | None = None,
    ) -> None:
        if not ids:
            return
        if connection is None and len(ids) == 1 and template.immediate:
            self._enqueue_now(ids[0], template.kind, payloads[0], template.priority)
        elif len(ids) < COPY_THRESHOLD:
            self.enqueue(template.jobs(ids, payloads), connection=connection)
        elif connection is None:
            self._run(lambda conn: self._copy(conn, partial(_alike_rows, template, ids, payloads)))
        else:
            with self._transaction(connection) as conn:
                self._copy(conn, partial(_alike_rows, template, ids, payloads))

    def _enqueue_now(self, job_id: str, kind: str, payload: str, priority: Priority) -> None:
        """.delay(): one autocommit statement on the hot session's cursor, insert and
        wake-up together (``_is_immediate`` jobs only)."""
        self._execute(
            self._queries.enqueue_job_now, self._immediate_params(job_id, kind, payload, priority)
        )

    @contextmanager
    def _transaction(self, connection: object | None = None) -> Iterator[Connection]:
        """A transaction on a pooled connection, or a savepoint/transaction on the caller's."""
        if connection is None:
            with self._connection() as conn, conn.transaction():
                yield conn
            return
        conn = _callers_connection(connection, psycopg.Connection, "enqueue")
        with translated_errors(self._prefix):
            if _is_outside_transaction(conn):
                self._queries.ping.one(conn)
            with conn.transaction():
                yield conn

    def _insert(self, conn: Connection, jobs: Sequence[NewJob]) -> None:
        if len(jobs) >= COPY_THRESHOLD:
            self._copy(conn, partial(_copy_rows, jobs), traced=_has_headers(jobs))
        elif len(jobs) == 1:
            if _is_immediate(jobs[0]):
                self._queries.enqueue_job_now.exec(conn, **self._job_now_params(jobs[0]))
            elif jobs[0].headers is None:
                self._queries.enqueue_job.exec(conn, **self._one_job_params(jobs[0]))
            else:
                self._queries.enqueue_job_with_headers.exec(conn, **self._traced_params(jobs))
        elif not _has_headers(jobs):
            self._queries.enqueue_jobs.exec(conn, **self._jobs_params(jobs))
        else:
            self._queries.enqueue_jobs_with_headers.exec(conn, **self._traced_params(jobs))

    def _immediate_params(
        self, job_id: str, kind: str, payload: str, priority: Priority
    ) -> dict[str, Any]:
        """``enqueue_job_now``'s parameters (``_is_immediate`` jobs only)."""
        return {
            "id": job_id,
            "kind": kind,
            "payload": payload,
            "priority": int(priority),
            "channel": self._channel,
        }

    def _job_now_params(self, job: NewJob) -> dict[str, Any]:
        return self._immediate_params(job.id, job.kind, job.payload, job.priority)

    def _one_job_params(self, job: NewJob) -> dict[str, Any]:
        return {
            "id": job.id,
            "kind": job.kind,
            "payload": job.payload,
            "priority": int(job.priority),
            "delay": job.delay,
            "eta": job.eta,
            "dedup_key": job.dedup_key,
            "fair_key": job.fair_key,
            "expires_in": job.expires_in,
            "expires_at": job.expires_at,
            "channel": self._channel,
        }

    def _traced_params(self, jobs: Sequence[NewJob]) -> dict[str, Any]:
        """The ``*_with_headers`` statements' parameters (ADR 0127)."""
        if len(jobs) == 1:
            return {**self._one_job_params(jobs[0]), "headers": _headers_json(jobs[0])}
        return {**self._jobs_params(jobs), "headers": [_headers_json(j) for j in jobs]}

    def _jobs_params(self, jobs: Sequence[NewJob]) -> dict[str, Any]:
        return {
            "ids": [j.id for j in jobs],
            "kinds": [j.kind for j in jobs],
            "payloads": [j.payload for j in jobs],
            "priorities": [int(j.priority) for j in jobs],
            "delays": [j.delay for j in jobs],
            "etas": [j.eta for j in jobs],
            "dedup_keys": [j.dedup_key for j in jobs],
            "fair_keys": [j.fair_key for j in jobs],
            "expires_ins": [j.expires_in for j in jobs],
            "expires_ats": [j.expires_at for j in jobs],
            "channel": self._channel,
        }

    def _copy(self, conn: Connection, rows: CopyRows, *, traced: bool = False) -> None:
        """COPY a large batch, its ``rows`` made from the database clock's now (see
        copy_jobs); ``traced``: with the headers column."""
        with conn.transaction():
            row = self._queries.database_now.one(conn)
            assert row is not None
            statement, types = self._copy_statement(traced)
            with conn.cursor() as cursor, statement.copy(cursor) as copy:
                copy.set_types(types)
                for values in rows(row["now"]):
                    copy.write_row(values)
            self._queries.notify_wakeup.exec(conn, channel=self._channel)

    def _copy_statement(self, traced: bool) -> tuple[Query, list[str]]:
        """``copy_jobs``, or its form with the headers column (``traced``: some job has
        headers), with its column types (a binary COPY sends each value as its column's
        type)."""
        if traced:
            return self._queries.copy_jobs_with_headers, _COPY_TYPES_WITH_HEADERS
        return self._queries.copy_jobs, _COPY_TYPES

    def _dedup_lock_name(self, job: NewJob) -> str:
        # Length-prefixed so (kind, key) pairs can never collide by concatenation;
        # sorted by it so two batches lock their keys in one order (no deadlock).
        return self._prefix.lock_name(f"dedup:{len(job.kind)}:{job.kind}{job.dedup_key}")

    def _enqueue_deduplicated(self, conn: Connection, job: NewJob) -> JobRef:
        self._queries.lock_dedup_key.exec(conn, lock_name=self._dedup_lock_name(job))
        sibling = self._queries.find_dedup_sibling.one(conn, kind=job.kind, dedup_key=job.dedup_key)
        merge = _merge_params(job, sibling)
        if sibling is None or merge is None:
            self._insert(conn, [job])
            return JobRef(job.id)
        self._queries.merge_into_sibling.exec(conn, **merge)
        return JobRef(sibling["id"], merged=True)

    async def aenqueue(
        self, jobs: Sequence[NewJob], *, connection: object | None = None
    ) -> list[JobRef]:
        """``enqueue`` on this loop's async pool, or inside a ``psycopg.AsyncConnection``'s
        transaction; the same statements, lock order and merge decisions."""
        if not jobs:
            return []
        if connection is None and len(jobs) == 1 and _is_immediate(jobs[0]):
            job = jobs[0]
            await self._aenqueue_now(job.id, job.kind, job.payload, job.priority)
            return [JobRef(job.id)]
        plain, deduplicated = _split_for_enqueue(jobs, self._dedup_lock_name)
        if not deduplicated and connection is None:
            try:
                await self._async_pool.run(lambda conn: self._ainsert(conn, plain))
            except psycopg.Error as exc:
                reraise_translated(exc, self._prefix)
            return [JobRef(job.id) for job in jobs]
        refs: dict[str, JobRef] = {}
        async with self._atransaction(connection) as conn:
            if plain:
                await self._ainsert(conn, plain)
            for job in deduplicated:
                refs[job.id] = await self._aenqueue_deduplicated(conn, job)
            if not plain:
                await self._queries.notify_wakeup.aexec(conn, channel=self._channel)
        return [refs.get(job.id) or JobRef(job.id) for job in jobs]

    async def aenqueue_alike(
        self,
        template: JobTemplate,
        ids: Sequence[str],
        payloads: Sequence[str],
        *,
        connection: object | None = None,
    ) -> None:
        if not ids:
            return
        if connection is None and len(ids) == 1 and template.immediate:
            await self._aenqueue_now(ids[0], template.kind, payloads[0], template.priority)
        elif len(ids) < COPY_THRESHOLD:
            await self.aenqueue(template.jobs(ids, payloads), connection=connection)
        elif connection is None:
            rows = partial(_alike_rows, template, ids, payloads)
            try:
                await self._async_pool.run(lambda conn: self._acopy(conn, rows))
            except psycopg.Error as exc:
                reraise_translated(exc, self._prefix)
        else:
            async with self._atransaction(connection) as conn:
                await self._acopy(conn, partial(_alike_rows, template, ids, payloads))

    async def _aenqueue_now(self, job_id: str, kind: str, payload: str, priority: Priority) -> None:
        params = self._immediate_params(job_id, kind, payload, priority)
        try:
            await self._async_pool.execute(self._queries.enqueue_job_now, params)
        except psycopg.Error as exc:
            reraise_translated(exc, self._prefix)

    @asynccontextmanager
    async def _aconnection(self) -> AsyncIterator[AsyncConnection]:
        with translated_errors(self._prefix):
            async with self._async_pool.connection() as conn:
                yield conn

    @asynccontextmanager
    async def _atransaction(self, connection: object | None) -> AsyncIterator[AsyncConnection]:
        if connection is None:
            async with self._aconnection() as conn, conn.transaction():
                yield conn
            return
        conn = _callers_connection(connection, psycopg.AsyncConnection, "aenqueue")
        with translated_errors(self._prefix):
            if _is_outside_transaction(conn):
                await self._queries.ping.aone(conn)
            async with conn.transaction():
                yield conn

    async def _ainsert(self, conn: AsyncConnection, jobs: Sequence[NewJob]) -> None:
        if len(jobs) >= COPY_THRESHOLD:
            await self._acopy(conn, partial(_copy_rows, jobs), traced=_has_headers(jobs))
        elif len(jobs) == 1:
            if _is_immediate(jobs[0]):
                await self._queries.enqueue_job_now.aexec(conn, **self._job_now_params(jobs[0]))
            elif jobs[0].headers is None:
                await self._queries.enqueue_job.aexec(conn, **self._one_job_params(jobs[0]))
            else:
                await self._queries.enqueue_job_with_headers.aexec(
                    conn, **self._traced_params(jobs)
                )
        elif not _has_headers(jobs):
            await self._queries.enqueue_jobs.aexec(conn, **self._jobs_params(jobs))
        else:
            await self._queries.enqueue_jobs_with_headers.aexec(conn, **self._traced_params(jobs))

    async def _acopy(self, conn: AsyncConnection, rows: CopyRows, *, traced: bool = False) -> None:
        async with conn.transaction():
            row = await self._queries.database_now.aone(conn)
            assert row is not None
            statement, types = self._copy_statement(traced)
            async with conn.cursor() as cursor, statement.acopy(cursor) as copy:
                copy.set_types(types)
                for values in rows(row["now"]):
                    await copy.write_row(values)
            await self._queries.notify_wakeup.aexec(conn, channel=self._channel)

    async def _aenqueue_deduplicated(self, conn: AsyncConnection, job: NewJob) -> JobRef:
        await self._queries.lock_dedup_key.aexec(conn, lock_name=self._dedup_lock_name(job))
        sibling = await self._queries.find_dedup_sibling.aone(
            conn, kind=job.kind, dedup_key=job.dedup_key
        )
        merge = _merge_params(job, sibling)
        if sibling is None or merge is None:
            await self._ainsert(conn, [job])
            return JobRef(job.id)
        await self._queries.merge_into_sibling.aexec(conn, **merge)
        return JobRef(sibling["id"], merged=True)

    def pending_with_dedup_prefix(self, dedup_prefix: str) -> list[JobRow]:
        rows = self._run(
            lambda conn: self._queries.pending_with_dedup_prefix.many(
                conn, dedup_prefix=dedup_prefix
            )
        )
        return [job_row(r) for r in rows]

    def latest_with_dedup_key(self, kind: str, dedup_key: str) -> JobRow | None:
        row = self._run(
            lambda conn: self._queries.latest_with_dedup_key.one(
                conn, kind=kind, dedup_key=dedup_key
            )
        )
        return job_row(row) if row is not None else None


#: Every ``NewJob`` field but the four ``enqueue_job_now`` writes (and ``merge``, read only
#: with a dedup key), so a field added later counts as "not immediate" until that
#: statement writes it.
_IMMEDIATE_FIELDS = tuple(
    f.name for f in fields(NewJob) if f.name not in ("id", "kind", "payload", "priority", "merge")
)
_immediate_values = attrgetter(*_IMMEDIATE_FIELDS)
_IMMEDIATE_DEFAULTS = tuple(f.default for f in fields(NewJob) if f.name in _IMMEDIATE_FIELDS)


def _is_immediate(job: NewJob) -> bool:
    """Whether ``job`` is the common call: every field ``enqueue_job_now`` leaves out at its
    default (no delay, eta, dedup key, headers, fair key or expiry). One C-level read of
    them all, compared with the defaults as one tuple."""
    return bool(_immediate_values(job) == _IMMEDIATE_DEFAULTS)


def _split_for_enqueue(
    jobs: Sequence[NewJob], lock_name: Callable[[NewJob], str]
) -> tuple[list[NewJob], list[NewJob]]:
    """Plain jobs in input order, and deduplicated ones in dedup-lock order (ADR 0103)."""
    plain = [job for job in jobs if job.dedup_key is None]
    deduplicated = sorted((job for job in jobs if job.dedup_key is not None), key=lock_name)
    return plain, deduplicated


_MICROSECOND = timedelta(microseconds=1)


#: A batch's COPY rows, made from the database clock's now (``_copy_rows``, ``_alike_rows``).
CopyRows = Callable[[datetime], Iterable[tuple[Any, ...]]]


def _copy_rows(jobs: Sequence[NewJob], start: datetime) -> Iterable[tuple[Any, ...]]:
    """COPY rows: created_at one microsecond apart from the database clock (see copy_jobs);
    with a headers column when any job has headers (``copy_jobs_with_headers``); the fair
    key, then the expiry, last (ADR 0129, 0135). The JSON columns go as jsonb's binary
    form (``_JSONB_VERSION``)."""
    traced = _has_headers(jobs)
    created_at = start - _MICROSECOND
    for job in jobs:
        created_at += _MICROSECOND
        if job.eta is not None:
            visible_at = job.eta
        else:
            visible_at = created_at + job.delay if job.delay else created_at
        expires_at = job.expires_at
        if expires_at is None and job.expires_in is not None:
            expires_at = created_at + job.expires_in
        row = (
            job.id,
            job.kind,
            _JSONB_VERSION + job.payload,
            int(job.priority),
            "pending",
            created_at,
            visible_at,
            job.dedup_key,
        )
        tail = (job.fair_key, expires_at)
        if traced:
            headers = _headers_json(job)
            yield (*row, None if headers is None else _JSONB_VERSION + headers, *tail)
        else:
            yield (*row, *tail)


def _alike_rows(
    template: JobTemplate, ids: Sequence[str], payloads: Sequence[str], start: datetime
) -> Iterable[tuple[Any, ...]]:
    """``_copy_rows`` of ``template.jobs(ids, payloads)``, without making those jobs."""
    kind, priority, delay, expires_in = (
        template.kind,
        int(template.priority),
        template.delay,
        template.expires_in,
    )
    created_at = start - _MICROSECOND
    for job_id, payload in zip(ids, payloads, strict=True):
        created_at += _MICROSECOND
        visible_at = created_at + delay if delay else created_at
        expires_at = None if expires_in is None else created_at + expires_in
        yield (
            job_id,
            kind,
            _JSONB_VERSION + payload,
            priority,
            "pending",
            created_at,
            visible_at,
            None,
            None,
            expires_at,
        )


def _merge_params(job: NewJob, sibling: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``merge_into_sibling``'s parameters, or None when ``job`` is inserted as a row of its
    own (no sibling, no resolver, or ``independent``; ADR 10). Asks the resolver, which may
    raise: the caller's transaction then writes nothing."""
    if sibling is None or job.merge is None:
        return None
    decision = job.merge(sibling["payload"])
    if decision.action is MergeAction.INDEPENDENT:
        return None
    return {
        "id": sibling["id"],
        "payload": decision.payload if decision.action is not MergeAction.KEEP else None,
        "priority": int(job.priority),
        "expires_in": job.expires_in,
        "expires_at": job.expires_at,
        "debounce": job.debounce,
        "note": f"{decision.action.value}: absorbed {job.id}",
    }


def _callers_connection(connection: object, expected: type[C], verb: str) -> C:
    """The caller's ``connection=``, refused unless it is the handle ``verb`` runs on."""
    if not isinstance(connection, expected):
        other = "aenqueue (aapply_async)" if verb == "enqueue" else "enqueue (apply_async)"
        raise InvalidArgument(
            f"{verb}'s connection= takes a {expected.__module__}.{expected.__name__}, "
            f"got {type(connection).__module__}.{type(connection).__name__}"
            + (f"; that handle belongs to {other}" if _is_other_handle(connection) else "")
        )
    return connection


def _is_other_handle(connection: object) -> bool:
    return isinstance(connection, psycopg.Connection | psycopg.AsyncConnection)


def _is_outside_transaction(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> bool:
    """True when psycopg's ``transaction()`` would BEGIN and COMMIT on its own, publishing
    the job before the caller commits: the caller then gets a query first (opening its
    implicit transaction), so the enqueue is a savepoint inside it."""
    idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    return idle and not conn.autocommit


def _has_headers(jobs: Sequence[NewJob]) -> bool:
    """Whether an instrumented enqueue gave any of ``jobs`` trace headers (ADR 0127)."""
    return any(job.headers is not None for job in jobs)


def _headers_json(job: NewJob) -> str | None:
    return None if job.headers is None else json.dumps(dict(job.headers))


#: jsonb's binary form is this version byte and the JSON text (PostgreSQL's jsonb_recv).
#: The COPY sends the payload and headers so, as text prefixed with it and declared
#: ``text`` (whose binary form is the UTF-8 bytes as they are): psycopg then dumps them
#: in C, where its jsonb dumper, and its bytea dumper too, are Python code called once
#: a row (bench/JOURNAL.md, sections 22 and 23). The server reads the field with the
#: column's own receive function, jsonb's.
_JSONB_VERSION = "\x01"

#: The column types of ``copy_jobs``, in its column order (``_copy_rows``).
_COPY_TYPES = [
    "text",
    "text",
    "text",
    "int2",
    "text",
    "timestamptz",
    "timestamptz",
    "text",
    "text",
    "timestamptz",
]
#: ``copy_jobs_with_headers``: the headers before the fair key and the expiry.
_COPY_TYPES_WITH_HEADERS = [*_COPY_TYPES[:-2], "text", *_COPY_TYPES[-2:]]
