"""The Operator role on PostgreSQL: read jobs back, retry, cancel and clean them up.

Retry and cancel act on one job or on a filter; the reads include the counts
behind stats and the dashboard, the backlog for external scalers and the
migrations a DBA reviews before ``migrate`` (ADR 0136).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

from venturi.errors import InvalidState, JobNotFound
from venturi.postgres.queries import Query
from venturi.postgres.sessions import Connection
from venturi.postgres.store import Store, job_row
from venturi.types import (
    Cursor,
    JobDetail,
    JobRow,
    JobSummary,
    JournalEntry,
    KindStats,
    MinuteCounts,
    OutcomeKind,
    Page,
    Stats,
    Status,
    SummaryPage,
    Throughput,
)

__all__ = ["OperatorVerbs"]


class OperatorVerbs(Store):
    """``Operator``'s verbs (venturi/backend/)."""

    def get_job(self, job_id: str) -> JobDetail | None:
        def read(conn: Connection) -> JobDetail | None:
            row = self._queries.get_job.one(conn, id=job_id)
            if row is None:
                return None
            timeline = self._queries.job_timeline.many(conn, id=job_id)
            # The expiry is read back here, for one job (ADR 0135), not by every listing.
            job = job_row(row)
            return JobDetail(job, tuple(_journal_entry(e) for e in timeline))

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
        jobs = tuple(job_row(r) for r in rows)
        next_cursor = Cursor(jobs[-1].created_at, jobs[-1].id) if len(jobs) == limit else None
        return Page(jobs, next_cursor)

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
                job_row(r),
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

    def throughput(self, window: timedelta) -> Throughput:
        rows = self._run(lambda conn: self._queries.throughput.many(conn, window=window))
        minutes = tuple(
            MinuteCounts(r["kind"], r["minute"], int(r["completed"]), int(r["dead"]))
            for r in rows
            if r["kind"] is not None
        )
        return Throughput(rows[0]["current_minute"], minutes)

    def backlog(self, kind: str | None) -> int:
        row = self._run(lambda conn: self._queries.backlog.one(conn, kind=kind))
        return int(row["backlog"]) if row is not None else 0

    def retry_job(self, job_id: str) -> JobRow:
        def retry(conn: Connection) -> dict[str, Any] | None:
            row = self._queries.retry_job.one(conn, id=job_id)
            if row is not None:
                if row["workflow_id"] is not None:
                    self._queries.resume_dependants.many(conn, ids=[job_id])
                # At commit: the retried job is pending now, so a worker may take it now.
                self._queries.notify_wakeup.exec(conn, channel=self._channel)
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

    def _change_state(
        self,
        job_id: str,
        action: str,
        allowed: str,
        change: Callable[[Connection], dict[str, Any] | None],
    ) -> JobRow:
        with self._connection() as conn, conn.transaction():
            current = self._queries.lock_job.one(conn, id=job_id)
            if current is None:
                raise JobNotFound(job_id)
            row = change(conn)
            if row is None:
                raise InvalidState(job_id, current["status"], action, allowed)
            return job_row(row)

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
                self._queries.notify_wakeup.exec(conn, channel=self._channel)
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


