"""The handler side of a running worker: its threads, and each held job's run.

``concurrency`` handler threads each run one job at a time (no thread per
job), taking claimed jobs from one local queue. An ``async def`` handler's
run is a task on the worker's event loop instead (runtime/aio.py, ADR 0126):
it never holds a handler thread. Either way a run starts only if the job is
still held (not released at stop, not cancelled before it started), and its
outcome goes to the committer unless the worker ended the run meanwhile
(runtime/deadlines.py), in which case it is logged and discarded.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
import time
from collections.abc import Callable

from venturi.runtime.aio import EventLoopThread
from venturi.runtime.committer import Committer
from venturi.runtime.executor import Execution
from venturi.runtime.held import HeldJob, Holdings
from venturi.runtime.leases import LeaseKeeper
from venturi.runtime.prefetch import Prefetch
from venturi.runtime.runner import Runner
from venturi.types import ClaimedJob

__all__ = ["HandlerThreads", "Runs"]

#: The Worker's logger: log consumers and tests read this name.
logger = logging.getLogger("venturi.worker")


class HandlerThreads:
    """The handler threads of one cycle, each running the jobs ``put`` here with ``run``.

    A thread ends at its sentinel (``request_stop``), or once ``run`` returns
    True: its slot went to a replacement thread while its run was abandoned.
    """

    def __init__(self, run: Callable[[ClaimedJob], bool], *, count: int, name: str) -> None:
        self._run = run
        self._name = name
        self._jobs: queue.SimpleQueue[ClaimedJob | None] = queue.SimpleQueue()
        self._threads = [self._thread(number) for number in range(count)]

    def put(self, job: ClaimedJob) -> None:
        self._jobs.put(job)

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def add(self) -> None:
        """Start one more thread, in place of one abandoned to a hung handler."""
        thread = self._thread(len(self._threads))
        self._threads.append(thread)
        thread.start()

    def request_stop(self) -> None:
        for _ in self._threads:
            self._jobs.put(None)

    def join(self, deadline: float) -> bool:
        for thread in self._threads:
            thread.join(timeout=max(0.0, deadline - time.monotonic()))
        stuck = sum(thread.is_alive() for thread in self._threads)
        if stuck:
            logger.warning(
                "%d of %d handlers were still running at shutdown; their jobs were released "
                "back to pending and will run again, and whatever those handlers do now "
                "is discarded",
                stuck,
                len(self._threads),
            )
        return not stuck

    def _thread(self, number: int) -> threading.Thread:
        return threading.Thread(target=self._serve, name=f"{self._name}-{number}", daemon=True)

    def _serve(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None or self._run(job):
                return


class Runs:
    """Runs held jobs, in a handler thread (``run_in_thread``) or on the event loop
    (``start_async``), and hands each outcome on.

    Options:
        is_claim_due: whether a claim is due now that ``entry`` ended (called
            under the holdings' lock); the claim loop is woken only then.
        wake_claims: wakes the claim loop.
    """

    def __init__(
        self,
        holdings: Holdings,
        *,
        runner: Runner,
        keeper: LeaseKeeper,
        committer: Committer,
        prefetch: Prefetch,
        loop: EventLoopThread | None,
        is_claim_due: Callable[[HeldJob], bool],
        wake_claims: Callable[[], None],
    ) -> None:
        self._holdings = holdings
        self._runner = runner
        self._keeper = keeper
        self._committer = committer
        self._prefetch = prefetch
        self._loop = loop
        self._is_claim_due = is_claim_due
        self._wake_claims = wake_claims

    def run_in_thread(self, job: ClaimedJob) -> bool:
        """Run ``job`` here, unless it must not start; returns whether this handler
        thread was replaced meanwhile (and so ends)."""
        entry = self._begin(job)
        if entry is None:
            return False
        execution = self._execute(job, entry.is_cancelled)
        return self._after(entry, execution)

    def start_async(self, job: ClaimedJob) -> None:
        """On the event loop: start ``job``'s handler as a task, unless it was ended meanwhile.

        The task is created in this same callback, so a cancellation asked for
        once the run is marked running (a loop callback too) always finds it.
        """
        entry = self._begin(job)
        if entry is None:
            return
        assert self._loop is not None
        entry.aio_task = self._loop.create_task(self._run_async(entry))

    async def _run_async(self, entry: HeldJob) -> None:
        job = entry.job
        execution: Execution | None
        try:
            execution = await self._runner.aexecute(job, cancelled=entry.is_cancelled)
        except asyncio.CancelledError:
            # The worker ended the run (time limit, cancel) or released it at stop,
            # and recorded that itself.
            execution = None
        except BaseException:
            self._could_not_run(job)
            execution = None
        self._after(entry, execution)

    def _begin(self, job: ClaimedJob) -> HeldJob | None:
        """Mark ``job`` running with its time limit set; None when it must not start."""
        taken = time.monotonic()
        job_id = job.claim.job_id
        limit = self._runner.task(job.kind).options.time_limit
        should_wake_limits = False
        holdings = self._holdings
        with holdings.lock:
            entry = holdings.in_flight.get(job_id)
            if entry is None or entry.job is not job or holdings.is_draining:
                # Claimed as the worker began stopping (it is released), or
                # cancelled before it started (the worker recorded it).
                return None
            entry.is_running = True
            entry.started = taken
            if limit is not None:
                entry.time_limit_at = taken + limit.total_seconds()
                # Wake the limits thread only for a deadline before its next look.
                should_wake_limits = entry.time_limit_at < holdings.limits_wake_at
        if entry.time_limit_at is not None:
            # Renewed no longer than the limit: a hung run loses its job even if
            # ending it fails (runtime/leases.py).
            self._keeper.set_deadline(job_id, entry.time_limit_at)
            if should_wake_limits:
                holdings.limits_changed.set()
        return entry

    def _after(self, entry: HeldJob, execution: Execution | None) -> bool:
        """Hand the outcome to the committer unless the run was abandoned; returns whether
        this handler thread was replaced (and so ends)."""
        job = entry.job
        holdings = self._holdings
        with holdings.lock:
            if holdings.in_flight.get(job.claim.job_id) is entry:
                holdings.forget(entry)
            if not entry.is_async:
                # Busy time, not handler time: the GIL and bookkeeping are part of the pace.
                self._prefetch.observe(time.monotonic() - entry.started)
            holdings.changed.notify_all()
            is_abandoned = entry.is_abandoned
            if execution is not None and not is_abandoned:
                # Queued under the lock: stop() releases under it before it ends the
                # committer, so no outcome is produced after the committer's last batch.
                self._committer.put(execution)
            # A thread whose slot was given to a replacement ends here; one whose
            # slot was kept takes it back. An async run holds no thread.
            is_ended = entry.ended_by is not None and not entry.is_async
            is_replaced = is_ended and entry.is_replaced
            if is_ended:
                if is_replaced:
                    holdings.replaced -= 1
                else:
                    holdings.unreplaced -= 1
            # Wake the claim loop only when a claim is due, not after every job.
            should_claim = self._is_claim_due(entry)
        if execution is not None and is_abandoned:
            _log_discarded(entry, execution)
        elif should_claim:
            self._wake_claims()
        return is_replaced

    def _execute(self, job: ClaimedJob, cancelled: Callable[[], bool]) -> Execution | None:
        try:
            return self._runner.execute(job, cancelled=cancelled)
        except BaseException:
            self._could_not_run(job)
            return None

    def _could_not_run(self, job: ClaimedJob) -> None:
        # Only a bug in venturi gets here; the lease then lapses and recovery retries.
        logger.exception(
            "job %s (kind %s) could not be run",
            job.claim.job_id,
            job.kind,
            extra={"job_id": job.claim.job_id, "kind": job.kind},
        )
        self._keeper.drop([job.claim.job_id])


def _log_discarded(entry: HeldJob, execution: Execution) -> None:
    job = entry.job
    extra = {"job_id": job.claim.job_id, "kind": job.kind}
    if entry.ended_by is None:
        logger.warning(
            "job %s (kind %s) finished (%s) after it was released at shutdown; "
            "that outcome is discarded and the job will run again",
            job.claim.job_id,
            job.kind,
            execution.outcome.kind.value,
            extra=extra,
        )
        return
    logger.warning(
        "job %s (kind %s) run %d returned after the worker ended it (%s); "
        "its %s outcome was discarded",
        job.claim.job_id,
        job.kind,
        job.claim.run_count,
        entry.ended_by,
        execution.outcome.kind.value,
        extra=extra,
    )
