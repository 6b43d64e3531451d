"""PostgresBackend: the Backend protocol as named queries, and the mapping of their rows.

Sessions, pools and driver-error translation live in ``connections.py``; this
module holds the verbs (which statements each runs, in which transaction) and
turns rows into venturi's types.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import (
    AsyncIterator,
    Callable,
    Collection,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager, contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar

import orjson
import psycopg
from psycopg.types.json import set_json_dumps

from venturi.backend import CAP_RECHECK, Listener
from venturi.errors import (
    BackendUnavailable,
    ConfigurationError,
    InvalidArgument,
    InvalidState,
    JobNotFound,
    SchemaMissing,
)
from venturi.naming import DEFAULT_PREFIX, Prefix
from venturi.postgres.connections import (
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_REPLY_TIMEOUT,
    AsyncConnection,
    AsyncPool,
    Connection,
    PollingListener,
    Pool,
    PostgresLeadership,
    PostgresListener,
    ReplyWatchdog,
    configure_claim_session,
    connect,
    leader_of_session,
    leader_session_name,
    reraise_translated,
    translated_errors,
    with_keepalives,
)
from venturi.postgres.migrator import Migrator
from venturi.postgres.queries import Queries, Query
from venturi.results import DEFAULT_RESULT_MAX_BYTES, bounded
from venturi.types import (
    AppliedMigration,
    Claim,
    ClaimedJob,
    ClaimFloor,
    Cursor,
    Finished,
    JobDetail,
    JobRef,
    JobRow,
    JobSummary,
    JournalEntry,
    KindLimits,
    KindStats,
    Leader,
    LimitedClaim,
    MergeAction,
    MinuteCounts,
    NewJob,
    NewWorkflow,
    OutcomeKind,
    Page,
    Priority,
    Renewal,
    Stats,
    Status,
    StepState,
    StoredResult,
    SummaryPage,
    Throughput,
    WorkerInfo,
    WorkerRegistration,
    Workflow,
    WorkflowStep,
    WorkflowSummary,
)

T = TypeVar("T")
C = TypeVar("C", psycopg.Connection[Any], psycopg.AsyncConnection[Any])

#: Batches at least this large go through COPY instead of the one-statement insert.
COPY_THRESHOLD = 256


#: Per-job wake-up channels of result waiters (ADR 0124): this text and the job id.
#: Not derived from the prefix (a long prefix would not fit in a channel name);
#: ULIDs do not repeat across prefixes, and a stray wake-up only costs a read.
RESULT_CHANNEL = "venturi_result_"
_MICROSECOND = timedelta(microseconds=1)


class PostgresBackend:
    """The default storage adapter.

    Options:
        url: a libpq connection string or URL.
        prefix: table-name prefix, validated before anything connects (ADR 6).
        pool_size: maximum pooled connections (a worker uses one for outcomes
            and one for leases, plus the enqueues of the process). Claims have
            a pool of their own, opened on the first claim, whose sessions plan
            claims once (``connections.configure_claim_session``).
        connect_timeout: seconds to wait for a connection before
            ``BackendUnavailable``.
        direct_url: the server itself, when ``url`` goes through a pooler:
            LISTEN, leadership and migrations need a session and use it (ADR 0123).
        transaction_pooling: ``url`` is a transaction-mode pooler (PgBouncer's
            ``pool_mode = transaction``): pooled sessions prepare nothing and
            set nothing. Default: on exactly when ``direct_url`` is given. On
            without a direct URL, workers poll instead of listening, leadership
            holds a transaction open, and ``migrate`` is refused.
        reply_timeout: seconds a worker statement (claim, renewal, outcome,
            recovery, leadership check) waits for its reply before its session is
            abandoned with ``BackendUnavailable`` (silent partitions, ADR 0123).

    Every URL gets TCP keepalives unless it sets them (``connections.DEFAULT_KEEPALIVES``).

    ``aenqueue`` runs the same statements as ``enqueue`` on an asyncio pool of
    up to ``pool_size`` sessions per event loop (``connections.AsyncPool``),
    opened on first use; the row building, the dedup lock order and the merge
    decision are shared by both paths (module functions below the class).
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        pool_size: int = 10,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        direct_url: str | None = None,
        transaction_pooling: bool | None = None,
        reply_timeout: float = DEFAULT_REPLY_TIMEOUT,
        result_max_bytes: int = DEFAULT_RESULT_MAX_BYTES,
    ) -> None:
        if isinstance(result_max_bytes, bool) or not isinstance(result_max_bytes, int):
            raise InvalidArgument(f"result_max_bytes must be an int, got {result_max_bytes!r}")
        if result_max_bytes < 0:
            raise InvalidArgument(f"result_max_bytes must not be negative, got {result_max_bytes}")
        self._result_max_bytes = result_max_bytes
        self._prefix = Prefix.parse(prefix)
        if reply_timeout <= 0:
            raise ConfigurationError(f"reply_timeout must be positive, got {reply_timeout}")
        self._url = with_keepalives(url)
        self._direct_url = with_keepalives(direct_url) if direct_url is not None else None
        self.is_transaction_pooled = (
            direct_url is not None if transaction_pooling is None else transaction_pooling
        )
        self._connect_timeout = connect_timeout
        self._queries = Queries(self._prefix)
        self._watchdog = ReplyWatchdog(reply_timeout, name=f"venturi-{self._prefix.value}-replies")
        self._pool = Pool(
            self._url,
            name=f"venturi-{self._prefix.value}",
            max_size=pool_size,
            connect_timeout=connect_timeout,
            may_prepare=not self.is_transaction_pooled,
        )
        # Forced generic plans need a session to keep the setting and a prepared
        # statement to reuse the plan: behind a transaction-mode pooler there is
        # neither, and each claim is planned anew (docs/design/indexes.md).
        self._claim_pool = Pool(
            self._url,
            name=f"venturi-{self._prefix.value}-claim",
            max_size=2,
            connect_timeout=connect_timeout,
            configure=None if self.is_transaction_pooled else configure_claim_session,
            may_prepare=not self.is_transaction_pooled,
        )
        #: Async enqueue's sessions: one pool per event loop, none until first used.
        self._async_pool = AsyncPool(
            self._url,
            name=f"venturi-{self._prefix.value}-async",
            max_size=pool_size,
            connect_timeout=connect_timeout,
            may_prepare=not self.is_transaction_pooled,
        )

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

    def _run(self, action: Callable[[Connection], T], pool: Pool | None = None) -> T:
        try:
            return (pool or self._pool).run(action)
        except psycopg.Error as exc:
            reraise_translated(exc, self._prefix)

    def _run_bounded(self, action: Callable[[Connection], T], pool: Pool | None = None) -> T:
        """``_run`` for the worker's statements: at most ``reply_timeout`` for the reply."""
        with self._connection(pool) as conn, self._watchdog.bounded(conn):
            return action(conn)

    # -- schema ------------------------------------------------------------------

    def migrate(self) -> list[AppliedMigration]:
        url = self._session_url
        if url is None:
            raise ConfigurationError(
                "migrate holds a session advisory lock, which a transaction-mode pooler "
                "cannot keep: give the server's own URL as direct_url= "
                "(--direct-url, $VENTURI_DIRECT_DATABASE_URL)"
            )
        with (
            translated_errors(),
            connect(url, self._connect_timeout) as conn,
        ):
            return Migrator(self._prefix).migrate(conn)

    # -- enqueue -----------------------------------------------------------------

    def enqueue(self, jobs: Sequence[NewJob], *, connection: object | None = None) -> list[JobRef]:
        if not jobs:
            return []
        plain, deduplicated = _split_for_enqueue(jobs, self._dedup_lock_name)
        refs: dict[str, JobRef] = {}
        if not deduplicated and connection is None:
            # The common case: one autocommit statement, insert and wake-up together.
            self._run(lambda conn: self._insert(conn, plain))
        else:
            with self._transaction(connection) as conn:
                if plain:
                    self._insert(conn, plain)
                for job in deduplicated:
                    refs[job.id] = self._enqueue_deduplicated(conn, job)
                if not plain:
                    self._queries.notify_wakeup.exec(conn, channel=self._prefix.channel)
        return [refs.get(job.id, JobRef(job.id)) for job in jobs]

    def _insert(self, conn: Connection, jobs: Sequence[NewJob]) -> None:
        if len(jobs) >= COPY_THRESHOLD:
            self._copy(conn, jobs)
        elif len(jobs) == 1:
            if jobs[0].headers is None:
                self._queries.enqueue_job.exec(conn, **self._one_job_params(jobs[0]))
            else:
                self._queries.enqueue_job_with_headers.exec(conn, **self._traced_params(jobs))
        elif not _has_headers(jobs):
            self._queries.enqueue_jobs.exec(conn, **self._jobs_params(jobs))
        else:
            self._queries.enqueue_jobs_with_headers.exec(conn, **self._traced_params(jobs))

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
            "channel": self._prefix.channel,
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
            "channel": self._prefix.channel,
        }

    def _copy(self, conn: Connection, jobs: Sequence[NewJob]) -> None:
        """COPY a large batch; created_at from the database clock (see copy_jobs)."""
        with conn.transaction():
            row = self._queries.database_now.one(conn)
            assert row is not None
            statement, types = self._copy_statement(jobs)
            with conn.cursor() as cursor:
                set_json_dumps(_encoded_json, cursor)
                with statement.copy(cursor) as copy:
                    copy.set_types(types)
                    for values in _copy_rows(jobs, row["now"]):
                        copy.write_row(values)
            self._queries.notify_wakeup.exec(conn, channel=self._prefix.channel)

    def _copy_statement(self, jobs: Sequence[NewJob]) -> tuple[Query, list[str]]:
        """``copy_jobs``, or its form with the headers column when any job has some,
        with its column types (a binary COPY sends each value as its column's type)."""
        if _has_headers(jobs):
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

    # -- worker verbs --------------------------------------------------------------

    def claim(
        self,
        *,
        kinds: Collection[str],
        limit: int,
        worker_id: str,
        lease: timedelta,
        horizon: timedelta = timedelta(0),
        floors: Mapping[str, ClaimFloor] | None = None,
    ) -> list[ClaimedJob]:
        if not kinds or limit <= 0:
            return []
        kinds = list(kinds)
        rows = self._run_bounded(
            lambda conn: self._claim_rows(
                conn,
                kinds,
                [limit] * len(kinds),
                limit=limit,
                worker_id=worker_id,
                lease=lease,
                horizon=horizon,
                floors=floors,
            ),
            self._claim_pool,
        )
        return _claimed_jobs(rows, worker_id)

    def _claim_rows(
        self,
        conn: Connection,
        kinds: list[str],
        kind_limits: list[int],
        *,
        limit: int,
        worker_id: str,
        lease: timedelta,
        horizon: timedelta,
        floors: Mapping[str, ClaimFloor] | None,
    ) -> list[dict[str, Any]]:
        return self._queries.claim_jobs.many(
            conn,
            kinds=claim_input(kinds, kind_limits, floors),
            limit=limit,
            worker_id=worker_id,
            lease=lease,
            horizon=horizon,
        )

    def finish(self, results: Sequence[Finished]) -> set[str]:
        """Plain jobs through ``finish_jobs`` (as before workflows); workflow steps, and
        any row it left alone (a lost claim, a step not flagged ``in_workflow``),
        through ``finish_jobs_in_workflows``, which hands their results on (ADR 0125)."""
        if not results:
            return set()
        steps = [r for r in results if r.in_workflow]
        plain = [r for r in results if not r.in_workflow]
        done: set[str] = set()
        if plain:
            done = self._finish(self._queries.finish_jobs, plain)
            steps += [r for r in plain if r.claim.job_id not in done]
        if steps:
            done |= self._finish(self._queries.finish_jobs_in_workflows, steps)
        return done

    def _finish(self, statement: Query, results: Sequence[Finished]) -> set[str]:
        params = {
            **finish_input(results, self._result_max_bytes),
            "result_channel": RESULT_CHANNEL,
        }
        if statement is self._queries.finish_jobs_in_workflows:
            params["channel"] = self._prefix.channel
        rows = self._run_bounded(lambda conn: statement.many(conn, **params))
        return {row["job_id"] for row in rows}

    def renew_leases(self, claims: Sequence[Claim], lease: timedelta) -> Renewal:
        if not claims:
            return Renewal()
        rows = self._run_bounded(
            lambda conn: self._queries.renew_leases.many(
                conn, lease=lease, **self._claim_arrays(claims)
            )
        )
        return Renewal(
            held=frozenset(row["id"] for row in rows),
            cancel_requested=frozenset(row["id"] for row in rows if row["is_cancel_requested"]),
        )

    def release(self, claims: Sequence[Claim]) -> int:
        if not claims:
            return 0
        rows = self._run_bounded(
            lambda conn: self._queries.release_jobs.many(
                conn, note="worker shutdown", **self._claim_arrays(claims)
            )
        )
        if rows:
            # Released rows are pending again: idle workers elsewhere claim them now,
            # not at their next poll (a stopping worker may hold a prefetch's worth).
            self._run_bounded(
                lambda conn: self._queries.notify_wakeup.exec(conn, channel=self._prefix.channel)
            )
        return len(rows)

    @staticmethod
    def _claim_arrays(claims: Sequence[Claim]) -> dict[str, list[Any]]:
        return {
            "ids": [c.job_id for c in claims],
            "claimed_by": [c.claimed_by for c in claims],
            "run_counts": [c.run_count for c in claims],
        }

    def recover_stale(
        self, *, max_failures: Mapping[str, int], default_max_failures: int, limit: int
    ) -> int:
        def recover(conn: Connection) -> int:
            # A transaction, so the dependants of a step recovered dead end with it.
            with conn.transaction():
                rows = self._queries.recover_stale.many(
                    conn,
                    kinds=list(max_failures),
                    max_failures=list(max_failures.values()),
                    default_max_failures=default_max_failures,
                    limit=limit,
                )
                self._end_dependants(conn, [r["job_id"] for r in rows if r["ends_step"]])
            return len(rows)

        return self._run_bounded(recover)

    def time_until_visible(self, kinds: Collection[str]) -> timedelta | None:
        if not kinds:
            return None
        row = self._run_bounded(
            lambda conn: self._queries.time_until_visible.one(conn, kinds=list(kinds))
        )
        return row["wait"] if row is not None else None

    def now(self) -> datetime:
        row = self._run(self._queries.database_now.one)
        assert row is not None
        now: datetime = row["now"]
        return now

    def listen(self) -> Listener:
        url = self._session_url
        if url is None:
            return PollingListener()
        return PostgresListener(url, self._prefix.channel, self._connect_timeout)

    def try_lead(self, role: str) -> PostgresLeadership | None:
        lock_name = self._prefix.lock_name(f"lead:{role}")
        url = self._session_url
        # The session names its holder, for ``leader`` to read (ADR 0131).
        holder = leader_session_name(role)
        with translated_errors():
            if url is None:
                # No session to hold a session lock: a transaction held open pins one
                # server session behind the pooler for as long as the role (ADR 0123).
                conn = connect(self._url, self._connect_timeout, application_name=holder)
                conn.autocommit = False
                try_lock = self._queries.try_advisory_xact_lock
            else:
                conn = connect(url, self._connect_timeout, application_name=holder)
                try_lock = self._queries.try_advisory_lock
            try:
                with self._watchdog.bounded(conn):
                    row = try_lock.one(conn, lock_name=lock_name)
            except (psycopg.Error, BackendUnavailable):
                conn.close()
                raise
        if row is None or not row["acquired"]:
            conn.close()
            return None
        if url is None:
            return PostgresLeadership(conn, self._queries, _rollback, self._watchdog)
        return PostgresLeadership(
            conn,
            self._queries,
            lambda held: self._queries.advisory_unlock.exec(held, lock_name=lock_name),
            self._watchdog,
        )

    def leader(self, role: str) -> Leader | None:
        lock_name = self._prefix.lock_name(f"lead:{role}")
        row = self._run(lambda conn: self._queries.leader.one(conn, lock_name=lock_name))
        if row is None:
            return None
        return Leader(
            role=role,
            holder=leader_of_session(role, row["application_name"]),
            since=row["since"],
            session_pid=row["session_pid"],
        )

    # -- beat bookkeeping --------------------------------------------------------

    def pending_with_dedup_prefix(self, dedup_prefix: str) -> list[JobRow]:
        rows = self._run(
            lambda conn: self._queries.pending_with_dedup_prefix.many(
                conn, dedup_prefix=dedup_prefix
            )
        )
        return [_job_row(r) for r in rows]

    def latest_with_dedup_key(self, kind: str, dedup_key: str) -> JobRow | None:
        row = self._run(
            lambda conn: self._queries.latest_with_dedup_key.one(
                conn, kind=kind, dedup_key=dedup_key
            )
        )
        return _job_row(row) if row is not None else None

    # -- operations --------------------------------------------------------------

    def get_job(self, job_id: str) -> JobDetail | None:
        def read(conn: Connection) -> JobDetail | None:
            row = self._queries.get_job.one(conn, id=job_id)
            if row is None:
                return None
            timeline = self._queries.job_timeline.many(conn, id=job_id)
            return JobDetail(_job_row(row), tuple(_journal_entry(e) for e in timeline))

        return self._run(read)

    def list_jobs(
        self, *, status: Status | None, kind: str | None, limit: int, after: Cursor | None
    ) -> Page:
        rows = self._run(
            lambda conn: self._queries.list_jobs.many(
                conn,
                status=status.value if status is not None else None,
                kind=kind,
                after_created_at=after.created_at if after is not None else None,
                after_id=after.id if after is not None else None,
                limit=limit,
            )
        )
        jobs = tuple(_job_row(r) for r in rows)
        next_cursor = Cursor(jobs[-1].created_at, jobs[-1].id) if len(jobs) == limit else None
        return Page(jobs, next_cursor)

    def retry_job(self, job_id: str) -> JobRow:
        def retry(conn: Connection) -> dict[str, Any] | None:
            row = self._queries.retry_job.one(conn, id=job_id)
            if row is not None:
                if row["workflow_id"] is not None:
                    self._queries.resume_dependants.many(conn, ids=[job_id])
                # At commit: the retried job is pending now, so a worker may take it now.
                self._queries.notify_wakeup.exec(conn, channel=self._prefix.channel)
            return row

        return self._change_state(job_id, "retry", "dead", retry)

    def cancel_job(self, job_id: str, note: str = "cancelled") -> JobRow:
        def cancel(conn: Connection) -> dict[str, Any] | None:
            # Under lock_job's row lock: the status read there is the one that counts.
            pending = self._queries.cancel_job.one(conn, id=job_id, note=note)
            if pending is not None and pending["workflow_id"] is not None:
                self._end_dependants(conn, [job_id])
            return pending or self._queries.request_cancel.one(conn, id=job_id)

        return self._change_state(job_id, "cancel", "pending or claimed", cancel)

    def _end_dependants(self, conn: Connection, step_ids: list[str]) -> None:
        """End dead the waiting descendants of ``step_ids`` (ended dead in ``conn``'s
        transaction); nothing to do, and no statement, without any."""
        if step_ids:
            self._queries.end_dependants.many(conn, ids=step_ids, result_channel=RESULT_CHANNEL)

    def _change_state(
        self,
        job_id: str,
        action: str,
        allowed: str,
        change: Callable[[Connection], dict[str, Any] | None],
    ) -> JobRow:
        with self._transaction() as conn:
            current = self._queries.lock_job.one(conn, id=job_id)
            if current is None:
                raise JobNotFound(job_id)
            row = change(conn)
            if row is None:
                raise InvalidState(job_id, current["status"], action, allowed)
            return _job_row(row)

    def cleanup(self, *, older_than: timedelta, status: Status | None, batch_size: int) -> int:
        if status is None:
            query, params = self._queries.cleanup_finished, {}
        else:
            query, params = self._queries.cleanup_finished_with_status, {"status": status.value}
        total = self._delete_in_batches(
            query, older_than=older_than, batch_size=batch_size, **params
        )
        if status in (None, Status.DEAD):
            # Workflow steps that never ran: not jobs, so not counted (ADR 0125).
            self._delete_in_batches(
                self._queries.cleanup_dead_steps, older_than=older_than, batch_size=batch_size
            )
        return total

    def _delete_in_batches(self, query: Query, *, batch_size: int, **params: Any) -> int:
        total = 0
        while True:
            row = self._run(lambda conn: query.one(conn, batch_size=batch_size, **params))
            deleted = int(row["deleted"]) if row is not None else 0
            total += deleted
            if deleted < batch_size:
                return total

    def stats(self) -> Stats:
        rows = self._run(self._queries.stats.many)
        by_kind: dict[str, list[dict[str, Any]]] = {}
        for row in rows:
            by_kind.setdefault(row["kind"], []).append(row)
        kinds = []
        for kind, kind_rows in by_kind.items():
            ages = [
                r["oldest_eligible_age"] for r in kind_rows if r["oldest_eligible_age"] is not None
            ]
            kinds.append(
                KindStats(
                    kind=kind,
                    counts={Status(r["status"]): int(r["jobs"]) for r in kind_rows},
                    scheduled=sum(int(r["scheduled"]) for r in kind_rows),
                    oldest_eligible_age=max(ages, default=None),
                )
            )
        return Stats(tuple(kinds))

    def close(self) -> None:
        self._async_pool.close()
        self._claim_pool.close()
        self._pool.close()
        self._watchdog.stop()

    # -- dashboard ---------------------------------------------------------------

    def throughput(self, window: timedelta) -> Throughput:
        rows = self._run(lambda conn: self._queries.throughput.many(conn, window=window))
        minutes = tuple(
            MinuteCounts(r["kind"], r["minute"], int(r["completed"]), int(r["dead"]))
            for r in rows
            if r["kind"] is not None
        )
        return Throughput(rows[0]["current_minute"], minutes)

    def list_job_summaries(
        self,
        *,
        status: Status | None,
        kind: str | None,
        note: str | None,
        limit: int,
        after: Cursor | None,
    ) -> SummaryPage:
        rows = self._run(
            lambda conn: self._queries.list_jobs_noted.many(
                conn,
                status=status.value if status is not None else None,
                kind=kind,
                note=note,
                after_created_at=after.created_at if after is not None else None,
                after_id=after.id if after is not None else None,
                limit=limit,
            )
        )
        jobs = tuple(
            JobSummary(
                _job_row(r),
                OutcomeKind(r["last_outcome"]) if r["last_outcome"] is not None else None,
                r["last_note"],
            )
            for r in rows
        )
        last = jobs[-1].job if len(jobs) == limit else None
        return SummaryPage(jobs, Cursor(last.created_at, last.id) if last is not None else None)

    def count_jobs(self, *, status: Status | None, kind: str | None, note: str | None) -> int:
        row = self._run(
            lambda conn: self._queries.count_jobs.one(
                conn, status=status.value if status is not None else None, kind=kind, note=note
            )
        )
        return int(row["jobs"]) if row is not None else 0

    def retry_matching(self, *, kind: str | None, note: str | None, batch_size: int) -> int:
        def retry(conn: Connection) -> int:
            with conn.transaction():
                row = self._queries.retry_matching.one(
                    conn, kind=kind, note=note, batch_size=batch_size
                )
                if row is None or not row["changed"]:
                    return 0
                if row["steps"]:
                    self._queries.resume_dependants.many(conn, ids=list(row["steps"]))
                self._queries.notify_wakeup.exec(conn, channel=self._prefix.channel)
                return int(row["changed"])

        return self._run(retry)

    def cancel_matching(
        self, *, kind: str | None, note: str | None, batch_size: int, cancel_note: str = "cancelled"
    ) -> int:
        def cancel(conn: Connection) -> int:
            with conn.transaction():
                row = self._queries.cancel_matching.one(
                    conn, kind=kind, note=note, batch_size=batch_size, cancel_note=cancel_note
                )
                if row is None:
                    return 0
                self._end_dependants(conn, list(row["steps"]))
                return int(row["changed"])

        return self._run(cancel)

    # -- async enqueue (ADR 0122) ----------------------------------------------------

    async def aenqueue(
        self, jobs: Sequence[NewJob], *, connection: object | None = None
    ) -> list[JobRef]:
        """``enqueue`` on this loop's async pool, or inside a ``psycopg.AsyncConnection``'s
        transaction; the same statements, lock order and merge decisions."""
        if not jobs:
            return []
        plain, deduplicated = _split_for_enqueue(jobs, self._dedup_lock_name)
        refs: dict[str, JobRef] = {}
        if not deduplicated and connection is None:
            try:
                await self._async_pool.run(lambda conn: self._ainsert(conn, plain))
            except psycopg.Error as exc:
                reraise_translated(exc, self._prefix)
        else:
            async with self._atransaction(connection) as conn:
                if plain:
                    await self._ainsert(conn, plain)
                for job in deduplicated:
                    refs[job.id] = await self._aenqueue_deduplicated(conn, job)
                if not plain:
                    await self._queries.notify_wakeup.aexec(conn, channel=self._prefix.channel)
        return [refs.get(job.id, JobRef(job.id)) for job in jobs]

    async def aclose(self) -> None:
        await self._async_pool.aclose()
        # The other pools' close joins threads (and other loops' pools): not on this loop.
        await asyncio.to_thread(self.close)

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
            await self._acopy(conn, jobs)
        elif len(jobs) == 1:
            if jobs[0].headers is None:
                await self._queries.enqueue_job.aexec(conn, **self._one_job_params(jobs[0]))
            else:
                await self._queries.enqueue_job_with_headers.aexec(
                    conn, **self._traced_params(jobs)
                )
        elif not _has_headers(jobs):
            await self._queries.enqueue_jobs.aexec(conn, **self._jobs_params(jobs))
        else:
            await self._queries.enqueue_jobs_with_headers.aexec(conn, **self._traced_params(jobs))

    async def _acopy(self, conn: AsyncConnection, jobs: Sequence[NewJob]) -> None:
        async with conn.transaction():
            row = await self._queries.database_now.aone(conn)
            assert row is not None
            statement, types = self._copy_statement(jobs)
            async with conn.cursor() as cursor:
                set_json_dumps(_encoded_json, cursor)
                async with statement.acopy(cursor) as copy:
                    copy.set_types(types)
                    for values in _copy_rows(jobs, row["now"]):
                        await copy.write_row(values)
            await self._queries.notify_wakeup.aexec(conn, channel=self._prefix.channel)

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

    def check_schema(self) -> str:
        with (
            translated_errors(self._prefix),
            connect(self._url, self._connect_timeout) as conn,
        ):
            try:
                self._queries.check_schema.many(conn)
            except psycopg.errors.UndefinedColumn as exc:
                raise SchemaMissing(self._prefix.value, missing=_missing_column(exc)) from exc
            info = conn.info
            host = f"[{info.host}]" if ":" in info.host else info.host
            return f"{host}:{info.port}/{info.dbname}"

    # -- the worker registry (ADR 0119) --------------------------------------------

    def register_worker(self, worker: WorkerRegistration, *, expires_in: timedelta) -> None:
        self._run(
            lambda conn: self._queries.register_worker.exec(
                conn, expires_in=expires_in, **_registration(worker)
            )
        )

    def heartbeat_worker(
        self, worker: WorkerRegistration, *, running: int, expires_in: timedelta, sweep_limit: int
    ) -> list[str]:
        rows = self._run(
            lambda conn: self._queries.heartbeat_worker.many(
                conn,
                running=running,
                expires_in=expires_in,
                sweep_limit=sweep_limit,
                **_registration(worker),
            )
        )
        return [row["id"] for row in rows]

    def deregister_worker(self, worker_id: str) -> bool:
        row = self._run(lambda conn: self._queries.deregister_worker.one(conn, id=worker_id))
        return row is not None

    def list_workers(self) -> list[WorkerInfo]:
        rows = self._run(self._queries.list_workers.many)
        return [
            WorkerInfo(
                id=r["id"],
                version=r["version"],
                kinds=tuple(r["kinds"]),
                concurrency=r["concurrency"],
                running=r["running"],
                started_at=r["started_at"],
                heartbeat_at=r["heartbeat_at"],
                expires_at=r["expires_at"],
            )
            for r in rows
        ]

    def unserved_kinds(self) -> list[str]:
        return [row["kind"] for row in self._run(self._queries.unserved_kinds.many)]

    # -- results (ADR 0124) ---------------------------------------------------------

    def read_result(self, job_id: str) -> StoredResult | None:
        row = self._run(lambda conn: self._queries.read_result.one(conn, id=job_id))
        if row is None:
            return None
        return StoredResult(Status(row["status"]), row["result"], row["note"])

    def await_result(self, job_id: str) -> None:
        self._run(lambda conn: self._queries.await_result.exec(conn, id=job_id))

    def listen_result(self, job_id: str) -> Listener:
        # LISTEN needs a session: behind a pooler, the direct URL, else the waiter polls.
        url = self._session_url
        if url is None:
            return PollingListener()
        return PostgresListener(url, RESULT_CHANNEL + job_id, self._connect_timeout)

    def claim_limited(
        self,
        *,
        kinds: Collection[str],
        limit: int,
        worker_id: str,
        lease: timedelta,
        limits: Mapping[str, KindLimits],
        horizon: timedelta = timedelta(0),
        floors: Mapping[str, ClaimFloor] | None = None,
    ) -> LimitedClaim:
        kinds = list(kinds)
        limited = sorted(kind for kind in kinds if kind in limits)
        if not limited or limit <= 0:
            return LimitedClaim(
                self.claim(
                    kinds=kinds,
                    limit=limit,
                    worker_id=worker_id,
                    lease=lease,
                    horizon=horizon,
                    floors=floors,
                ),
                {},
            )
        capped = [kind for kind in limited if limits[kind].global_concurrency is not None]
        with self._connection(self._claim_pool) as conn, conn.transaction():
            self._queries.lock_claim_limits.exec(conn, kinds=limited)
            state = {
                row["kind"]: row
                for row in self._queries.claim_limit_state.many(conn, kinds=limited, capped=capped)
            }
            room: dict[str, int] = {}
            throttled: dict[str, timedelta] = {}
            for kind in limited:
                allowed, wait = _limited_room(limits[kind], state[kind], limit)
                if allowed > 0:
                    room[kind] = allowed
                else:
                    throttled[kind] = wait
            claimable = [kind for kind in kinds if kind not in throttled]
            rows = self._claim_rows(
                conn,
                claimable,
                [room.get(kind, limit) for kind in claimable],
                limit=limit,
                worker_id=worker_id,
                lease=lease,
                horizon=horizon,
                floors=floors,
            )
            self._spend_rate_tokens(conn, limits, state, rows)
        return LimitedClaim(_claimed_jobs(rows, worker_id), throttled)

    def promote_waiting(self, kinds: Collection[str], *, age_after: timedelta, limit: int) -> int:
        if not kinds:
            return 0
        row = self._run(
            lambda conn: self._queries.promote_waiting.one(
                conn, kinds=list(kinds), age_after=age_after, limit=limit
            )
        )
        return int(row["promoted"]) if row is not None else 0

    def claim_fair(
        self,
        *,
        kind: str,
        limit: int,
        worker_id: str,
        lease: timedelta,
        horizon: timedelta = timedelta(0),
    ) -> list[ClaimedJob]:
        if limit <= 0:
            return []
        rows = self._run_bounded(
            lambda conn: self._queries.claim_fair_jobs.many(
                conn, kind=kind, limit=limit, worker_id=worker_id, lease=lease, horizon=horizon
            ),
            self._claim_pool,
        )
        return _claimed_jobs(rows, worker_id, in_claim_order=True)

    def _spend_rate_tokens(
        self,
        conn: Connection,
        limits: Mapping[str, KindLimits],
        state: Mapping[str, Mapping[str, Any]],
        rows: Sequence[Mapping[str, Any]],
    ) -> None:
        taken = Counter(row["kind"] for row in rows)
        spent: dict[str, datetime] = {}
        for kind, count in taken.items():
            rate = limits[kind].rate_limit if kind in limits else None
            if rate is not None:
                row = state[kind]
                spent[kind] = row["next_start_at"] + count * rate.interval
        if spent:
            self._queries.advance_rate_limits.exec(
                conn, kinds=list(spent), next_start_at=list(spent.values())
            )

    # -- workflows (ADR 0125) -------------------------------------------------------

    def enqueue_workflow(self, workflow: NewWorkflow) -> None:
        steps = workflow.steps
        self._run(
            lambda conn: self._queries.enqueue_workflow.exec(
                conn,
                workflow_id=workflow.id,
                ids=[s.job.id for s in steps],
                kinds=[s.job.kind for s in steps],
                payloads=[s.job.payload for s in steps],
                priorities=[int(s.job.priority) for s in steps],
                delays=[s.job.delay for s in steps],
                waiting_fors=[s.waiting_for for s in steps],
                input_args=[s.input_arg for s in steps],
                input_alls=[s.input_all for s in steps],
                positions=[s.position for s in steps],
                edge_parents=[e.parent_id for e in workflow.edges],
                edge_children=[e.child_id for e in workflow.edges],
                edge_positions=[e.position for e in workflow.edges],
                channel=self._prefix.channel,
            )
        )

    def get_workflow(self, workflow_id: str) -> Workflow | None:
        rows = self._run(
            lambda conn: self._queries.workflow_steps.many(conn, workflow_id=workflow_id)
        )
        if not rows:
            return None
        steps = tuple(
            WorkflowStep(
                id=r["id"],
                kind=r["kind"],
                state=StepState(r["status"]),
                parents=tuple(r["parents"]),
                position=int(r["position"]),
                note=r["note"],
                finished_at=r["finished_at"],
            )
            for r in rows
        )
        return Workflow(workflow_id, steps)

    def list_workflows(self, *, limit: int, before: str | None) -> list[WorkflowSummary]:
        rows = self._run(
            lambda conn: self._queries.list_workflows.many(conn, limit=limit, before=before)
        )
        return [
            WorkflowSummary(
                id=r["id"],
                counts={state: int(r[state.value]) for state in StepState},
                created_at=r["created_at"],
                finished_at=r["finished_at"],
            )
            for r in rows
        ]

    def workflow_id_of(self, job_id: str) -> str | None:
        row = self._run(lambda conn: self._queries.workflow_id_of.one(conn, id=job_id))
        return None if row is None else str(row["workflow_id"])


def _claimed_jobs(
    rows: list[dict[str, Any]], worker_id: str, *, in_claim_order: bool = False
) -> list[ClaimedJob]:
    """The claimed rows as jobs, by tier then age; ``in_claim_order``: as the statement
    returned them (a fair claim's rotation order, ADR 0129)."""
    if not in_claim_order:
        rows.sort(key=lambda r: (r["priority"], r["created_at"], r["id"]))
    return [
        ClaimedJob(
            claim=Claim(r["id"], worker_id, r["run_count"]),
            kind=r["kind"],
            payload=r["payload"],
            carry=r["carry"],
            priority=Priority(r["priority"]),
            failure_count=r["failure_count"],
            created_at=r["created_at"],
            claim_expires_at=r["claim_expires_at"],
            headers=r["headers"],
            workflow_id=r["workflow_id"],
        )
        for r in rows
    ]


def _rollback(conn: Connection) -> None:
    conn.rollback()


def _job_row(row: Mapping[str, Any]) -> JobRow:
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
    )


def _journal_entry(row: Mapping[str, Any]) -> JournalEntry:
    return JournalEntry(
        id=row["id"],
        job_id=row["job_id"],
        kind=row["kind"],
        run_no=row["run_no"],
        recorded_at=row["recorded_at"],
        outcome=OutcomeKind(row["outcome"]),
        note=row["note"],
        attachment=row["attachment"],
        traceback=row["traceback"],
    )


# -- shared by enqueue and aenqueue ---------------------------------------------------


def _split_for_enqueue(
    jobs: Sequence[NewJob], lock_name: Callable[[NewJob], str]
) -> tuple[list[NewJob], list[NewJob]]:
    """Plain jobs in input order, and deduplicated ones in dedup-lock order (ADR 0103)."""
    plain = [job for job in jobs if job.dedup_key is None]
    deduplicated = sorted((job for job in jobs if job.dedup_key is not None), key=lock_name)
    return plain, deduplicated


def _copy_rows(jobs: Sequence[NewJob], start: datetime) -> Iterable[tuple[Any, ...]]:
    """COPY rows: created_at one microsecond apart from the database clock (see copy_jobs);
    with a headers column when any job has headers (``copy_jobs_with_headers``); the fair
    key last (ADR 0129)."""
    traced = _has_headers(jobs)
    for offset, job in enumerate(jobs):
        created_at = start + timedelta(microseconds=offset)
        visible_at = job.eta if job.eta is not None else created_at + job.delay
        row = (
            job.id,
            job.kind,
            job.payload,
            int(job.priority),
            "pending",
            created_at,
            visible_at,
            job.dedup_key,
        )
        yield (*row, _headers_json(job), job.fair_key) if traced else (*row, job.fair_key)


def claim_input(
    kinds: Sequence[str],
    kind_limits: Sequence[int],
    floors: Mapping[str, ClaimFloor] | None = None,
) -> str:
    """``claim_jobs``'s kinds: one JSON object per kind, with its probe's limit and its
    floor (ADR 0115; none: nulls)."""
    floors = floors or {}
    rows = []
    for kind, kind_limit in zip(kinds, kind_limits, strict=True):
        floor = floors.get(kind)
        rows.append(
            {
                "kind": kind,
                "floor_priority": None if floor is None else int(floor.priority),
                "floor_created_at": None if floor is None else floor.created_at,
                "kind_limit": kind_limit,
            }
        )
    return orjson.dumps(rows).decode()


def finish_input(
    results: Sequence[Finished], result_max_bytes: int = DEFAULT_RESULT_MAX_BYTES
) -> dict[str, Any]:
    """The finish statements' outcome parameters: the ids, for the primary-key probes,
    and one JSON object per outcome (a JSON null is NULL)."""
    rows = []
    for finished in results:
        claim, outcome = finished.claim, bounded(finished.outcome, result_max_bytes)
        rows.append(
            {
                "id": claim.job_id,
                "claimed_by": claim.claimed_by,
                "run_count": claim.run_count,
                "outcome": outcome.kind.value,
                "note": outcome.note,
                "is_failure": outcome.is_failure,
                "delay_us": outcome.delay // _MICROSECOND,
                "eta": outcome.eta,
                "carry": outcome.carry,
                "attachment": outcome.attachment,
                "traceback": outcome.traceback,
                "result": outcome.result,
            }
        )
    return {"ids": [r.claim.job_id for r in results], "input": orjson.dumps(rows).decode()}


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


def _registration(worker: WorkerRegistration) -> dict[str, Any]:
    return {
        "id": worker.id,
        "version": worker.version,
        "kinds": list(worker.kinds),
        "concurrency": worker.concurrency,
    }


def _missing_column(exc: psycopg.errors.UndefinedColumn) -> str:
    """``column j.traceback`` from the server's message (its wording varies little)."""
    first = str(exc).splitlines()[0]
    return first.removesuffix(" does not exist").strip() or "a column"


#: The column types of ``copy_jobs``, in its column order (``_copy_rows``).
_COPY_TYPES = [
    "text",
    "text",
    "jsonb",
    "int2",
    "text",
    "timestamptz",
    "timestamptz",
    "text",
    "text",
]
#: ``copy_jobs_with_headers``: the headers before the fair key.
_COPY_TYPES_WITH_HEADERS = [*_COPY_TYPES[:-1], "jsonb", "text"]


def _encoded_json(text: str) -> str:
    """The JSON "encoder" of a COPY's jsonb columns: payloads and headers are JSON text
    already (``Binding.encode_payload``, ``_headers_json``)."""
    return text


def _has_headers(jobs: Sequence[NewJob]) -> bool:
    """Whether an instrumented enqueue gave any of ``jobs`` trace headers (ADR 0127)."""
    return any(job.headers is not None for job in jobs)


def _headers_json(job: NewJob) -> str | None:
    return None if job.headers is None else json.dumps(dict(job.headers))


def _limited_room(
    limits: KindLimits, state: Mapping[str, Any], limit: int
) -> tuple[int, timedelta]:
    """How many jobs of a limited kind this claim may take, and, when none, how long
    until it may take one (ADR 0128)."""
    allowed, waits = limit, []
    if limits.global_concurrency is not None:
        allowed = min(allowed, limits.global_concurrency - state["claimed"])
        if allowed <= 0:
            waits.append(CAP_RECHECK)
    rate = limits.rate_limit
    if rate is not None:
        now: datetime = state["now"]
        start: datetime = state["next_start_at"]
        due = (now + rate.burst * rate.interval - start) // rate.interval
        if due <= 0:
            waits.append(start - (rate.burst - 1) * rate.interval - now)
        allowed = min(allowed, due)
    return max(allowed, 0), max(waits, default=timedelta(0))
