"""The storage boundary (ADR 8): lifecycle verbs in venturi's own types.

The worker loop, the registry, the task layer and beat talk to storage only
through ``Backend``. No SQL, rows, cursors or driver exceptions cross it: a
driver error comes out as ``BackendUnavailable``. The ``connection`` handle of
``enqueue`` is typed ``object`` so this module never names psycopg; the
PostgreSQL adapter documents which handles it accepts.

Every method that changes a claimed row takes the ``Claim`` and is fenced on it
(``status='claimed'``, same ``claimed_by``, same ``run_count``; ADR 19): a
worker that lost its lease can never overwrite a newer claim's outcome.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Protocol

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
    NewJob,
    Page,
    Stats,
    Status,
    SummaryPage,
    Throughput,
)


class Listener(Protocol):
    """Wake-ups sent on enqueue (ADR 20), on a connection of its own."""

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; True when a notification arrived."""
        ...

    def close(self) -> None: ...


class Leadership(Protocol):
    """A held, exclusive role (e.g. the one active beat of a prefix)."""

    def is_held(self) -> bool:
        """Check (with a round trip) that the role is still ours."""
        ...

    def release(self) -> None: ...


class Backend(Protocol):
    def migrate(self) -> list[AppliedMigration]:
        """Apply pending migrations (ADR 24); returns those applied now."""
        ...

    def enqueue(self, jobs: Sequence[NewJob], *, connection: object | None = None) -> list[JobRef]:
        """Insert jobs (deduplicating per ADR 10), one ref per input, in order.

        With ``connection``, the insert runs inside the caller's transaction
        and the wake-up is sent when it commits. Either every job of the call
        is written or none is.
        """
        ...

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
        """Claim up to ``limit`` eligible jobs of ``kinds`` in tier-then-age order (ADR 3).

        Eligible means ``visible_at <= now() + horizon``; a positive horizon is
        only for ``testing.drain(include_scheduled=True)``. A kind with a floor
        is only looked for at or after it in claim order (ADR 0115): rows
        before it are not claimed, even when eligible.
        """
        ...

    def finish(self, results: Sequence[Finished]) -> set[str]:
        """Record outcomes (row change + journal entry, atomically), fenced per claim.

        Returns the ids whose outcome was written; a missing id had lost its claim.
        """
        ...

    def renew_leases(self, claims: Sequence[Claim], lease: timedelta) -> set[str]:
        """Extend leases to ``now() + lease``; returns the ids still held."""
        ...

    def release(self, claims: Sequence[Claim]) -> int:
        """Return unfinished claims to ``pending``, journal ``released``, no failure (ADR 21)."""
        ...

    def recover_stale(
        self, *, max_failures: Mapping[str, int], default_max_failures: int, limit: int
    ) -> int:
        """Recover up to ``limit`` rows whose lease expired (ADR 19); returns how many."""
        ...

    def time_until_visible(self, kinds: Collection[str]) -> timedelta | None:
        """Database time until the soonest pending ``visible_at`` among ``kinds``.

        ``None`` when no pending job of those kinds exists; zero or negative
        when one is already due.
        """
        ...

    def now(self) -> datetime:
        """The database clock, the one clock of lifecycle columns."""
        ...

    def listen(self) -> Listener: ...

    def try_lead(self, role: str) -> Leadership | None:
        """Take the exclusive ``role`` for this prefix, or None when another holds it."""
        ...

    def pending_with_dedup_prefix(self, dedup_prefix: str) -> list[JobRow]:
        """Pending rows whose dedup key starts with ``dedup_prefix`` (beat bookkeeping)."""
        ...

    def latest_with_dedup_key(self, kind: str, dedup_key: str) -> JobRow | None:
        """The row of ``kind`` with this dedup key and the latest ``visible_at``, any status."""
        ...

    def get_job(self, job_id: str) -> JobDetail | None: ...

    def list_jobs(
        self, *, status: Status | None, kind: str | None, limit: int, after: Cursor | None
    ) -> Page: ...

    def retry_job(self, job_id: str) -> JobRow:
        """``dead`` -> ``pending``, visible now; raises JobNotFound / InvalidState."""
        ...

    def cancel_job(self, job_id: str, note: str = "cancelled") -> JobRow:
        """``pending`` -> ``dead``, journalled; raises JobNotFound / InvalidState."""
        ...

    def cleanup(self, *, older_than: timedelta, status: Status | None, batch_size: int) -> int:
        """Delete terminal jobs finished before ``now() - older_than``, in batches."""
        ...

    def stats(self) -> Stats: ...

    def close(self) -> None: ...

    def throughput(self, window: timedelta) -> Throughput:
        """Completed and dead jobs per kind and minute, from ``window`` before this minute."""
        ...

    def list_job_summaries(
        self,
        *,
        status: Status | None,
        kind: str | None,
        note: str | None,
        limit: int,
        after: Cursor | None,
    ) -> SummaryPage:
        """``list_jobs`` with each row's last journal entry, optionally matching ``note`` text."""
        ...

    def count_jobs(self, *, status: Status | None, kind: str | None, note: str | None) -> int:
        """How many jobs match the filters of ``list_job_summaries``."""
        ...

    def retry_matching(self, *, kind: str | None, note: str | None, batch_size: int) -> int:
        """Retry up to ``batch_size`` matching ``dead`` jobs, as ``retry_job``; returns how many."""
        ...

    def cancel_matching(
        self, *, kind: str | None, note: str | None, batch_size: int, cancel_note: str = "cancelled"
    ) -> int:
        """Cancel up to ``batch_size`` matching ``pending`` jobs, as ``cancel_job``; how many."""
        ...
