"""The job lifecycle's hot path: writing jobs, claiming them, and acting on claimed rows.

Part of the storage boundary; ``venturi.backend`` is where callers import it from.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

from venturi.refs import JobRef
from venturi.types import (
    Claim,
    ClaimedJob,
    ClaimFloor,
    Finished,
    JobRow,
    KindLimits,
    LimitedClaim,
    NewJob,
    Renewal,
)

if TYPE_CHECKING:
    from venturi.job_template import JobTemplate

__all__ = ["CAP_RECHECK", "Claims", "Enqueue", "Leases"]


#: How long ``claim_limited`` reports a kind at its global cap as throttled: a
#: slot freed by another worker is noticed within this (ADR 0128).
CAP_RECHECK = timedelta(milliseconds=100)


class Enqueue(Protocol):
    """Writing jobs (ADR 10, 12, 0122).

    Used by the task layer (``delay``, ``apply_async``, ``delay_many`` and their
    async forms, through ``Task``'s enqueuer) and by beat, which also reads back,
    by their dedup keys, the rows its ticks wrote (ADR 0108).
    """

    def enqueue(self, jobs: Sequence[NewJob], *, connection: object | None = None) -> list[JobRef]:
        """Insert jobs (deduplicating per ADR 10), one ref per input, in input order.

        Plain jobs become ``pending`` rows in input order (``created_at`` rises
        through a batch), visible at ``eta`` or database ``now() + delay``, expiring
        at ``expires_at`` or database ``now() + expires_in`` (neither: never). A job
        with a dedup key is offered to its oldest pending sibling of the same kind
        and key: its ``merge`` decides (without one, the job is inserted as if
        ``independent``); a merged ref carries the sibling's id, ``merged=True``,
        and the sibling keeps the later of the two expiries (ADR 0135).
        Either every job of the call is written or none is; an exception from a
        ``merge`` resolver propagates, nothing written. With ``connection``, the
        insert runs inside the caller's transaction and the wake-up is sent when
        it commits. ``[]`` writes nothing.
        """
        ...

    async def aenqueue(
        self, jobs: Sequence[NewJob], *, connection: object | None = None
    ) -> list[JobRef]:
        """``enqueue``, awaited: the same rows, refs, dedup decisions and wake-ups.

        Without ``connection`` it runs on sessions of the running event loop,
        opened on the first call there; with one (the adapter's async handle,
        e.g. a ``psycopg.AsyncConnection``) it runs inside the caller's
        transaction. A handle of the wrong kind raises ``InvalidArgument``
        before anything is sent.
        """
        ...

    def enqueue_alike(
        self,
        template: JobTemplate,
        ids: Sequence[str],
        payloads: Sequence[str],
        *,
        connection: object | None = None,
    ) -> None:
        """Insert one job per id: ``template``'s, with that id and the payload at the
        same position (``ids`` and ``payloads`` are as long as each other).

        The rows, their order, the wake-up and the all-or-nothing are those
        ``enqueue`` writes for ``template.jobs(ids, payloads)``, whose refs would all be
        ``JobRef(id)``: the caller makes them (ADR 0142). ``connection`` as in
        ``enqueue``; no ids write nothing. Reading ``payloads`` may raise (``delay_many``
        checks each item as it is read, ADR 0145): the error propagates unchanged and
        nothing of the call is written; inside the caller's transaction, that
        transaction goes on.
        """
        ...

    async def aenqueue_alike(
        self,
        template: JobTemplate,
        ids: Sequence[str],
        payloads: Sequence[str],
        *,
        connection: object | None = None,
    ) -> None:
        """``enqueue_alike``, awaited, on the sessions ``aenqueue`` runs on."""
        ...

    def pending_with_dedup_prefix(self, dedup_prefix: str) -> list[JobRow]:
        """Pending rows whose dedup key starts with ``dedup_prefix`` (beat bookkeeping).

        Any kind, in no particular order; ``[]`` when none.
        """
        ...

    def latest_with_dedup_key(self, kind: str, dedup_key: str) -> JobRow | None:
        """The row of ``kind`` with this dedup key and the latest ``visible_at``, any status.

        ``None`` when no row has them.
        """
        ...


class Claims(Protocol):
    """Taking jobs: each claim makes rows ``claimed`` under a lease (ADR 3, 0128, 0129).

    Used by the claim runner (``runtime/runner.py``), the one path of the worker,
    ``Worker.run_once`` and ``venturi.testing.drain``.
    """

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

        Returned in claim order (priority, ``created_at``, id). Each row becomes
        ``claimed`` by ``worker_id`` with ``run_count + 1`` (the new fence) and a
        lease to ``now() + lease``. Rows another claimer holds are skipped, never
        waited for, so concurrent claimers never take one row twice. ``[]`` without
        a round trip for no kinds or ``limit <= 0``; ``kinds`` must not repeat.
        Eligible means ``visible_at <= now() + horizon``; a positive horizon is
        only for ``testing.drain(include_scheduled=True)``. A kind with a floor
        is only looked for at or after it in claim order (ADR 0115): rows
        before it are not claimed, even when eligible. A job whose expiry is at
        or before ``max(visible_at, now())`` comes back ``is_expired`` (ADR 0135);
        so in every claim verb.
        """
        ...

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
        """``claim``, with the kinds in ``limits`` bounded across every claimer (ADR 0128).

        In one transaction, serialized per limited kind across claimers: a kind
        with ``global_concurrency`` gets at most that many minus its rows
        already ``claimed`` (by anyone); a kind with a ``rate_limit`` at most
        the starts due by now (``burst`` at once, then one per ``interval``),
        and the starts it takes are spent. A kind that gets no room is left out
        of the claim and reported in ``throttled`` with how long until it may
        have some (the next rate token; a short recheck at the cap). Kinds of
        ``kinds`` not in ``limits`` are claimed as by ``claim``.
        """
        ...

    def claim_fair(
        self,
        *,
        kind: str,
        limit: int,
        worker_id: str,
        lease: timedelta,
        horizon: timedelta = timedelta(0),
    ) -> list[ClaimedJob]:
        """``claim`` for one kind whose jobs carry a fair key (ADR 0129): the keys take turns.

        Tiers stay strict; within a tier, the keys with a visible job are served
        one job each, starting after the key the kind's previous fair claim
        served last (wrapping around), before any key gets a second job. The
        jobs come back in that order. Jobs of the kind without a key are not
        claimed here.
        """
        ...

    def promote_waiting(self, kinds: Collection[str], *, age_after: timedelta, limit: int) -> int:
        """Priority aging: up to ``limit`` pending jobs per kind of ``kinds`` that have
        been visible for ``age_after`` or longer become HIGH; returns how many.

        Their ``created_at`` is untouched, so among HIGH jobs they come first.
        Rows another claimer holds are skipped.
        """
        ...


class Leases(Protocol):
    """What happens to a claimed row, each verb fenced on its claim (ADR 19, 21, 0104).

    Used by the committer (``finish``, through ``runtime/executor.record``), the
    lease keeper (``renew_leases``, ``recover_stale``; ``runtime/leases.py``), and
    a stopping worker or a drain left with claims (``release``).
    """

    def finish(self, results: Sequence[Finished]) -> set[str]:
        """Record outcomes (row change + journal entry, atomically), fenced per claim.

        Returns the ids whose outcome was written; a missing id had lost its claim
        and its row and journal are untouched. COMPLETED and DEAD end the row
        (``finished_at`` set), PAUSED and RETRIED return it to ``pending`` at
        ``eta`` or ``now() + delay``; ``is_failure`` adds one failure; ``carry``
        ``None`` keeps the row's carry; ``traceback`` is stored on the journal
        entry. A PAUSED or RETRIED outcome of a job whose cancellation was
        requested ends it ``dead`` instead, note ``cancelled (the run ended
        <kind>[: <note>])`` (ADR 0121). ``[]`` gives ``set()``.

        A COMPLETED outcome's ``result`` is stored as the job's result (ADR 0124),
        as given: the size bound is applied above the boundary, before ``finish``
        (``results.bounded``, the App's ``result_max_bytes``), so an outcome
        over it arrives with no result and a note saying how large it was. A
        waiter of a job that ends COMPLETED or DEAD (``await_result``) is woken
        by the same statement, at its commit; jobs nobody awaits send nothing.
        """
        ...

    def renew_leases(self, claims: Sequence[Claim], lease: timedelta) -> Renewal:
        """Extend leases to ``now() + lease``; returns the ids still held, and which
        of those have a cancellation request (ADR 0121).

        A lost claim is not revived (its row is untouched); ``[]`` gives an empty
        ``Renewal`` without a round trip.
        """
        ...

    def release(self, claims: Sequence[Claim]) -> int:
        """Return unfinished claims to ``pending``, journal ``released``, no failure (ADR 21).

        ``visible_at`` is kept, so a released job keeps its place. Claims already
        finished or lost are skipped, so releasing twice is harmless. A job whose
        cancellation was requested goes ``dead`` instead (note ``cancelled
        (worker shutdown)``, ADR 0121). Returns how many were released or ended.
        """
        ...

    def recover_stale(
        self, *, max_failures: Mapping[str, int], default_max_failures: int, limit: int
    ) -> int:
        """Recover up to ``limit`` rows whose lease expired (ADR 19); returns how many.

        Oldest expiry first. Each recovery is a failure: the row goes back to
        ``pending`` (journal ``stale-recovered``), or ``dead`` (journal ``dead``)
        when its failures reach its kind's ``max_failures`` (else
        ``default_max_failures``) or its cancellation was requested (note
        ``cancelled (lease of ... expired)``, ADR 0121). Concurrent sweeps never
        recover one row twice.
        """
        ...
