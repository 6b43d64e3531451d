"""What an operator reads and changes: jobs, counts, throughput, retries, cancels, cleanup.

Part of the storage boundary; ``venturi.backend`` is where callers import it from.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol

from venturi.types import (
    Cursor,
    JobDetail,
    JobRow,
    Page,
    Stats,
    Status,
    SummaryPage,
    Throughput,
)

__all__ = ["Operator"]


class Operator(Protocol):
    """Reading and changing jobs by hand (ADR 18, 0105, 0121).

    Used by the App's operator methods (and through them the CLI, the dashboard
    and contrib), by beat (``cancel_job`` of a tick it supersedes) and by the
    pruner (``cleanup``).
    """

    def get_job(self, job_id: str) -> JobDetail | None:
        """The row (its ``expires_at`` too) and its journal in recording (id) order;
        ``None`` when no such job."""
        ...

    def list_jobs(
        self, *, status: Status | None, kind: str | None, limit: int, after: Cursor | None
    ) -> Page:
        """Up to ``limit`` rows newest first (``created_at``, then id, descending), after
        ``after``, filtered by ``status`` and ``kind`` when given (ADR 18).

        ``next`` is the cursor of the last row when the page is full, else ``None``;
        rows enqueued meanwhile never appear on later pages.
        """
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

    def stats(self) -> Stats:
        """Counts per kind and status (kinds with rows only), scheduled and oldest
        eligible age per kind; no kinds for an empty queue."""
        ...

    def throughput(self, window: timedelta) -> Throughput:
        """Completed and dead jobs per kind and minute, from ``window`` before this minute."""
        ...

    def backlog(self, kind: str | None) -> int:
        """Due pending jobs (``visible_at <= now()``), of ``kind`` when given (ADR 0136)."""
        ...

    def retry_job(self, job_id: str) -> JobRow:
        """``dead`` -> ``pending``, visible now, failures reset, cancellation request
        and expiry cleared (ADR 0135), journal ``retried``.

        Raises ``JobNotFound``, or ``InvalidState`` for any other status (nothing written).
        """
        ...

    def cancel_job(self, job_id: str, note: str = "cancelled") -> JobRow:
        """``pending`` (scheduled too) -> ``dead`` with ``finished_at``, journal ``dead``/``note``;
        ``claimed`` -> a cancellation request (``cancel_requested_at``, the first
        request's time kept; row still claimed, no journal entry; ADR 0121).

        Raises ``JobNotFound``, or ``InvalidState`` for a terminal job (nothing written).
        """
        ...

    def retry_matching(self, *, kind: str | None, note: str | None, batch_size: int) -> int:
        """Retry up to ``batch_size`` matching ``dead`` jobs, as ``retry_job``; returns how many."""
        ...

    def cancel_matching(
        self, *, kind: str | None, note: str | None, batch_size: int, cancel_note: str = "cancelled"
    ) -> int:
        """Cancel up to ``batch_size`` matching ``pending`` jobs, as ``cancel_job``; how many."""
        ...

    def cleanup(self, *, older_than: timedelta, status: Status | None, batch_size: int) -> int:
        """Delete terminal jobs finished before ``now() - older_than``, in batches.

        Only ``completed``/``dead`` rows (only ``status`` when given), journals
        with them; batches of ``batch_size`` until one comes back short. Returns
        how many jobs were deleted; pending and claimed rows are never deleted.
        """
        ...
