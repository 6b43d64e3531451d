"""The worker: claims jobs, runs their handlers on a fixed pool, records outcomes.

The parts of one running ``Worker`` (threads named ``venturi-worker-...``):

- **claim loop** - claims batches planned by ``ClaimPlan`` (room under each
  cap, ADR 0107; claim-ahead, ADR 0114; floors, ADR 0115), then waits
  (``Waiter``, ADR 20) when there was less work than room, on the listener
  that turns NOTIFY into wake-ups (ADR 0102; no thread of its own, ADR 0132);
- **handlers** - ``concurrency`` threads, each running one job at a time (no
  thread per job), taking claimed jobs from one local queue;
- **event loop** - when some served task is ``async def``: one thread owning
  one asyncio loop, running up to ``async_concurrency`` async handlers at
  once; it never runs a sync handler, and an async one never holds a handler
  thread (runtime/aio.py, ADR 0126);
- **committer** - the one path that records outcomes (ADR 0104);
- **lease keeper** - renews held claims and sweeps expired ones (ADR 19, 0109);
- **pruner** - with ``retention``, deletes old terminal jobs;
- **registry** - keeps the worker's registry entry alive (ADR 0119).
- **limits** - ends runs past their task's ``time_limit``, and cancelled runs
  still going one renewal interval after the worker learnt of the request
  (ADR 0121).

Python cannot kill a thread, so a run the worker ends itself keeps running in
its handler thread until the handler returns, and its late outcome is
discarded. That thread no longer counts against ``concurrency``: a
replacement handler thread is started, for up to ``concurrency`` such
abandoned threads at once. Beyond that no replacement is started and the
slot stays taken until the abandoned handler returns, so a worker whose
handlers all hang stops claiming instead of piling up threads. A coroutine can
be cancelled, so an async run the worker ends is ended for real.

The claim, the run and the record go through one ``Runner``, the same path
``run_once`` and ``venturi.testing.drain`` use.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.metadata
import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from venturi.backend import Backend
from venturi.errors import BackendUnavailable, ConfigurationError
from venturi.events import JobsReleased, WorkerStarted, WorkerStopped
from venturi.runtime.aio import EventLoopThread
from venturi.runtime.claim_plan import ClaimPlan
from venturi.runtime.committer import Committer
from venturi.runtime.executor import (
    CANCELLED_NOTE,
    TIME_LIMIT_NOTE,
    Execution,
    cancelled_by_worker,
    time_limit_exceeded,
)
from venturi.runtime.floors import ClaimFloors
from venturi.runtime.leases import MAX_RECOVERY_INTERVAL, LeaseKeeper
from venturi.runtime.prefetch import DEFAULT_PREFETCH, Prefetch
from venturi.runtime.pruner import Pruner
from venturi.runtime.registration import Registration
from venturi.runtime.runner import Runner, worker_id
from venturi.runtime.service import (
    Backoff,
    Part,
    ServiceThread,
    check_at_start,
    run_until_signalled,
)
from venturi.runtime.waiting import Waiter
from venturi.types import ClaimedJob

if TYPE_CHECKING:
    from venturi.app import App
    from venturi.task import Task

logger = logging.getLogger(__name__)

#: How long stop() gives the committer to record what handlers finished, and
#: the lease keeper, listener and claim loop to end, beyond the grace period.
SHUTDOWN_TIMEOUT = 10.0
#: How long stop() waits for handler threads to end once their jobs were released.
_HANDLER_JOIN_TIMEOUT = 0.5
#: How long stop() waits for the event loop to end once its runs were cancelled.
_LOOP_JOIN_TIMEOUT = 1.0
#: How often stop()'s wait for running handlers looks for a second signal.
_GRACE_SLICE = 0.2
#: The largest ``prefetch``: jobs are held only as long as 0.1 s of work, and no
#: worker process runs 10,000 jobs a second, so more would only hold rows longer.
MAX_PREFETCH = 1000
#: The longest the limits thread sleeps when no run has a deadline.
_LIMITS_IDLE_WAIT = 1.0
#: The default ``async_concurrency``: async handlers mostly wait on I/O, and each
#: waiting one costs a coroutine, not a thread.
DEFAULT_ASYNC_CONCURRENCY = 100


@dataclass(slots=True)
class _InFlight:
    """A claimed job between its claim and the moment its handler returns.

    ``is_abandoned``: its outcome is no longer the handler's to give (released
    at shutdown, or ended by the worker for ``ended_by``).
    """

    job: ClaimedJob
    is_running: bool = False
    is_abandoned: bool = False
    #: What ``ctx.is_cancelled()`` reads (a plain flag: no Event per job); set when
    #: renewal reports a cancel request.
    is_cancel_requested: bool = False
    started: float = 0.0
    #: When the worker ends the run itself (``time.monotonic()``), and why.
    time_limit_at: float | None = None
    cancel_at: float | None = None
    ended_by: str | None = None
    #: Whether a replacement thread took over this run's slot when it was ended.
    is_replaced: bool = False
    #: An ``async def`` handler's run, on the event loop, as ``aio_task`` once started.
    is_async: bool = False
    aio_task: asyncio.Task[None] | None = None

    def deadline(self) -> tuple[float, str] | None:
        """The earliest ending the worker will impose, and its note; a cancel wins ties."""
        cancel, limit = self.cancel_at, self.time_limit_at
        if cancel is not None and (limit is None or cancel <= limit):
            return cancel, CANCELLED_NOTE
        return (limit, TIME_LIMIT_NOTE) if limit is not None else None

    def is_cancelled(self) -> bool:
        return self.is_cancel_requested


class Worker:
    """Runs the jobs of an App's tasks on a pool of threads.

    Options:
        concurrency: handler threads, i.e. jobs run at once (default 8).
        kinds: the kinds to serve; ``None`` serves every task of ``app.tasks()``.
            Kinds in the table that this worker does not know are never claimed.
        grace: seconds ``stop()`` lets running handlers finish before their
            jobs are released back to ``pending`` (ADR 21).
        poll_interval: the longest idle wait between two claims, the backstop
            for a lost notification (ADR 20).
        recovery_interval: seconds between two sweeps for expired leases
            (ADR 19); at most 10.
        retention: when set, delete terminal jobs finished longer ago than
            this, once a minute, one worker of the prefix at a time (pruner.py).
        prefetch: the most claimed jobs held waiting for a free handler
            (default 256, at most ``MAX_PREFETCH`` = 1000; 0 claims only for
            free handlers). Only as many are
            held as the handlers should start within 0.1 s at their recent
            pace, so long jobs are never held ahead (ADR 0114).
        async_concurrency: ``async def`` handlers run at once on the worker's
            event loop (default 100), apart from ``concurrency``; nothing is
            claimed ahead for them (ADR 0126).

    Raises ``ConfigurationError`` for an unknown kind or an impossible setting.

    Three ways to run it::

        venturi.Worker(app).run()                  # blocks; SIGINT/SIGTERM stop it
        w = venturi.Worker(app); w.start()         # threads inside another process
        w.stop(grace=10)
        assert venturi.Worker(app).run_once() == 1 # one iteration, in tests
    """

    def __init__(
        self,
        app: App,
        *,
        concurrency: int = 8,
        kinds: Collection[str] | None = None,
        grace: float = 30.0,
        poll_interval: float = 5.0,
        recovery_interval: float = 5.0,
        retention: timedelta | None = None,
        prefetch: int | None = None,
        async_concurrency: int = DEFAULT_ASYNC_CONCURRENCY,
    ) -> None:
        if isinstance(kinds, str):
            raise ConfigurationError("kinds must be a collection of kinds, not one string")
        if concurrency < 1:
            raise ConfigurationError(f"concurrency must be at least 1, got {concurrency}")
        if isinstance(async_concurrency, bool) or not (
            isinstance(async_concurrency, int) and async_concurrency >= 1
        ):
            raise ConfigurationError(
                f"async_concurrency must be an integer of at least 1, got {async_concurrency!r}"
            )
        if grace < 0:
            raise ConfigurationError(f"grace must not be negative, got {grace}")
        if poll_interval <= 0:
            raise ConfigurationError(f"poll_interval must be positive, got {poll_interval}")
        if not 0 < recovery_interval <= MAX_RECOVERY_INTERVAL:
            raise ConfigurationError(
                f"recovery_interval must be in (0, {MAX_RECOVERY_INTERVAL:g}] seconds, "
                f"got {recovery_interval}"
            )
        if prefetch is not None and not 0 <= prefetch <= MAX_PREFETCH:
            raise ConfigurationError(
                f"prefetch must be between 0 and {MAX_PREFETCH}, got {prefetch}"
            )
        if retention is not None and retention < timedelta(0):
            raise ConfigurationError(f"retention must not be negative, got {retention}")
        known = app.tasks()
        self.app = app
        self.concurrency = concurrency
        self.async_concurrency = async_concurrency
        self.kinds: tuple[str, ...] = tuple(app.served_kinds(kinds, who="the worker"))
        self.grace = grace
        self.poll_interval = poll_interval
        self.recovery_interval = recovery_interval
        self.retention = retention
        self.prefetch = DEFAULT_PREFETCH if prefetch is None else prefetch
        self.worker_id = worker_id()
        self._known: dict[str, Task[Any, Any]] = dict(known)
        #: Built on first use, so that constructing a Worker builds no backend.
        self._runner: Runner | None = None

        # Guards the start/stop state and every _Runtime's bookkeeping; handlers
        # notify ``_changed`` when a job ends (stop() waits on it within the grace).
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._is_started = False
        self._stopped = threading.Event()
        self._runtime: _Runtime | None = None

    @property
    def backend(self) -> Backend:
        return self.app.backend

    # -- running -------------------------------------------------------------------------

    def run(self) -> None:
        """Run until SIGINT or SIGTERM, then stop gracefully.

        The first signal stops claiming and lets running handlers finish within
        ``grace``; a second one stops at once (running jobs are released). Signal
        handlers are installed only here, and only from the main thread. The
        App stays open: whoever created it closes it.
        """
        run_until_signalled(
            start=self.start,
            stop=lambda hurry: self.stop(hurry=hurry),
            stopped=self._stopped,
            name=f"worker {self.worker_id}",
        )

    def start(self) -> None:
        """Start the worker's threads and return; safe to call twice.

        Checks the database first (``App.check_schema``): an unmigrated prefix
        or a refused login raises here, before any thread starts; an outage does
        not (the loops wait for the database).
        """
        location = check_at_start(self.app.check_schema, f"worker {self.worker_id}")
        with self._lock:
            if self._is_started:
                return
            self._is_started = True
            self._stopped.clear()
        runner = self._run_path()
        name = f"venturi-worker-{id(self):x}"
        waiter = Waiter(runner.backend, poll_interval=self.poll_interval)
        keeper = runner.lease_keeper(
            recovery_interval=self.recovery_interval,
            on_recovered=waiter.wake,
            on_cancel_requested=lambda job_ids: self._cancel_requested(runtime, job_ids),
        )
        runtime = _Runtime(
            runner=runner,
            waiter=waiter,
            keeper=keeper,
            committer=Committer(
                runner.record, keeper, on_pending=waiter.wake, name=f"{name}-committer"
            ),
            prefetch=Prefetch(concurrency=self.concurrency, limit=self.prefetch),
        )
        async_kinds = {kind for kind in self.kinds if runner.task(kind).is_async}
        runtime.pools = [
            _Pool(self._plan(runner, set(self.kinds) - async_kinds, self.concurrency)),
            _Pool(self._plan(runner, async_kinds, self.async_concurrency), is_async=True),
        ]
        if async_kinds:
            runtime.loop = EventLoopThread(
                f"{name}-loop", describe=lambda task: self._describe(runtime, task)
            )
        runtime.claiming = ServiceThread(
            f"{name}-claim", lambda: self._claim_step(runtime), on_exit=waiter.close
        )
        runtime.handlers = _Handlers(
            lambda: self._handle_jobs(runtime),
            runtime.jobs,
            count=self.concurrency,
            name=f"{name}-handler",
        )
        runtime.others = [
            ServiceThread(f"{name}-leases", keeper.step),
            ServiceThread(f"{name}-limits", lambda: self._limits_step(runtime)),
        ]
        if self.retention is not None:
            pruner = Pruner(runner.backend, retention=self.retention)
            runtime.others.append(ServiceThread(f"{name}-pruner", pruner.step))

        def running() -> int:
            with self._lock:
                return sum(entry.is_running for entry in runtime.in_flight.values())

        # Registered by its first step, deregistered when its thread ends (ADR 0119).
        registration = Registration(
            runner.backend,
            claimed_by=self.worker_id,
            kinds=self.kinds,
            concurrency=self.concurrency,
            interval=keeper.renew_interval,
            running=running,
        )
        runtime.others.append(
            ServiceThread(f"{name}-registry", registration.step, on_exit=registration.deregister)
        )
        self._runtime = runtime
        loop: list[Part] = [runtime.loop] if runtime.loop is not None else []
        parts: list[Part] = [
            runtime.handlers,
            *loop,
            runtime.committer,
            *runtime.others,
            runtime.claiming,
        ]
        for part in parts:
            part.start()
        logger.info(
            "worker %s started: concurrency %d%s, kinds %s; venturi %s, database %s, prefix %s",
            self.worker_id,
            self.concurrency,
            f", async_concurrency {self.async_concurrency}" if async_kinds else "",
            ", ".join(self.kinds) or "(none)",
            _version(),
            location,
            self.app.prefix,
        )
        if self.app.events.active:
            self.app.events.emit(
                WorkerStarted(
                    worker_id=self.worker_id, kinds=self.kinds, concurrency=self.concurrency
                )
            )

    def stop(self, grace: float | None = None, *, hurry: Callable[[], bool] | None = None) -> None:
        """Stop gracefully (ADR 21): idempotent, safe before ``start()``, bounded in time.

        Stops claiming, lets running handlers finish for up to ``grace`` seconds
        (default: the worker's ``grace``; ``hurry`` returning True cuts it
        short), returns the jobs still held to ``pending`` with a ``released``
        entry and no failure, records every outcome already produced, then ends
        the threads, each with a deadline. A handler still running afterwards
        keeps its (daemon) thread, and its late outcome is discarded. The App
        stays usable: its backend is not closed.
        """
        with self._lock:
            runtime = self._runtime
            if not self._is_started or runtime is None:
                return
            self._is_started = False
            self._runtime = None
            runtime.is_draining = True
            running = sum(1 for entry in runtime.in_flight.values() if entry.is_running)
        grace = self.grace if grace is None else grace
        logger.info(
            "worker %s stopping: %d job(s) running, grace %.1fs", self.worker_id, running, grace
        )
        grace_deadline = time.monotonic() + grace
        # In this order, because each step hands work to the next: nothing new is
        # claimed, handlers finish within the grace, what they did not finish is
        # released, then the committer records every outcome they produced.
        runtime.claiming.request_stop()
        runtime.waiter.wake()  # ends the claim loop's idle wait
        self._wait_for_handlers(runtime, grace_deadline, hurry or (lambda: False))
        deadline = time.monotonic() + SHUTDOWN_TIMEOUT
        runtime.claiming.join(deadline)
        self._release_unfinished(runtime, deadline)
        if runtime.loop is not None:
            # Async runs still going were released just now: cancel them for real.
            runtime.loop.request_stop()
            runtime.loop.join(min(deadline, time.monotonic() + _LOOP_JOIN_TIMEOUT))
        runtime.handlers.request_stop()
        runtime.committer.request_stop()
        runtime.committer.join(deadline)
        for part in runtime.others:
            part.request_stop()
        runtime.limits_changed.set()  # ends the limits thread's wait
        for part in runtime.others:
            part.join(deadline)
        # Idle handlers end at once on their sentinel; one still running a released job
        # is not waited for (it is a daemon, and its outcome is discarded).
        runtime.handlers.join(min(deadline, time.monotonic() + _HANDLER_JOIN_TIMEOUT))
        self._stopped.set()
        logger.info("worker %s stopped", self.worker_id)
        if self.app.events.active:
            self.app.events.emit(WorkerStopped(worker_id=self.worker_id))

    def run_once(self) -> int:
        """Sweep expired leases, claim one batch, run it in this thread, record it.

        For tests (STYLE R9): no threads, no waiting. The batch is as large as
        ``concurrency`` allows (capped kinds count as empty, since the jobs run
        one after another). Not to be mixed with ``start()`` on the same
        Worker. Returns how many jobs were run.
        """
        runner = self._run_path()
        runner.lease_keeper(recovery_interval=self.recovery_interval).recover_once()
        request = runner.plan.request(free=self.concurrency, running={}, is_renewed=False)
        if request is None:
            return 0
        return len(runner.run(request))

    def _run_path(self) -> Runner:
        if self._runner is None:
            self._runner = Runner(
                self.backend,
                self._known,
                kinds=self.kinds,
                worker_id=self.worker_id,
                concurrency=self.concurrency,
                events=self.app.events,
                age_after=self.app.age_after,
            )
        return self._runner

    # -- the claim loop ------------------------------------------------------------------

    def _plan(self, runner: Runner, kinds: set[str], concurrency: int) -> ClaimPlan:
        """The claims of one pool: its kinds, each cap counting that kind's runs (ADR 0126)."""
        return ClaimPlan.for_tasks(
            {kind: runner.task(kind) for kind in kinds}, concurrency=concurrency
        )

    def _claim_step(self, runtime: _Runtime) -> float:
        """One claim per pool with room (sync handlers, async handlers), then the wait."""
        runner, waiter = runtime.runner, runtime.waiter
        waiter.arm()
        runner.promote_due(time.monotonic())
        with self._lock:
            if runtime.is_draining:
                return 0.0
            requests = [
                (pool, request)
                for pool in runtime.pools
                if (
                    request := pool.plan.request(
                        free=self._room(runtime, pool),
                        running=runtime.running_by_kind,
                        is_renewed=True,
                        now=time.monotonic(),
                    )
                )
                is not None
            ]
        if not requests:
            # Not worth a claim yet (or every capped kind is full): a handler ending wakes us,
            # and a kind throttled across workers (ADR 0128) is due at its time.
            waiter.wait(self._throttled_wait(runtime, self.poll_interval))
            return 0.0
        short: list[str] = []
        for pool, request in requests:
            floors = pool.floors.current(time.monotonic())
            jobs = runner.claim(request, floors=floors, plan=pool.plan)
            pool.floors.record(jobs, used=floors, limit=request.limit, now=time.monotonic())
            if jobs:
                self._dispatch(runtime, jobs, is_async=pool.is_async)
                # Yield the GIL so a handler starts its job now, not after this thread has
                # prepared its next query (measured: 0.4 ms -> 0.15 ms from claim to start).
                time.sleep(0)
            if len(jobs) < request.limit:
                now = time.monotonic()
                short.extend(k for k in request.kinds if pool.plan.is_unthrottled(k, now))
        if short:
            waiter.wait(self._throttled_wait(runtime, waiter.time_to_next_job(short)))
        return 0.0

    @staticmethod
    def _throttled_wait(runtime: _Runtime, wait: float) -> float:
        """``wait``, shortened to when the soonest throttled kind is due (ADR 0128)."""
        now = time.monotonic()
        dues = [
            due for pool in runtime.pools if (due := pool.plan.next_unthrottled(now)) is not None
        ]
        return min([wait, *dues])

    def _room(self, runtime: _Runtime, pool: _Pool) -> int:
        """Jobs worth claiming now for ``pool`` (called under ``self._lock``).

        Sync handlers: a slot whose abandoned handler got no replacement is
        still taken, and claims run ahead (ADR 0114). Async handlers: free
        places on the loop, nothing held ahead, and only once half of them
        are free, so that a busy loop is refilled by batches rather than by
        one claim per run that ends.
        """
        if pool.is_async:
            free = self.async_concurrency - runtime.held_async
            return free if 2 * free >= self.async_concurrency else 0
        held = len(runtime.in_flight) - runtime.held_async + runtime.unreplaced
        return pool.plan.room(held=held, prefetch=runtime.prefetch)

    def _dispatch(self, runtime: _Runtime, jobs: list[ClaimedJob], *, is_async: bool) -> None:
        runtime.keeper.hold(jobs)
        with self._lock:
            for job in jobs:
                runtime.add(_InFlight(job, is_async=is_async))
        for job in jobs:
            logger.debug(
                "claimed job %s (kind %s) run %d",
                job.claim.job_id,
                job.kind,
                job.claim.run_count,
                extra={"job_id": job.claim.job_id, "kind": job.kind},
            )
        if not is_async:
            for job in jobs:
                runtime.jobs.put(job)
            return
        assert runtime.loop is not None  # async kinds are served: the loop was built
        for job in jobs:
            runtime.loop.submit(functools.partial(self._start_async, runtime, job))

    # -- handlers ------------------------------------------------------------------------

    def _handle_jobs(self, runtime: _Runtime) -> None:
        while True:
            job = runtime.jobs.get()
            if job is None:
                return
            entry = self._begin_run(runtime, job)
            if entry is None:
                continue
            execution = self._execute(runtime, job, entry.is_cancelled)
            if self._after_run(runtime, entry, execution):
                return

    def _start_async(self, runtime: _Runtime, job: ClaimedJob) -> None:
        """On the event loop: start ``job``'s handler as a task, unless it was ended meanwhile.

        The task is created in this same callback, so a cancellation asked for
        once the run is marked running (a loop callback too) always finds it.
        """
        entry = self._begin_run(runtime, job)
        if entry is None:
            return
        assert runtime.loop is not None
        entry.aio_task = runtime.loop.create_task(self._run_async(runtime, entry))

    async def _run_async(self, runtime: _Runtime, entry: _InFlight) -> None:
        job = entry.job
        execution: Execution | None
        try:
            execution = await runtime.runner.aexecute(job, cancelled=entry.is_cancelled)
        except asyncio.CancelledError:
            # The worker ended the run (time limit, cancel) or released it at stop,
            # and recorded that itself.
            execution = None
        except BaseException:
            execution = self._could_not_run(runtime, job)
        self._after_run(runtime, entry, execution)

    def _begin_run(self, runtime: _Runtime, job: ClaimedJob) -> _InFlight | None:
        """Mark ``job`` running with its time limit set; None when it must not start."""
        taken = time.monotonic()
        job_id = job.claim.job_id
        limit = runtime.runner.task(job.kind).options.time_limit
        should_wake_limits = False
        with self._lock:
            entry = runtime.in_flight.get(job_id)
            if entry is None or entry.job is not job or runtime.is_draining:
                # Claimed as the worker began stopping (it is released), or
                # cancelled before it started (the worker recorded it).
                return None
            entry.is_running = True
            entry.started = taken
            if limit is not None:
                entry.time_limit_at = taken + limit.total_seconds()
                # Wake the limits thread only for a deadline before its next look.
                should_wake_limits = entry.time_limit_at < runtime.limits_wake_at
        if entry.time_limit_at is not None:
            runtime.keeper.set_deadline(job_id, entry.time_limit_at)
            if should_wake_limits:
                runtime.limits_changed.set()
        return entry

    def _after_run(self, runtime: _Runtime, entry: _InFlight, execution: Execution | None) -> bool:
        """Hand the outcome to the committer unless the run was abandoned; returns whether
        this handler thread was replaced (and so ends)."""
        job = entry.job
        with self._lock:
            if runtime.in_flight.get(job.claim.job_id) is entry:
                runtime.forget(entry)
            if not entry.is_async:
                # Busy time, not handler time: the GIL and bookkeeping are part of the pace.
                runtime.prefetch.observe(time.monotonic() - entry.started)
            self._changed.notify_all()
            is_abandoned = entry.is_abandoned
            if execution is not None and not is_abandoned:
                # Queued under the lock: stop() releases under it before it ends the
                # committer, so no outcome is produced after the committer's last batch.
                runtime.committer.put(execution)
            # A thread whose slot was given to a replacement ends here; one whose
            # slot was kept takes it back. An async run holds no thread.
            is_ended = entry.ended_by is not None and not entry.is_async
            is_replaced = is_ended and entry.is_replaced
            if is_ended:
                if is_replaced:
                    runtime.replaced -= 1
                else:
                    runtime.unreplaced -= 1
            # Wake the claim loop only when a claim is due, not after every job.
            pool = runtime.pools[entry.is_async]
            should_claim = pool.plan.is_capped(job.kind) or self._room(runtime, pool) > 0
        if execution is not None and is_abandoned:
            self._log_discarded(entry, execution)
        elif should_claim:
            runtime.waiter.wake()
        return is_replaced

    def _describe(self, runtime: _Runtime, task: asyncio.Task[Any]) -> str | None:
        """The async run ``task`` is, for the blocked-loop warning (any thread)."""
        with self._lock:
            for entry in runtime.in_flight.values():
                if entry.aio_task is task:
                    job = entry.job
                    return f"job {job.claim.job_id} (kind {job.kind}) run {job.claim.run_count}"
        return None

    @staticmethod
    def _log_discarded(entry: _InFlight, execution: Execution) -> None:
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

    def _execute(
        self, runtime: _Runtime, job: ClaimedJob, cancelled: Callable[[], bool]
    ) -> Execution | None:
        try:
            return runtime.runner.execute(job, cancelled=cancelled)
        except BaseException:
            return self._could_not_run(runtime, job)

    @staticmethod
    def _could_not_run(runtime: _Runtime, job: ClaimedJob) -> None:
        # Only a bug in venturi gets here; the lease then lapses and recovery retries.
        logger.exception(
            "job %s (kind %s) could not be run",
            job.claim.job_id,
            job.kind,
            extra={"job_id": job.claim.job_id, "kind": job.kind},
        )
        runtime.keeper.drop([job.claim.job_id])

    # -- time limits and cancellation (ADR 0121) ------------------------------------------

    def _cancel_requested(self, runtime: _Runtime, job_ids: set[str]) -> None:
        """Renewal found cancellation requests: tell the handlers, and give them one
        renewal interval to stop; a job not started yet is ended at once."""
        now = time.monotonic()
        grace = runtime.keeper.renew_interval
        deadlines: list[tuple[str, float]] = []
        with self._lock:
            for job_id in job_ids:
                entry = runtime.in_flight.get(job_id)
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
                    self._end_run(runtime, entry, CANCELLED_NOTE)
                elif entry.is_running:
                    entry.cancel_at = now + grace
                    deadlines.append((job_id, entry.cancel_at))
                elif not runtime.is_draining:  # when draining, release ends it dead
                    runtime.forget(entry)
                    runtime.committer.put(cancelled_by_worker(entry.job, now))
            self._changed.notify_all()
        for job_id, deadline in deadlines:
            runtime.keeper.set_deadline(job_id, deadline)
        if deadlines:
            runtime.limits_changed.set()

    def _limits_step(self, runtime: _Runtime) -> float:
        """End the runs past their deadline, then sleep until the next deadline."""
        runtime.limits_changed.clear()
        now = time.monotonic()
        soonest: float | None = None
        ended = 0
        with self._lock:
            for entry in list(runtime.in_flight.values()):
                deadline = entry.deadline() if entry.is_running else None
                if deadline is None or entry.is_abandoned:
                    continue
                at, note = deadline
                if now < at:
                    soonest = at if soonest is None else min(soonest, at)
                    continue
                self._end_run(runtime, entry, note)
                ended += 1
            if ended:
                self._changed.notify_all()
            wait = _LIMITS_IDLE_WAIT if soonest is None else soonest - time.monotonic()
            wait = min(max(wait, 0.0), _LIMITS_IDLE_WAIT)
            runtime.limits_wake_at = time.monotonic() + wait
        if ended:
            runtime.waiter.wake()
        runtime.limits_changed.wait(wait)
        return 0.0

    def _end_run(self, runtime: _Runtime, entry: _InFlight, note: str) -> None:
        """Record ``entry``'s run as ended by the worker, and replace its thread when
        allowed (under ``self._lock``, so stop() never misses a replacement); an
        async run is cancelled instead, and its place on the loop is free at once."""
        job = entry.job
        runtime.forget(entry)
        entry.is_abandoned = True
        entry.ended_by = note
        if note == CANCELLED_NOTE:
            execution = cancelled_by_worker(job, entry.started)
        else:
            execution = time_limit_exceeded(runtime.runner.task(job.kind), job, entry.started)
        runtime.committer.put(execution)
        if entry.is_async:
            assert runtime.loop is not None
            runtime.loop.cancel(lambda: entry.aio_task)
            logger.warning(
                "job %s (kind %s) run %d ended by the worker (%s); its coroutine was cancelled",
                job.claim.job_id,
                job.kind,
                job.claim.run_count,
                note,
                extra={"job_id": job.claim.job_id, "kind": job.kind},
            )
            return
        entry.is_replaced = not runtime.is_draining and runtime.replaced < self.concurrency
        if entry.is_replaced:
            runtime.replaced += 1
            runtime.handlers.add()
        else:
            runtime.unreplaced += 1
        logger.warning(
            "job %s (kind %s) run %d ended by the worker (%s); its handler thread is "
            "abandoned until it returns (%d abandoned, %d of them without a replacement)",
            job.claim.job_id,
            job.kind,
            job.claim.run_count,
            note,
            runtime.replaced + runtime.unreplaced,
            runtime.unreplaced,
            extra={"job_id": job.claim.job_id, "kind": job.kind},
        )

    # -- stopping ------------------------------------------------------------------------

    def _wait_for_handlers(
        self, runtime: _Runtime, deadline: float, hurry: Callable[[], bool]
    ) -> None:
        with self._lock:
            while any(entry.is_running for entry in runtime.in_flight.values()):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or hurry():
                    return
                self._changed.wait(min(remaining, _GRACE_SLICE))

    def _release_unfinished(self, runtime: _Runtime, deadline: float) -> None:
        """Give back every job held but not finished (ADR 21); late outcomes are discarded."""
        with self._lock:
            unfinished = [e for e in runtime.in_flight.values() if not e.is_abandoned]
            for entry in unfinished:
                entry.is_abandoned = True
                if not entry.is_running:
                    runtime.forget(entry)
        if not unfinished:
            return
        claims = [entry.job.claim for entry in unfinished]
        runtime.keeper.drop(claim.job_id for claim in claims)
        backoff = Backoff()
        while True:
            try:
                released = self.backend.release(claims)
            except BackendUnavailable as exc:
                wait = backoff.next_delay()
                if time.monotonic() + wait > deadline:
                    logger.warning(
                        "could not release %d job(s) at shutdown (%s); "
                        "they will be recovered when their lease expires",
                        len(claims),
                        exc,
                    )
                    return
                self._stopped.wait(wait)  # not set until stop() ends: a bounded pause
                continue
            logger.info("released %d unfinished job(s) back to pending", released)
            if self.app.events.active:
                self.app.events.emit(JobsReleased(count=released, worker_id=self.worker_id))
            return


@dataclass(slots=True)
class _Runtime:
    """The threads, queues and bookkeeping of one start()..stop() cycle.

    Kept apart from the Worker so that a handler abandoned by one cycle (still
    running after its job was released) never touches the next cycle's counts.
    """

    runner: Runner
    waiter: Waiter
    keeper: LeaseKeeper
    committer: Committer
    prefetch: Prefetch
    jobs: queue.SimpleQueue[ClaimedJob | None] = field(default_factory=queue.SimpleQueue)
    #: The sync handlers' pool, then the async handlers' one (indexed by ``is_async``).
    pools: list[_Pool] = field(default_factory=list)
    #: The event loop thread, when some served task is ``async def``.
    loop: EventLoopThread | None = None
    claiming: ServiceThread = field(init=False)
    handlers: _Handlers = field(init=False)
    #: The parts whose stop order does not matter: lease keeper, pruner, listener.
    others: list[Part] = field(default_factory=list)
    #: Claimed jobs whose handler has not returned yet (running or queued locally).
    in_flight: dict[str, _InFlight] = field(default_factory=dict)
    running_by_kind: Counter[str] = field(default_factory=Counter)
    #: How many of ``in_flight`` are async runs (they count against ``async_concurrency``).
    held_async: int = 0
    is_draining: bool = False
    #: Abandoned handler threads still running (ADR 0121): with a replacement
    #: thread started (at most ``concurrency``), and without one (slot kept).
    replaced: int = 0
    unreplaced: int = 0
    #: Wakes the limits thread: a new deadline sooner than ``limits_wake_at``, or stop().
    limits_changed: threading.Event = field(default_factory=threading.Event)
    limits_wake_at: float = 0.0

    def add(self, entry: _InFlight) -> None:
        """Count a claimed job as held (under the worker's lock)."""
        self.in_flight[entry.job.claim.job_id] = entry
        self.running_by_kind[entry.job.kind] += 1
        self.held_async += entry.is_async

    def forget(self, entry: _InFlight) -> None:
        """Stop counting a held job: its place (and its kind's cap) is free again."""
        del self.in_flight[entry.job.claim.job_id]
        self.running_by_kind[entry.job.kind] -= 1
        self.held_async -= entry.is_async


@dataclass(slots=True)
class _Pool:
    """Where one kind of handler runs (threads or the event loop), and how it is claimed for.

    Each pool claims apart, with its own floors: a short claim of one must not
    drop the other's (ADR 0115).
    """

    plan: ClaimPlan
    is_async: bool = False
    floors: ClaimFloors = field(default_factory=ClaimFloors)


class _Handlers:
    """The handler threads of one cycle; each takes jobs from ``jobs`` until its sentinel."""

    def __init__(
        self,
        target: Callable[[], None],
        jobs: queue.SimpleQueue[ClaimedJob | None],
        *,
        count: int,
        name: str,
    ) -> None:
        self._jobs = jobs
        self._target = target
        self._name = name
        self._threads = [
            threading.Thread(target=target, name=f"{name}-{n}", daemon=True) for n in range(count)
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def add(self) -> None:
        """Start one more thread, in place of one abandoned to a hung handler."""
        thread = threading.Thread(
            target=self._target, name=f"{self._name}-{len(self._threads)}", daemon=True
        )
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


def _version() -> str:
    try:
        return importlib.metadata.version("venturi")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"
