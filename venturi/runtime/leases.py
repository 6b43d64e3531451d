"""Leases (ADR 19, 0109): keep in-flight claims alive, and recover the ones that lapsed.

The ``LeaseKeeper`` renews every claim it holds each ``min(lease) / 3`` of the
kinds served, each claim with its own task's lease, so a lease only lapses
when its worker stops renewing it. Renewal is fenced: a claim recovered by
someone else comes back missing, is logged as lost and no longer renewed.

Every worker also sweeps for expired leases every ``recovery_interval`` (at
most 10 s); the adapter's ``SKIP LOCKED`` makes many sweepers cheap.

A claim can be given a deadline (its run's time limit, or the end of the
grace after a cancellation request): past it the claim is no longer renewed,
so a handler that hangs cannot keep its job forever even when the worker's
own ending of the run fails; recovery takes it after the lease (ADR 0121).
Renewal also reports which held claims an operator asked to cancel.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta

from venturi.backend import Leases
from venturi.events import Events, JobsRecovered
from venturi.options import DEFAULT_LEASE, DEFAULT_MAX_FAILURES
from venturi.types import Claim, ClaimedJob

__all__ = ["MAX_RECOVERY_INTERVAL", "LeaseKeeper"]

logger = logging.getLogger(__name__)

#: Rows recovered per sweep round trip; a full batch sweeps again at once.
RECOVERY_BATCH = 500
MAX_RECOVERY_INTERVAL = 10.0


class LeaseKeeper:
    """The claims one worker holds, their renewal, and the stale-claim sweep.

    Options:
        leases: the lease of every kind this worker may claim.
        max_failures: the backstop of every kind the App knows, for recovery.
        recovery_interval: seconds between two sweeps (0 < interval <= 10).
        on_recovered: called after a sweep recovered rows (they may be claimable now).
        on_cancel_requested: called with the ids of held claims whose cancellation
            was requested, after each renewal that found some.
        events: the App's event hub, told of recoveries (ADR 0127).

    ``step()`` does whatever is due and returns the seconds until the next
    thing is; a ``ServiceThread`` runs it. ``renew_once()`` and
    ``recover_once()`` are the single iterations tests call.
    """

    def __init__(
        self,
        backend: Leases,
        *,
        leases: Mapping[str, timedelta],
        max_failures: Mapping[str, int],
        recovery_interval: float = 5.0,
        on_recovered: Callable[[], None] | None = None,
        on_cancel_requested: Callable[[set[str]], None] | None = None,
        events: Events | None = None,
    ) -> None:
        self._backend = backend
        self._events = events
        self._on_recovered = on_recovered
        self._on_cancel_requested = on_cancel_requested
        self._leases = dict(leases)
        self._max_failures = dict(max_failures)
        self.recovery_interval = recovery_interval
        shortest = min(self._leases.values(), default=DEFAULT_LEASE)
        self.renew_interval = max(shortest.total_seconds() / 3, 0.05)
        self._lock = threading.Lock()
        self._held: dict[str, tuple[Claim, str]] = {}
        #: Monotonic times after which a held claim is no longer renewed.
        self._deadlines: dict[str, float] = {}
        now = time.monotonic()
        self._next_renew = now + self.renew_interval
        self._next_recovery = now

    def hold(self, jobs: Iterable[ClaimedJob]) -> None:
        """Start renewing these claims."""
        with self._lock:
            for job in jobs:
                self._held[job.claim.job_id] = (job.claim, job.kind)

    def drop(self, job_ids: Iterable[str]) -> None:
        """Stop renewing these claims (the job is being finished or released)."""
        with self._lock:
            for job_id in job_ids:
                self._held.pop(job_id, None)
                self._deadlines.pop(job_id, None)

    def set_deadline(self, job_id: str, deadline: float) -> None:
        """Stop renewing this claim after ``deadline`` (``time.monotonic()``); the
        earlier of two deadlines stands."""
        with self._lock:
            if job_id in self._held:
                self._deadlines[job_id] = min(deadline, self._deadlines.get(job_id, deadline))

    def held(self) -> list[Claim]:
        with self._lock:
            return [claim for claim, _ in self._held.values()]

    def renew_once(self) -> set[str]:
        """Renew every held claim before its deadline, one round trip per distinct
        lease; returns the ids lost. Reports cancellation requests (``on_cancel_requested``)."""
        now = time.monotonic()
        with self._lock:
            overdue = [job_id for job_id, at in self._deadlines.items() if now > at]
            for job_id in overdue:
                del self._deadlines[job_id]
                claim, kind = self._held.pop(job_id)
                logger.warning(
                    "job %s (kind %s) run %d is past its deadline; its lease is no longer "
                    "renewed, so recovery takes it if the worker cannot end it",
                    claim.job_id,
                    kind,
                    claim.run_count,
                    extra={"job_id": claim.job_id, "kind": kind},
                )
            by_lease: dict[timedelta, list[tuple[Claim, str]]] = {}
            for claim, kind in self._held.values():
                by_lease.setdefault(self._leases[kind], []).append((claim, kind))
        missing: list[tuple[Claim, str]] = []
        cancel_requested: set[str] = set()
        for lease, group in by_lease.items():
            renewal = self._backend.renew_leases([claim for claim, _ in group], lease)
            missing.extend(
                (claim, kind) for claim, kind in group if claim.job_id not in renewal.held
            )
            cancel_requested |= renewal.cancel_requested
        if cancel_requested and self._on_cancel_requested is not None:
            self._on_cancel_requested(cancel_requested)
        lost: set[str] = set()
        with self._lock:
            for claim, kind in missing:
                # A claim dropped meanwhile was finished or released by us: not lost.
                if self._held.pop(claim.job_id, None) is None:
                    continue
                lost.add(claim.job_id)
                logger.warning(
                    "lease lost for job %s (kind %s) run %d; its outcome will be discarded",
                    claim.job_id,
                    kind,
                    claim.run_count,
                    extra={"job_id": claim.job_id, "kind": kind},
                )
        return lost

    def recover_once(self) -> int:
        """Sweep one batch of expired leases (ADR 19); returns how many rows were recovered."""
        count = self._backend.recover_stale(
            max_failures=self._max_failures,
            default_max_failures=DEFAULT_MAX_FAILURES,
            limit=RECOVERY_BATCH,
        )
        if count:
            logger.warning("recovered %d job(s) whose lease had expired", count)
            if self._events is not None and self._events.active:
                self._events.emit(JobsRecovered(count=count))
            if self._on_recovered is not None:
                self._on_recovered()
        return count

    def step(self) -> float:
        now = time.monotonic()
        if now >= self._next_renew:
            if self.held():
                self.renew_once()
            self._next_renew = time.monotonic() + self.renew_interval
        if now >= self._next_recovery:
            full = self.recover_once() >= RECOVERY_BATCH
            self._next_recovery = now if full else time.monotonic() + self.recovery_interval
        return max(0.0, min(self._next_renew, self._next_recovery) - time.monotonic())
