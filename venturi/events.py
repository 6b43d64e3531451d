"""Events at the boundary of a job's life, and who hears them (SPEC 5.6, ADR 0127).

``app.events.subscribe(callback)`` calls ``callback(event)`` with each event
below, in the thread where it happened, right after it happened::

    def on_event(event: venturi.events.Event) -> None:
        if isinstance(event, venturi.events.RunEnded):
            metrics.observe(event.kind, event.outcome, event.duration)

    unsubscribe = app.events.subscribe(on_event, types=[venturi.events.RunEnded])
    ...
    unsubscribe()

Events are emitted by the layers above the storage adapter (the task's
enqueue paths, the worker's runner, lease keeper and stop, beat); the adapter
stays pure storage. One job's events come in the order of its life:
``JobEnqueued`` (or ``JobMerged``), then per run ``JobClaimed``, ``RunStarted``,
``RunEnded``. ``RunEnded`` says how the handler ended; whether that outcome
was then recorded (or fenced out, ADR 19) is the journal's to say.

Delivery is synchronous, so a subscriber must be fast (a counter, a span, an
append to a queue of its own). The guarantees that keep a subscriber from
breaking a run:

- an exception from a subscriber is caught; the first one of each subscriber
  is logged with its traceback, later ones only counted (``Subscription.errors``);
- a call that takes longer than ``SLOW_SUBSCRIBER`` is logged once per
  subscriber as a warning: the remedy is the subscriber's (hand the work to a
  thread of its own), never a dropped event.

When nobody subscribes and no tracer is installed, an emitting place costs one
attribute read (``Events.active``) and builds no event (bench/observability.py).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from venturi.refs import JobRef
from venturi.types import ClaimedJob, NewJob, Outcome, OutcomeKind, Priority

__all__ = [
    "SLOW_SUBSCRIBER",
    "BeatTicked",
    "Callback",
    "ClaimedJob",
    "Event",
    "Events",
    "JobClaimed",
    "JobEnqueued",
    "JobEvent",
    "JobMerged",
    "JobsRecovered",
    "JobsReleased",
    "NewJob",
    "OutcomeKind",
    "RunEnded",
    "RunStarted",
    "Subscription",
    "Tracer",
    "WorkerStarted",
    "WorkerStopped",
]

logger = logging.getLogger(__name__)

#: A subscriber call longer than this (seconds) is logged once, as a warning.
SLOW_SUBSCRIBER = 0.05


@dataclass(frozen=True, slots=True, kw_only=True)
class Event:
    """What every event has: when it happened (``time.time()``, seconds)."""

    at: float = field(default_factory=time.time)

    @property
    def job_kind(self) -> str | None:
        """The job kind the event is about, for ``subscribe(kinds=...)``; None: no one kind."""
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobEvent(Event):
    """An event about one job."""

    job_id: str
    kind: str

    @property
    def job_kind(self) -> str | None:
        return self.kind


@dataclass(frozen=True, slots=True, kw_only=True)
class JobEnqueued(JobEvent):
    """A new row was written (its transaction may still roll back, with ``connection=``)."""

    priority: Priority


@dataclass(frozen=True, slots=True, kw_only=True)
class JobMerged(JobEvent):
    """An enqueue was folded into a pending sibling (ADR 10): ``job_id`` is the sibling's."""

    absorbed_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class JobClaimed(JobEvent):
    """A worker claimed the job for run ``run``."""

    run: int
    worker_id: str
    created_at: datetime
    failure_count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RunStarted(JobEvent):
    """The handler is about to be called, in this thread."""

    run: int
    worker_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RunEnded(JobEvent):
    """The handler ended: its outcome, the run's duration (seconds), and for a
    failure its note and traceback text (ADR 0121)."""

    run: int
    worker_id: str
    outcome: OutcomeKind
    duration: float
    is_failure: bool
    note: str | None
    traceback: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsRecovered(Event):
    """A lease sweep returned ``count`` jobs whose lease had expired (ADR 19)."""

    count: int


@dataclass(frozen=True, slots=True, kw_only=True)
class JobsReleased(Event):
    """A stopping worker gave ``count`` unfinished jobs back to ``pending`` (ADR 21)."""

    count: int
    worker_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class BeatTicked(JobEvent):
    """Beat enqueued the row of a schedule's tick (``merged``: one already held it)."""

    schedule: str
    eta: datetime | None
    merged: bool


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerStarted(Event):
    worker_id: str
    kinds: tuple[str, ...]
    concurrency: int


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerStopped(Event):
    worker_id: str


Callback = Callable[[Event], None]


class Tracer(Protocol):
    """What ``venturi.contrib.otel`` installs (``Events.tracer``): the two places where
    observing after the fact is not enough. ``enqueue`` wraps a write and returns the
    jobs to write (with their trace headers); ``run`` wraps a handler's call, in its
    thread, so spans the handler makes are children of the run's span."""

    def enqueue(self, jobs: Sequence[NewJob]) -> AbstractContextManager[Sequence[NewJob]]: ...

    def run(self, job: ClaimedJob, worker_id: str) -> AbstractContextManager[None]: ...


class Subscription:
    """One subscriber: calling it (or ``unsubscribe()``) ends the subscription."""

    def __init__(
        self,
        events: Events,
        callback: Callback,
        types: tuple[type[Event], ...] | None,
        kinds: frozenset[str] | None,
    ) -> None:
        self.callback = callback
        self.errors = 0
        self._events = events
        self._types = types
        self._kinds = kinds
        self._warned_slow = False

    def __call__(self) -> None:
        self.unsubscribe()

    def unsubscribe(self) -> None:
        self._events._remove(self)

    def deliver(self, event: Event) -> None:
        if self._types is not None and not isinstance(event, self._types):
            return
        if self._kinds is not None and event.job_kind not in self._kinds:
            return
        started = time.perf_counter()
        try:
            self.callback(event)
        except Exception:
            self.errors += 1
            if self.errors == 1:
                logger.exception(
                    "event subscriber %r raised on %s; the run goes on, and later errors "
                    "of this subscriber are counted, not logged",
                    self.callback,
                    type(event).__name__,
                )
        elapsed = time.perf_counter() - started
        if elapsed > SLOW_SUBSCRIBER and not self._warned_slow:
            self._warned_slow = True
            logger.warning(
                "event subscriber %r took %.0f ms on %s; subscribers run in the emitting "
                "thread and must be fast (hand slow work to a thread of your own)",
                self.callback,
                elapsed * 1000,
                type(event).__name__,
            )


class Events:
    """An App's event hub (``app.events``)."""

    def __init__(self) -> None:
        #: True when a subscriber or a tracer is installed: the one check on hot paths.
        self.active = False
        self._subscriptions: tuple[Subscription, ...] = ()
        self._tracer: Tracer | None = None
        self._lock = threading.Lock()

    @property
    def tracer(self) -> Tracer | None:
        return self._tracer

    @tracer.setter
    def tracer(self, tracer: Tracer | None) -> None:
        with self._lock:
            self._tracer = tracer
            self._refresh()

    def subscribe(
        self,
        callback: Callback,
        *,
        types: Collection[type[Event]] | None = None,
        kinds: Collection[str] | None = None,
    ) -> Subscription:
        """Call ``callback`` with each event (of ``types``, about jobs of ``kinds``).

        With ``kinds``, events about no one job kind (worker started, jobs
        recovered) are not delivered. Returns the handle that unsubscribes.
        """
        subscription = Subscription(
            self,
            callback,
            tuple(types) if types is not None else None,
            frozenset(kinds) if kinds is not None else None,
        )
        with self._lock:
            self._subscriptions = (*self._subscriptions, subscription)
            self._refresh()
        return subscription

    def emit(self, event: Event) -> None:
        """Deliver ``event`` to every subscriber, in subscription order; never raises."""
        for subscription in self._subscriptions:
            subscription.deliver(event)

    # -- the emitting places' helpers (called only when ``active``) -------------------

    def enqueue(
        self, jobs: Sequence[NewJob], write: Callable[[Sequence[NewJob]], list[JobRef]]
    ) -> list[JobRef]:
        """``write(jobs)`` inside the tracer's enqueue span, then the enqueue events."""
        tracer = self._tracer
        if tracer is None:
            refs = write(jobs)
            self.enqueued(jobs, refs)
            return refs
        with tracer.enqueue(jobs) as traced:
            refs = write(traced)
            self.enqueued(jobs, refs)
        return refs

    def enqueued(self, jobs: Sequence[NewJob], refs: Sequence[JobRef]) -> None:
        for job, ref in zip(jobs, refs, strict=True):
            if ref.merged:
                self.emit(JobMerged(job_id=ref.id, kind=job.kind, absorbed_id=job.id))
            else:
                self.emit(JobEnqueued(job_id=ref.id, kind=job.kind, priority=job.priority))

    def claimed(self, jobs: Sequence[ClaimedJob], worker_id: str) -> None:
        for job in jobs:
            self.emit(
                JobClaimed(
                    job_id=job.claim.job_id,
                    kind=job.kind,
                    run=job.claim.run_count,
                    worker_id=worker_id,
                    created_at=job.created_at,
                    failure_count=job.failure_count,
                )
            )

    @contextmanager
    def running(self, job: ClaimedJob, worker_id: str) -> Iterator[None]:
        """Around one handler call: ``RunStarted`` inside the tracer's run span."""
        tracer = self._tracer
        if tracer is None:
            self._started(job, worker_id)
            yield
            return
        with tracer.run(job, worker_id):
            self._started(job, worker_id)
            yield

    def ended(self, job: ClaimedJob, worker_id: str, outcome: Outcome, duration: float) -> None:
        claim = job.claim
        self.emit(
            RunEnded(
                job_id=claim.job_id,
                kind=job.kind,
                run=claim.run_count,
                worker_id=worker_id,
                outcome=outcome.kind,
                duration=duration,
                is_failure=outcome.is_failure,
                note=outcome.note,
                traceback=outcome.traceback,
            )
        )

    def _started(self, job: ClaimedJob, worker_id: str) -> None:
        claim = job.claim
        self.emit(
            RunStarted(job_id=claim.job_id, kind=job.kind, run=claim.run_count, worker_id=worker_id)
        )

    def _remove(self, subscription: Subscription) -> None:
        with self._lock:
            self._subscriptions = tuple(s for s in self._subscriptions if s is not subscription)
            self._refresh()

    def _refresh(self) -> None:
        self.active = bool(self._subscriptions) or self._tracer is not None
