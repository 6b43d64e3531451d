"""Runs the worker ends itself: past their task's ``time_limit``, or cancelled (ADR 0121).

A cancel request reaches the worker through lease renewal. A job not started
yet is ended at once, and so is an async run (a coroutine can be cancelled
for real); a running sync handler is told (``ctx.is_cancelled()``) and gets
one renewal interval to return. The limits thread (``Deadlines.step``) ends
every run past its deadline, that one or its task's ``time_limit``, and
records it as ended by the worker.

Python cannot kill a thread, so a sync run the worker ends keeps running in
its handler thread until the handler returns, and its late outcome is
discarded. That thread no longer counts against ``concurrency``: a
replacement handler thread is started, for up to ``concurrency`` such
abandoned threads at once. Beyond that no replacement is started and the
slot stays taken until the abandoned handler returns, so a worker whose
handlers all hang stops claiming instead of piling up threads.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from venturi.runtime.aio import EventLoopThread
from venturi.runtime.committer import Committer
from venturi.runtime.executor import CANCELLED_NOTE, cancelled_by_worker, time_limit_exceeded
from venturi.runtime.held import HeldJob, Holdings
from venturi.runtime.leases import LeaseKeeper
from venturi.runtime.runner import Runner

__all__ = ["Deadlines"]

#: The Worker's logger: log consumers and tests read this name.
logger = logging.getLogger("venturi.worker")

#: The longest the limits thread sleeps when no run has a deadline.
_LIMITS_IDLE_WAIT = 1.0


class Deadlines:
    """The time limits and cancel requests of one cycle's runs.

    Options:
        replace_thread: starts one more handler thread, in place of one
            abandoned to a run the worker ended.
        concurrency: the handler threads; also the most replacements at once.
        wake_claims: wakes the claim loop (an ended run freed its slot).

    ``step()`` is the limits thread's step; it sleeps on the holdings'
    ``limits_changed`` until the soonest deadline.
    """

    def __init__(
        self,
        holdings: Holdings,
        *,
        runner: Runner,
        keeper: LeaseKeeper,
        committer: Committer,
        loop: EventLoopThread | None,
        replace_thread: Callable[[], None],
        concurrency: int,
        wake_claims: Callable[[], None],
    ) -> None:
        self._holdings = holdings
        self._runner = runner
        self._keeper = keeper
        self._committer = committer
        self._loop = loop
        self._replace_thread = replace_thread
        self._concurrency = concurrency
        self._wake_claims = wake_claims

    def cancel_requested(self, job_ids: set[str]) -> None:
        """Renewal found cancellation requests: tell the handlers, and give them one
        renewal interval to stop; a job not started yet is ended at once."""
        now = time.monotonic()
        grace = self._keeper.renew_interval
        holdings = self._holdings
        deadlines: list[tuple[str, float]] = []
        with holdings.lock:
            for job_id in job_ids:
                entry = holdings.in_flight.get(job_id)
                if entry is None or entry.is_abandoned or entry.is_cancel_requested:
                    continue
                entry.is_cancel_requested = True
                logger.info(
                    "job %s (kind %s) run %d: cancellation requested",
                    job_id,
                    entry.job.kind,
                    entry.job.claim.run_count,
                    extra={"job_id": job_id, "kind": entry.job.kind},
                )
                if entry.is_running and entry.is_async:
                    # A coroutine can be cancelled for real: no grace to wait out.
                    self._end_run(entry, CANCELLED_NOTE)
                elif entry.is_running:
                    entry.cancel_at = now + grace
                    deadlines.append((job_id, entry.cancel_at))
                elif not holdings.is_draining:  # when draining, release ends it dead
                    holdings.forget(entry)
                    self._committer.put(cancelled_by_worker(entry.job, now))
            holdings.changed.notify_all()
        for job_id, deadline in deadlines:
            self._keeper.set_deadline(job_id, deadline)
        if deadlines:
            holdings.limits_changed.set()

    def step(self) -> float:
        """End the runs past their deadline, then sleep until the next deadline."""
        holdings = self._holdings
        holdings.limits_changed.clear()
        now = time.monotonic()
        soonest: float | None = None
        ended = 0
        with holdings.lock:
            for entry in list(holdings.in_flight.values()):
                deadline = entry.deadline() if entry.is_running else None
                if deadline is None or entry.is_abandoned:
                    continue
                at, note = deadline
                if now < at:
                    soonest = at if soonest is None else min(soonest, at)
                    continue
                self._end_run(entry, note)
                ended += 1
            if ended:
                holdings.changed.notify_all()
            wait = _LIMITS_IDLE_WAIT if soonest is None else soonest - time.monotonic()
            wait = min(max(wait, 0.0), _LIMITS_IDLE_WAIT)
            holdings.limits_wake_at = time.monotonic() + wait
        if ended:
            self._wake_claims()
        holdings.limits_changed.wait(wait)
        return 0.0

    def _end_run(self, entry: HeldJob, note: str) -> None:
        """Record ``entry``'s run as ended by the worker, and replace its thread when
        allowed (under the holdings' lock, so stop() never misses a replacement); an
        async run is cancelled instead, and its place on the loop is free at once."""
        job = entry.job
        holdings = self._holdings
        holdings.forget(entry)
        entry.is_abandoned = True
        entry.ended_by = note
        if note == CANCELLED_NOTE:
            execution = cancelled_by_worker(job, entry.started)
        else:
            execution = time_limit_exceeded(self._runner.task(job.kind), job, entry.started)
        self._committer.put(execution)
        if entry.is_async:
            assert self._loop is not None
            self._loop.cancel(lambda: entry.aio_task)
            logger.warning(
                "job %s (kind %s) run %d ended by the worker (%s); its coroutine was cancelled",
                job.claim.job_id,
                job.kind,
                job.claim.run_count,
                note,
                extra={"job_id": job.claim.job_id, "kind": job.kind},
            )
            return
        entry.is_replaced = not holdings.is_draining and holdings.replaced < self._concurrency
        if entry.is_replaced:
            holdings.replaced += 1
            self._replace_thread()
        else:
            holdings.unreplaced += 1
        logger.warning(
            "job %s (kind %s) run %d ended by the worker (%s); its handler thread is "
            "abandoned until it returns (%d abandoned, %d of them without a replacement)",
            job.claim.job_id,
            job.kind,
            job.claim.run_count,
            note,
            holdings.replaced + holdings.unreplaced,
            holdings.unreplaced,
            extra={"job_id": job.claim.job_id, "kind": job.kind},
        )
