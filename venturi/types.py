"""Values shared by every layer: the vocabulary of the backend protocol.

Everything here is a frozen dataclass or an enum whose values spell the
database's strings exactly, so no layer passes dict rows around (STYLE R10).
JSON that crosses the boundary towards the database travels already encoded
(``str``), because encoding is where bad input is refused (serialization.py);
JSON coming back is decoded by the adapter. ``Cursor`` and its text form are
defined in ``venturi.cursor`` and listed here with the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import IntEnum, StrEnum
from typing import Any

from venturi.cursor import Cursor, decode_cursor, encode_cursor
from venturi.durable import RecordedStep, SentEvent

__all__ = [
    "AppliedMigration", "Claim", "ClaimFloor", "ClaimedJob", "Cursor", "Finished", "JobDetail",
    "JobRow", "JobSummary", "JournalEntry", "KeyOccupancy", "KindLimits", "KindStats", "Leader",
    "LimitedClaim", "MergeAction", "MergeDecision", "MergeResolver", "MinuteCounts", "NewEdge",
    "NewJob", "NewStep", "NewWorkflow", "Outcome", "OutcomeKind", "Page", "Priority", "RateLimit",
    "Renewal", "SharedLimit", "Stats", "Status", "StepState", "StoredResult", "SummaryPage",
    "Throughput", "WorkerInfo", "WorkerRegistration", "Workflow", "WorkflowStep",
    "WorkflowSummary", "decode_cursor", "encode_cursor",
]


class Priority(IntEnum):
    """The three tiers (ADR 22); lower numbers are claimed first."""

    HIGH = 0
    NORMAL = 1
    LOW = 2


class Status(StrEnum):
    """Lifecycle states (ADR 5)."""

    PENDING = "pending"
    CLAIMED = "claimed"
    COMPLETED = "completed"
    DEAD = "dead"

    @property
    def is_terminal(self) -> bool:
        return self in (Status.COMPLETED, Status.DEAD)


class OutcomeKind(StrEnum):
    """Journal outcomes (ADR 11): the four run endings and three lifecycle entries."""

    COMPLETED = "completed"
    PAUSED = "paused"
    RETRIED = "retried"
    DEAD = "dead"
    STALE_RECOVERED = "stale-recovered"
    RELEASED = "released"
    MERGED = "merged"


class MergeAction(StrEnum):
    KEEP = "keep"
    REPLACE = "replace"
    COMBINE = "combine"
    INDEPENDENT = "independent"


@dataclass(frozen=True, slots=True)
class MergeDecision:
    """What to do with the oldest pending sibling of a deduplicated job (ADR 10).

    ``payload`` is the encoded JSON object the surviving row takes for
    ``REPLACE`` (the incoming payload) and ``COMBINE``; ``None`` otherwise.
    """

    action: MergeAction
    payload: str | None = None


#: Called by the backend, under the dedup lock, with the decoded payload of the
#: oldest pending sibling; returns the decision for the incoming job.
MergeResolver = Callable[[Mapping[str, Any]], MergeDecision]


@dataclass(slots=True)
class NewJob:
    """A validated job, ready to insert.

    ``payload`` is an encoded JSON object of named arguments. Eligibility is
    ``eta`` when given, else database ``now() + delay`` (ADR 12): Python never
    sends its own wall clock for immediate work. The expiry, likewise, is
    ``expires_at`` when given, else database ``now() + expires_in``, else none
    (ADR 0135).

    Treat it as immutable (make changed copies with ``dataclasses.replace``):
    it is not ``frozen`` only because a frozen dataclass's ``__init__`` sets
    each field through ``object.__setattr__``, about a tenth of a
    ``delay_many`` job's time (ADR 0132).
    """

    id: str
    kind: str
    payload: str
    priority: Priority = Priority.NORMAL
    delay: timedelta = timedelta(0)
    eta: datetime | None = None
    dedup_key: str | None = None
    merge: MergeResolver | None = None
    #: Headers: an instrumented App's trace context (W3C ``traceparent``, ADR 0127) and
    #: the failure callback of ``link_error=`` (ADR 0138).
    headers: Mapping[str, str] | None = None
    #: The key claims of a ``fair_key`` task rotate by (ADR 0129); None: a plain job.
    fair_key: str | None = None
    expires_in: timedelta | None = None
    expires_at: datetime | None = None
    #: A merge into a pending sibling moves its start to now + this (ADR 0138).
    debounce: timedelta | None = None


@dataclass(frozen=True, slots=True)
class Claim:
    """The fence of every state change after a claim (ADR 19)."""

    job_id: str
    claimed_by: str
    run_count: int


@dataclass(frozen=True, slots=True)
class ClaimedJob:
    """A job a worker now holds. ``payload`` and ``carry`` are decoded JSON."""

    claim: Claim
    kind: str
    payload: Any
    carry: Any
    priority: Priority
    failure_count: int
    created_at: datetime
    claim_expires_at: datetime
    #: The trace context headers its enqueue stored, if it was instrumented (ADR 0127).
    headers: Mapping[str, str] | None = None
    #: The workflow it is a step of (ADR 0125), else None.
    workflow_id: str | None = None
    #: Its expiry had passed when it was claimed: it ends dead, unrun (ADR 0135).
    is_expired: bool = False


@dataclass(frozen=True, slots=True)
class ClaimFloor:
    """Where a kind's claim probe may start in claim order (see venturi/runtime/floors.py).

    A promise from an earlier claim: no unclaimed eligible row of the kind
    sorted before ``(priority, created_at)`` when that claim scanned.
    """

    priority: int
    created_at: datetime


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run ended, as the backend must record it (ADR 11, 13, 15, 0124).

    ``kind`` is one of COMPLETED, PAUSED, RETRIED, DEAD. ``is_failure`` adds one
    to ``failure_count`` (retried, and dead from an error or the backstop).
    PAUSED and RETRIED return the row to ``pending`` at ``eta`` if given, else
    at database ``now() + delay``. ``carry`` and ``attachment`` are encoded JSON;
    ``carry=None`` leaves the row's carry as it is. ``traceback`` is the text
    of the exception that ended the run, already bounded (ADR 0121): text, so
    no frame of the run stays alive while the outcome waits to be recorded.
    """

    kind: OutcomeKind
    note: str | None = None
    is_failure: bool = False
    delay: timedelta = timedelta(0)
    eta: datetime | None = None
    carry: str | None = None
    attachment: str | None = None
    traceback: str | None = None
    #: The handler's return value as encoded strict JSON, on COMPLETED (ADR 0124).
    result: str | None = None


@dataclass(frozen=True, slots=True)
class Renewal:
    """What ``Backend.renew_leases`` found: the claims still held, and which of
    them an operator asked to cancel (a subset of ``held``; ADR 0121)."""

    held: frozenset[str] = frozenset()
    cancel_requested: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Finished:
    """One claim and its outcome, as handed to ``Backend.finish`` in batches.

    ``in_workflow``: the job is a workflow step (``ClaimedJob.workflow_id``), so
    its finish hands results on (ADR 0125). A hint for the backend's choice of
    statement, not a condition of correctness: a step finished without it is
    still recorded with its hand-on.
    """

    claim: Claim
    outcome: Outcome
    in_workflow: bool = False


@dataclass(frozen=True, slots=True)
class JobRow:
    """A job row as stored, JSON columns decoded."""

    id: str
    kind: str
    payload: Any
    priority: Priority
    status: Status
    created_at: datetime
    visible_at: datetime
    claim_expires_at: datetime | None
    claimed_by: str | None
    finished_at: datetime | None
    run_count: int
    failure_count: int
    carry: Any
    dedup_key: str | None
    #: When an operator asked the running job to stop (ADR 0121); None: never.
    cancel_requested_at: datetime | None = None
    #: When it may no longer start a run (ADR 0135); None: never, or not read back.
    expires_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class JournalEntry:
    id: int
    job_id: str
    kind: str
    run_no: int
    recorded_at: datetime
    outcome: OutcomeKind
    note: str | None
    attachment: Any
    #: The failed run's traceback, innermost frames kept when bounded (ADR 0121).
    traceback: str | None = None


@dataclass(frozen=True, slots=True)
class JobDetail:
    """A job and its timeline, oldest entry first (ADR 18); a durable job's recorded
    steps in recording order and the events sent to it (ADR 0137)."""

    job: JobRow
    journal: tuple[JournalEntry, ...]
    steps: tuple[RecordedStep, ...] = ()
    events: tuple[SentEvent, ...] = ()


@dataclass(frozen=True, slots=True)
class Page:
    jobs: tuple[JobRow, ...]
    next: Cursor | None


@dataclass(frozen=True, slots=True)
class KindStats:
    kind: str
    counts: Mapping[Status, int]
    #: Pending rows whose ``visible_at`` is still in the future.
    scheduled: int
    #: Age of the oldest eligible pending row, or None when nothing is eligible.
    oldest_eligible_age: timedelta | None


@dataclass(frozen=True, slots=True)
class Stats:
    kinds: tuple[KindStats, ...] = field(default_factory=tuple)

    @property
    def oldest_eligible_age(self) -> timedelta | None:
        ages = [k.oldest_eligible_age for k in self.kinds if k.oldest_eligible_age is not None]
        return max(ages, default=None)


@dataclass(frozen=True, slots=True)
class AppliedMigration:
    version: int
    name: str


@dataclass(frozen=True, slots=True)
class JobSummary:
    """A listed job with its last journal entry: what an operator scans a list for."""

    job: JobRow
    last_outcome: OutcomeKind | None
    last_note: str | None


@dataclass(frozen=True, slots=True)
class SummaryPage:
    jobs: tuple[JobSummary, ...]
    next: Cursor | None


@dataclass(frozen=True, slots=True)
class MinuteCounts:
    """Jobs of one kind that finished in the minute starting at ``minute``."""

    kind: str
    minute: datetime
    completed: int
    dead: int


@dataclass(frozen=True, slots=True)
class Throughput:
    """Finished jobs per kind and minute; ``current_minute`` is the database's, so
    the minutes with no row (nothing finished) can be laid out around it."""

    current_minute: datetime
    minutes: tuple[MinuteCounts, ...]


@dataclass(frozen=True, slots=True)
class WorkerRegistration:
    """What a running Worker writes about itself in the registry (ADR 0119).

    Fixed from ``start()`` to ``stop()``; ``id`` is ``host:pid`` (the
    ``claimed_by`` of its claims), with ``#2``, ``#3``... for further Workers
    running at the same time in one process.
    """

    id: str
    version: str
    kinds: tuple[str, ...]
    concurrency: int


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A live worker's registry entry, as ``App.workers()`` returns it (ADR 0119).

    ``running`` is how many jobs its handlers were running at its last
    heartbeat; the entry is live until ``expires_at`` (database time), which
    each heartbeat pushes out.
    """

    id: str
    version: str
    kinds: tuple[str, ...]
    concurrency: int
    running: int
    started_at: datetime
    heartbeat_at: datetime
    expires_at: datetime

    @property
    def claimed_by(self) -> str:
        """The ``claimed_by`` of this worker's claims: the id without its ``#n``."""
        return self.id.partition("#")[0]


@dataclass(frozen=True, slots=True)
class StoredResult:
    """What a waiter reads (ADR 0124): the job's status, its result as encoded JSON
    (``None``: none stored), and the note of its last journal entry."""

    status: Status
    result: str | None
    note: str | None


@dataclass(frozen=True, slots=True)
class RateLimit:
    """``starts`` per ``period`` across every worker of the prefix (ADR 0128).

    Starts are spaced ``interval`` apart, with at most ``burst`` handed out at
    once (a tenth of ``starts``, at least one), so a limit is a steady rate,
    not ``starts`` at the top of each period.
    """

    starts: int
    period: timedelta

    @property
    def interval(self) -> timedelta:
        return self.period / self.starts

    @property
    def burst(self) -> int:
        return max(1, self.starts // 10)


@dataclass(frozen=True, slots=True)
class KindLimits:
    """What bounds the claims of one kind across workers (ADR 0128); None: no bound."""

    global_concurrency: int | None = None
    rate_limit: RateLimit | None = None
    #: At most this many claimed jobs per key of the kind (ADR 0138); None: no per-key cap.
    key_concurrency: int | None = None
    #: ``rate_limit`` holds per key rather than for the kind (``rate_key=``, ADR 0138).
    rate_per_key: bool = False
    #: The shared limits the kind's jobs count against (``app.limit``, ADR 0138).
    shared: tuple[SharedLimit, ...] = ()

    @property
    def is_keyed(self) -> bool:
        """Claimed by key (``claim_keyed_jobs``): a per-key cap or a per-key rate."""
        return self.key_concurrency is not None or self.rate_per_key


@dataclass(frozen=True, slots=True)
class SharedLimit:
    """A limit several kinds share (``app.limit(name, ...)``, ADR 0138): at most
    ``concurrency`` jobs of ``kinds`` claimed at once, at most ``rate`` starts of them."""

    name: str
    kinds: tuple[str, ...]
    concurrency: int | None = None
    rate: RateLimit | None = None


@dataclass(frozen=True, slots=True)
class KeyOccupancy:
    """One key of a keyed kind (ADR 0138): its jobs claimed now (the slots it holds)
    and its pending jobs."""

    key: str
    running: int
    pending: int


@dataclass(frozen=True, slots=True)
class LimitedClaim:
    """A claim under ``KindLimits``: the jobs, and the kinds it could not claim yet.

    ``throttled`` maps each kind at its global cap or out of rate tokens to how
    long to wait before asking for it again.
    """

    jobs: list[ClaimedJob]
    throttled: dict[str, timedelta]


class StepState(StrEnum):
    """A workflow step's state (ADR 0125): ``waiting`` until every parent completed
    (not a job yet), then its job's status; ``dead`` also for a step that never ran
    because a dependency ended dead."""

    WAITING = "waiting"
    PENDING = "pending"
    CLAIMED = "claimed"
    COMPLETED = "completed"
    DEAD = "dead"

    @property
    def is_terminal(self) -> bool:
        return self in (StepState.COMPLETED, StepState.DEAD)


@dataclass(frozen=True, slots=True)
class WorkflowStep:
    """One step of a workflow, as ``App.workflow(id)`` returns it (ADR 0125).

    ``id`` is the step's job id (``app.job(id)`` shows its timeline once it is a
    job: not while ``waiting``, nor when it never ran), ``state`` its state, ``parents``
    the steps it waits for, in the order their results reach it, and
    ``position`` its place in the workflow as built (0 first; a parent always
    comes before its children). ``note`` is the last journal note, e.g.
    ``dependency <id> (<kind>) ended dead``.
    """

    id: str
    kind: str
    state: StepState
    parents: tuple[str, ...]
    position: int
    note: str | None = None
    finished_at: datetime | None = None


@dataclass(frozen=True, slots=True)
class Workflow:
    """Every step of one workflow (chain, chord, or a nesting of them), in ``position`` order."""

    id: str
    steps: tuple[WorkflowStep, ...]

    @property
    def state(self) -> StepState:
        """``dead`` if any step is, ``completed`` when all are, else ``pending``."""
        states = {s.state for s in self.steps}
        if StepState.DEAD in states:
            return StepState.DEAD
        if states == {StepState.COMPLETED}:
            return StepState.COMPLETED
        return StepState.PENDING


@dataclass(frozen=True, slots=True)
class NewStep:
    """One step of a workflow to enqueue (ADR 0125): its job (payload without the
    parents' results), how many parents it waits for (0: pending at once), the
    parameter that receives their results (``None``: none, an ``.si`` step or a
    first step) and whether as a list (``input_all``: after a group), and its
    ``position`` in the workflow."""

    job: NewJob
    waiting_for: int
    input_arg: str | None
    input_all: bool
    position: int


@dataclass(frozen=True, slots=True)
class NewEdge:
    """``child_id`` waits for ``parent_id``; the parent's result is the child's input
    number ``position``."""

    parent_id: str
    child_id: str
    position: int


@dataclass(frozen=True, slots=True)
class NewWorkflow:
    """A whole workflow, written in one transaction by ``Backend.enqueue_workflow``."""

    id: str
    steps: tuple[NewStep, ...]
    edges: tuple[NewEdge, ...]
    #: The kind enqueued for each of its jobs that ends dead (``chain.on_error``, ADR 0138).
    on_error: str | None = None


@dataclass(frozen=True, slots=True)
class Leader:
    """Who holds a leadership role of the prefix now, e.g. the active beat (ADR 0131).

    ``holder`` is the ``host:pid`` of the process that took the role (None when
    its session does not say so). ``since`` is when it took it, by the database
    clock, to within the connection's set-up (None when the database role that
    reads may not see other roles' session times). ``session_pid`` is the server
    process of the session that holds it: ending that session hands the role over.
    """

    role: str
    holder: str | None
    since: datetime | None
    session_pid: int


@dataclass(frozen=True, slots=True)
class WorkflowSummary:
    """A workflow as a list of recent workflows shows it (ADR 0131): its steps counted
    by state, when it was enqueued, and when its last step so far ended."""

    id: str
    counts: Mapping[StepState, int]
    created_at: datetime
    finished_at: datetime | None

    @property
    def steps(self) -> int:
        return sum(self.counts.values())

    @property
    def is_finished(self) -> bool:
        """Every step completed or dead (until an operator retries a dead one)."""
        return all(n == 0 for state, n in self.counts.items() if not state.is_terminal)

    @property
    def state(self) -> StepState:
        """As ``Workflow.state``: ``dead`` if any step is, ``completed`` when all are,
        else ``pending``."""
        if self.counts.get(StepState.DEAD, 0):
            return StepState.DEAD
        if self.counts.get(StepState.COMPLETED, 0) == self.steps:
            return StepState.COMPLETED
        return StepState.PENDING
