"""The storage boundary (ADR 8): lifecycle verbs in venturi's own types, one Protocol per role.

Each caller types against the role it uses, so what it may ask of storage is
written in its signature: the task layer and beat enqueue (``Enqueue``), the
claim runner takes jobs (``Claims``), the committer, lease keeper and a
stopping worker act on claimed rows (``Leases``), waiters and leaders agree on
time, wake-ups and roles (``Coordination``), the App's operator methods read
and change jobs (``Operator``), workers keep the registry (``Workers``),
result waiters read outcomes (``Results``), workflows are written and read
(``Workflows``), and the App runs migrations and the start check and closes
(``Schema``). ``Backend`` is their union: what an adapter implements and what
the App holds. ``queries.sql`` and the PostgreSQL adapter's modules follow the
same roles in the same order.

No SQL, rows, cursors or driver exceptions cross the boundary. The
``connection`` handle of ``enqueue`` is typed ``object`` so this module never
names psycopg; the PostgreSQL adapter documents which handles it accepts.

Every method that changes a claimed row takes the ``Claim`` and is fenced on it
(``status='claimed'``, same ``claimed_by``, same ``run_count``; ADR 19): a
worker that lost its lease can never overwrite a newer claim's outcome.

Each member's docstring is its contract, held by ``tests/contract/`` (one
module per role). Unless it says otherwise, an unreachable store raises
``BackendUnavailable``, a prefix without its tables ``SchemaMissing``.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Protocol

from venturi.refs import JobRef
from venturi.types import (
    AppliedMigration,
    Claim,
    ClaimedJob,
    ClaimFloor,
    Cursor,
    Finished,
    JobDetail,
    JobRow,
    KindLimits,
    Leader,
    LimitedClaim,
    NewJob,
    NewWorkflow,
    Page,
    Renewal,
    Stats,
    Status,
    StoredResult,
    SummaryPage,
    Throughput,
    WorkerInfo,
    WorkerRegistration,
    Workflow,
    WorkflowSummary,
)

__all__ = [
    "CAP_RECHECK",
    "Backend",
    "Claims",
    "Coordination",
    "Enqueue",
    "Leadership",
    "Leases",
    "Listener",
    "Operator",
    "Results",
    "Schema",
    "Workers",
    "Workflows",
]

#: How long ``claim_limited`` reports a kind at its global cap as throttled: a
#: slot freed by another worker is noticed within this (ADR 0128).
CAP_RECHECK = timedelta(milliseconds=100)


class Listener(Protocol):
    """Wake-ups sent on enqueue (ADR 20), on a connection of its own."""

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` s (negative: 0); True as soon as a wake-up arrives
        (each committed enqueue sends one; a rolled-back one none), False on timeout.

        Subscribes on the first call (earlier enqueues are not seen). After a lost
        connection it raises ``BackendUnavailable`` once and resubscribes on the next
        call; wake-ups sent meanwhile are lost, so callers also poll (ADR 20).
        """
        ...

    def interrupt(self) -> None:
        """End the ``wait`` in progress at once (it returns False), or the next one if
        none is; safe from any thread. Before the first ``wait`` (the subscription)
        it may be lost. The claim loop waits on its listener, and a handler finishing
        or ``stop()`` ends that wait this way (ADR 0132)."""
        ...

    def close(self) -> None:
        """End the subscription; idempotent."""
        ...


class Leadership(Protocol):
    """A held, exclusive role (e.g. the one active beat of a prefix)."""

    def is_held(self) -> bool:
        """Check (with a round trip) that the role is still ours; False, never raising,
        once the session that holds it is gone (the role went with it)."""
        ...

    def release(self) -> None:
        """Give the role up so the next ``try_lead`` takes it; idempotent, never raises."""
        ...


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


class Coordination(Protocol):
    """What workers and beats wait and agree on: the database clock, wake-ups,
    exclusive roles (ADR 20, 0102, 0131).

    Used by the worker's waiter (``listen``, ``time_until_visible``;
    ``runtime/waiting.py``), beat (``now``, ``try_lead``), the pruner
    (``try_lead``) and the App (``leader``, for the CLI and the dashboard).
    """

    def time_until_visible(self, kinds: Collection[str]) -> timedelta | None:
        """Database time until the soonest pending ``visible_at`` among ``kinds``.

        ``None`` when no pending job of those kinds exists (or no kinds); zero or
        negative when one is already due.
        """
        ...

    def now(self) -> datetime:
        """The database clock, the one clock of lifecycle columns; timezone-aware."""
        ...

    def listen(self) -> Listener:
        """A new subscription to this prefix's enqueue wake-ups; the caller closes it."""
        ...

    def try_lead(self, role: str) -> Leadership | None:
        """Take the exclusive ``role`` for this prefix, or None when another holds it.

        Held until released, or until the holder's session ends; other prefixes'
        roles are independent.
        """
        ...

    def leader(self, role: str) -> Leader | None:
        """Who holds ``role`` of this prefix now (``try_lead``'s), or None when nobody does.

        Read from the held role itself, not from a record its holder writes:
        a holder that died stops being shown when its session ends, and
        holding a role costs no write (ADR 0131).
        """
        ...


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

    def pending_migrations(self) -> tuple[list[AppliedMigration], str]:
        """What ``migrate`` would apply now, in order, and the SQL it would run for it;
        applies nothing. Raises as ``migrate`` does before applying (ADR 0136)."""
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


class Workers(Protocol):
    """The worker registry (ADR 0119).

    Written by each worker's registration service (``runtime/registration.py``:
    ``register_worker``, ``heartbeat_worker``, ``deregister_worker``,
    ``unserved_kinds``); read by the App (``list_workers``, ``unserved_kinds``).
    """

    def register_worker(self, worker: WorkerRegistration, *, expires_in: timedelta) -> None:
        """Write ``worker``'s registry entry afresh: started and heartbeat now, running 0,
        live until ``now() + expires_in``; an entry of the same id is replaced (ADR 0119)."""
        ...

    def heartbeat_worker(
        self, worker: WorkerRegistration, *, running: int, expires_in: timedelta, sweep_limit: int
    ) -> list[str]:
        """Refresh ``worker``'s heartbeat, ``running`` and expiry (``now() + expires_in``),
        re-creating the entry (started now) if it was swept; also delete up to
        ``sweep_limit`` other entries whose expiry has passed. Returns the ids deleted.

        Concurrent heartbeats never wait on each other's sweeps, and an entry
        refreshed before a sweep reaches it is not deleted.
        """
        ...

    def deregister_worker(self, worker_id: str) -> bool:
        """Delete this worker's registry entry; False when it had none."""
        ...

    def list_workers(self) -> list[WorkerInfo]:
        """Registry entries not yet expired, newest ``started_at`` first, then by id."""
        ...

    def unserved_kinds(self) -> list[str]:
        """Kinds with a due pending job (``visible_at <= now()``) that no unexpired
        registry entry serves, sorted; ``[]`` when every due kind is served."""
        ...


class Results(Protocol):
    """Jobs' stored results and the wake-ups of their waiters (ADR 0124).

    Used by ``results.wait_for_result`` and ``results.status_of`` (the App's
    ``result`` and ``status``).
    """

    def read_result(self, job_id: str) -> StoredResult | None:
        """The job's status, stored result (encoded JSON; ``None`` when none is
        stored) and last journal note; ``None`` when no such job exists."""
        ...

    def await_result(self, job_id: str) -> None:
        """Mark a pending or claimed job as awaited, so that the ``finish`` that ends
        it wakes ``listen_result`` subscribers; a terminal or unknown job is left
        alone. Idempotent; the mark lasts as long as the row. Callers read the job
        again after marking it: an end recorded just before the mark sends nothing."""
        ...

    def listen_result(self, job_id: str) -> Listener:
        """Wake-ups for one awaited job's end, on a connection of its own (subscribed
        on the first ``wait``). A wake-up is a hint: the waiter reads the row again;
        ends not recorded by ``finish`` (recovery, cancel) send none, so waiters poll."""
        ...


class Workflows(Protocol):
    """Chains and chords as rows (ADR 0125, 0131).

    Written by ``workflows.py`` (``enqueue_workflow``); read by the App
    (``workflow``, ``workflows``, ``workflow_of``). ``finish`` (``Leases``) hands
    results on.
    """

    def enqueue_workflow(self, workflow: NewWorkflow) -> None:
        """Write every step (the first ones pending, the others waiting) and edge of
        ``workflow`` in one transaction, with one wake-up: all or nothing. ``finish``
        then hands each completed step's result on to its children in the
        transaction that records it."""
        ...

    def get_workflow(self, workflow_id: str) -> Workflow | None:
        """Every remaining step of the workflow, in position order; ``None`` when it
        has none (no such workflow, or cleaned up)."""
        ...

    def list_workflows(self, *, limit: int, before: str | None) -> list[WorkflowSummary]:
        """Up to ``limit`` workflows, newest first, each with its steps counted by state;
        only those created before the workflow ``before`` (its id) when given."""
        ...

    def workflow_id_of(self, job_id: str) -> str | None:
        """The workflow the job (or waiting step) ``job_id`` is a step of; None for a
        plain job or an unknown id."""
        ...


class Schema(Protocol):
    """The schema and the backend's own lifecycle (ADR 24, 0118).

    Used by the App: ``migrate``, ``check_schema`` (each service's start check)
    and ``close``/``aclose``.
    """

    def migrate(self) -> list[AppliedMigration]:
        """Apply pending migrations in version order (ADR 24); returns those applied now.

        Idempotent: ``[]`` when up to date. Raises ``ChecksumMismatch`` or
        ``DatabaseAhead`` (nothing applied), ``MigrationError`` when a file fails
        (that file rolled back).
        """
        ...

    def check_schema(self) -> str:
        """Check that this prefix's tables are there and readable; returns where the
        data lives, for a start banner (``host:port/dbname``, never a password).

        Uses a session of its own, so a refusal is reported at once rather than
        after a pool's wait. Raises ``SchemaMissing`` (run ``venturi migrate``),
        ``DatabaseRefused`` (no such database, login refused) or
        ``BackendUnavailable`` (an outage). Services call it once at start
        (ADR 0118).
        """
        ...

    def close(self) -> None:
        """Close the backend's own connections; idempotent. Listeners and
        leaderships it handed out are closed by their holders."""

    async def aclose(self) -> None:
        """``close``, from async code: the running loop's sessions are closed by awaiting."""
        ...


class Backend(
    Enqueue, Claims, Leases, Coordination, Operator, Workers, Results, Workflows, Schema, Protocol
):
    """Every role: what a storage adapter implements and what the App holds.

    A caller that needs one role types against it, not against ``Backend``.
    """
