"""The worker: claims jobs, runs their handlers on a fixed pool, records outcomes.

Threads of one running ``Worker`` (all named ``venturi-worker-...``):

- **claim loop** - claims in batches sized to the free handler slots plus
  the claim-ahead depth (prefetch.py), only for kinds with room under their
  concurrency cap, then waits (waiting.py) when there was less work than room;
- **handlers** - ``concurrency`` threads, each running one job at a time (no
  thread per job), taking claimed jobs from one local queue;
- **committer** - the one path that records outcomes: handlers queue their
  ``Execution`` and each ``Backend.finish`` call takes everything queued, so an
  idle worker adds no latency and a busy one records many outcomes per round
  trip;
- **lease keeper** - renews held claims and sweeps expired ones (leases.py);
- **listener** - turns NOTIFY into wake-ups (waiting.py).

Claim-ahead: while every handler has work, the claim loop waits until the
room reaches ``Prefetch.refill_at()`` jobs and then claims the whole room in
one batch, instead of one claim per finished job. A worker whose handlers
would otherwise sit idle claims whatever room there is at once. While claims
come back full, each one starts where the previous one ended (floors.py).

Concurrency caps (ADR 23) are local to the process. The claim passes only the
kinds that have room, with ``limit = min(free slots, smallest room among the
capped kinds passed)``, where a kind's room counts its held jobs (running or
queued locally), so claim-ahead never holds more of a capped kind than its
cap: a batch can never overrun any cap whatever mix of
kinds it returns, and priority order across kinds is kept because one query
claims for all of them. The cost is smaller batches while a capped kind is
nearly full, which only matters for throughput when caps are tight.

One claim serves several kinds, each with its own lease (ADR 19). A batch is
claimed with the *shortest* lease among the kinds passed, and the lease keeper
renews every held claim, with its own task's lease, every ``min(lease) / 3``:
so no claim ever holds longer than its own lease without a live heartbeat, and
a crashed worker's jobs are recovered within their own lease. (Claiming with
the longest lease instead would let a crash hold short-lease jobs for as long
as the longest lease of any kind served.)
"""

from __future__ import annotations

import logging
import os
import queue
import signal
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import FrameType
from typing import TYPE_CHECKING, Any

from venturi.backend import Backend
from venturi.errors import BackendUnavailable, ConfigurationError
from venturi.executor import Execution, execute, record
from venturi.floors import ClaimFloors
from venturi.leases import MAX_RECOVERY_INTERVAL, LeaseKeeper
from venturi.prefetch import DEFAULT_PREFETCH, Prefetch
from venturi.pruner import Pruner
from venturi.service import Backoff, ServiceThread
from venturi.types import ClaimedJob, OutcomeKind
from venturi.waiting import Waiter

if TYPE_CHECKING:
    from venturi.app import App
    from venturi.task import Task

logger = logging.getLogger(__name__)

#: How long stop() gives the committer to record what handlers finished, and
#: the lease keeper, listener and claim loop to end, beyond the grace period.
SHUTDOWN_TIMEOUT = 10.0
#: Outcomes per ``finish`` round trip at most.
MAX_FINISH_BATCH = 500
#: Outcomes that make the row pending again, possibly eligible at once.
_PENDING_AGAIN = frozenset({OutcomeKind.PAUSED, OutcomeKind.RETRIED})
#: How long stop() waits for handler threads to end once their jobs were released.
_HANDLER_JOIN_TIMEOUT = 0.5
#: How often stop()'s wait for running handlers looks for a second signal.
_GRACE_SLICE = 0.2


def worker_id() -> str:
    """``host:pid``, the ``claimed_by`` of every claim this process makes (ADR 19)."""
    return f"{socket.gethostname()}:{os.getpid()}"


def served_kinds(known: Collection[str], kinds: Collection[str] | None, *, who: str) -> list[str]:
    """The kinds to claim, sorted: every known kind, or ``kinds`` if all are known.

    An unknown kind is a ``ConfigurationError``: a typo would otherwise serve nothing.
    """
    if kinds is None:
        return sorted(known)
    unknown = sorted(set(kinds) - set(known))
    if unknown:
        raise ConfigurationError(
            f"{who} was asked for kinds no task declares: {', '.join(unknown)}"
        )
    return sorted(set(kinds))


@dataclass(slots=True)
class _InFlight:
    """A claimed job between its claim and the moment its handler returns."""

    job: ClaimedJob
    is_running: bool = False
    is_abandoned: bool = False


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
            (default 256; 0 claims only for free handlers). Only as many are
            held as the handlers should start within 0.1 s at their recent
            pace, so long jobs are never held ahead (prefetch.py).

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
    ) -> None:
        if isinstance(kinds, str):
            raise ConfigurationError("kinds must be a collection of kinds, not one string")
        if concurrency < 1:
            raise ConfigurationError(f"concurrency must be at least 1, got {concurrency}")
        if grace < 0:
            raise ConfigurationError(f"grace must not be negative, got {grace}")
        if poll_interval <= 0:
            raise ConfigurationError(f"poll_interval must be positive, got {poll_interval}")
        if not 0 < recovery_interval <= MAX_RECOVERY_INTERVAL:
            raise ConfigurationError(
                f"recovery_interval must be in (0, {MAX_RECOVERY_INTERVAL:g}] seconds, "
                f"got {recovery_interval}"
            )
        if prefetch is not None and prefetch < 0:
            raise ConfigurationError(f"prefetch must not be negative, got {prefetch}")
        if retention is not None and retention < timedelta(0):
            raise ConfigurationError(f"retention must not be negative, got {retention}")
        known = app.tasks()
        served = served_kinds(known, kinds, who="the worker")
        self.app = app
        self.concurrency = concurrency
        self.kinds: tuple[str, ...] = tuple(served)
        self.grace = grace
        self.poll_interval = poll_interval
        self.recovery_interval = recovery_interval
        self.retention = retention
        self.prefetch = DEFAULT_PREFETCH if prefetch is None else prefetch
        self.worker_id = worker_id()
        self._tasks: dict[str, Task[Any, Any]] = {kind: known[kind] for kind in served}
        self._max_failures = {kind: task.options.max_failures for kind, task in known.items()}
        self._leases = {kind: task.options.lease for kind, task in self._tasks.items()}
        self._caps = {
            k: t.options.concurrency
            for k, t in self._tasks.items()
            if t.options.concurrency is not None
        }

        # Guards the start/stop state and every _Runtime's bookkeeping; handlers
        # notify ``_changed`` when a job ends (stop() waits on it within the grace).
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._is_started = False
        self._stopped = threading.Event()
        self._signals = 0
        self._runtime: _Runtime | None = None

    @property
    def backend(self) -> Backend:
        return self.app.backend

    # -- running -------------------------------------------------------------------------

    def run(self) -> None:
        """Run until SIGINT or SIGTERM, then stop gracefully and close the App's backend.

        The first signal stops claiming and lets running handlers finish within
        ``grace``; a second one stops at once (running jobs are released). Signal
        handlers are installed only here, and only from the main thread.
        """
        self._signals = 0
        previous = self._install_signal_handlers()
        try:
            self.start()
            while not self._stopped.is_set():
                if self._signals:
                    logger.info("signal received; stopping (a second signal stops at once)")
                    self.stop(hurry=lambda: self._signals > 1)
                else:
                    # Signal handlers only count (they may not take locks); look every slice.
                    self._stopped.wait(_GRACE_SLICE)
        finally:
            self.stop(grace=0)
            for signum, handler in previous.items():
                signal.signal(signum, handler)
            self.app.close()

    def start(self) -> None:
        """Start the worker's threads and return; safe to call twice."""
        with self._lock:
            if self._is_started:
                return
            self._is_started = True
            self._stopped.clear()
        backend = self.backend
        name = f"venturi-worker-{id(self):x}"
        waiter = Waiter(backend, poll_interval=self.poll_interval, name=name)
        keeper = LeaseKeeper(
            backend,
            leases=self._leases,
            max_failures=self._max_failures,
            recovery_interval=self.recovery_interval,
            on_recovered=waiter.wake,
        )
        runtime = _Runtime(
            waiter=waiter,
            keeper=keeper,
            committer=_Committer(backend, keeper, waiter, name=f"{name}-committer"),
            jobs=queue.SimpleQueue(),
            prefetch=Prefetch(concurrency=self.concurrency, limit=self.prefetch),
            maintenance=ServiceThread(f"{name}-leases", keeper.step),
        )
        runtime.claiming = ServiceThread(f"{name}-claim", lambda: self._claim_step(runtime))
        if self.retention is not None:
            pruner = Pruner(backend, retention=self.retention)
            runtime.pruning = ServiceThread(f"{name}-pruner", pruner.step)
        self._runtime = runtime
        runtime.handlers = [
            threading.Thread(
                target=self._handle_jobs, args=(runtime,), name=f"{name}-handler-{n}", daemon=True
            )
            for n in range(self.concurrency)
        ]
        for thread in runtime.handlers:
            thread.start()
        runtime.committer.service.start()
        runtime.maintenance.start()
        if runtime.pruning is not None:
            runtime.pruning.start()
        waiter.start()
        runtime.claiming.start()
        logger.info(
            "worker %s started: concurrency %d, kinds %s",
            self.worker_id,
            self.concurrency,
            ", ".join(self.kinds) or "(none)",
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
        runtime.claiming.request_stop()
        runtime.waiter.request_stop()
        self._wait_for_handlers(runtime, grace_deadline, hurry or (lambda: False))

        shutdown_deadline = time.monotonic() + SHUTDOWN_TIMEOUT
        runtime.claiming.join(shutdown_deadline)
        self._release_unfinished(runtime, shutdown_deadline)
        for _ in runtime.handlers:
            runtime.jobs.put(None)
        runtime.committer.close()
        if not runtime.committer.service.join(shutdown_deadline):
            runtime.committer.service.request_stop()
            logger.warning(
                "worker %s could not record every outcome before stopping; "
                "those jobs will be recovered when their lease expires",
                self.worker_id,
            )
        runtime.maintenance.request_stop()
        runtime.maintenance.join(shutdown_deadline)
        if runtime.pruning is not None:
            runtime.pruning.request_stop()
            runtime.pruning.join(shutdown_deadline)
        runtime.waiter.join(shutdown_deadline)
        # Idle handlers end at once on their sentinel; one still running a released job
        # is not waited for (it is a daemon, and its outcome is discarded).
        handlers_deadline = min(shutdown_deadline, time.monotonic() + _HANDLER_JOIN_TIMEOUT)
        for thread in runtime.handlers:
            thread.join(timeout=max(0.0, handlers_deadline - time.monotonic()))
        stuck = sum(thread.is_alive() for thread in runtime.handlers)
        if stuck:
            logger.warning(
                "worker %s stopped with %d handler(s) still running released jobs",
                self.worker_id,
                stuck,
            )
        self._stopped.set()
        logger.info("worker %s stopped", self.worker_id)

    def run_once(self) -> int:
        """Sweep expired leases, claim one batch, run it in this thread, record it.

        For tests (STYLE R9): no threads, no waiting. The batch is as large as
        ``concurrency`` allows (capped kinds count as empty, since the jobs run
        one after another). Not to be mixed with ``start()`` on the same
        Worker. Returns how many jobs were run.
        """
        backend = self.backend
        LeaseKeeper(
            backend,
            leases=self._leases,
            max_failures=self._max_failures,
            recovery_interval=self.recovery_interval,
        ).recover_once()
        kinds, limit = self._plan(free=self.concurrency, running=Counter())
        if not limit:
            return 0
        # No heartbeat runs here: claim with the longest lease of the kinds instead.
        lease = max(self._leases[kind] for kind in kinds)
        jobs = backend.claim(kinds=kinds, limit=limit, worker_id=self.worker_id, lease=lease)
        record(backend, [execute(self._tasks[job.kind], job) for job in jobs])
        return len(jobs)

    # -- the claim loop ------------------------------------------------------------------

    def _claim_step(self, runtime: _Runtime) -> float:
        waiter = runtime.waiter
        waiter.arm()
        with self._lock:
            if runtime.is_draining:
                return 0.0
            kinds, limit = self._plan(free=self._room(runtime), running=runtime.running_by_kind)
        if not limit:
            # Not worth a claim yet (or every capped kind is full): a handler ending wakes us.
            waiter.wait(self.poll_interval)
            return 0.0
        floors = runtime.floors.current(time.monotonic())
        jobs = self.backend.claim(
            kinds=kinds,
            limit=limit,
            worker_id=self.worker_id,
            lease=self._claim_lease(kinds),
            floors=floors,
        )
        runtime.floors.record(jobs, used=floors, limit=limit, now=time.monotonic())
        if jobs:
            self._dispatch(runtime, jobs)
            # Yield the GIL so a handler starts its job now, not after this thread has
            # prepared its next query (measured: 0.4 ms -> 0.15 ms from claim to start).
            time.sleep(0)
        if len(jobs) < limit:
            waiter.wait(waiter.timeout(kinds))
        return 0.0

    def _room(self, runtime: _Runtime) -> int:
        """Jobs worth claiming now (called under ``self._lock``; see the module docstring)."""
        held = len(runtime.in_flight)
        room = self.concurrency + runtime.prefetch.depth() - held
        if held >= self.concurrency and room < runtime.prefetch.refill_at():
            return 0
        return room

    def _plan(self, *, free: int, running: Mapping[str, int]) -> tuple[list[str], int]:
        """The kinds to claim for and the batch size (see the module docstring)."""
        if free <= 0:
            return [], 0
        kinds: list[str] = []
        limit = free
        for kind in self.kinds:
            cap = self._caps.get(kind)
            if cap is None:
                kinds.append(kind)
                continue
            room = cap - running.get(kind, 0)
            if room > 0:
                kinds.append(kind)
                limit = min(limit, room)
        return kinds, limit if kinds else 0

    def _claim_lease(self, kinds: Collection[str]) -> timedelta:
        return min(self._leases[kind] for kind in kinds)

    def _dispatch(self, runtime: _Runtime, jobs: list[ClaimedJob]) -> None:
        runtime.keeper.hold(jobs)
        with self._lock:
            for job in jobs:
                runtime.in_flight[job.claim.job_id] = _InFlight(job)
                runtime.running_by_kind[job.kind] += 1
        for job in jobs:
            logger.debug(
                "claimed job %s (kind %s) run %d",
                job.claim.job_id,
                job.kind,
                job.claim.run_count,
                extra={"job_id": job.claim.job_id, "kind": job.kind},
            )
            runtime.jobs.put(job)

    # -- handlers ------------------------------------------------------------------------

    def _handle_jobs(self, runtime: _Runtime) -> None:
        while True:
            job = runtime.jobs.get()
            if job is None:
                return
            taken = time.monotonic()
            job_id = job.claim.job_id
            with self._lock:
                entry = runtime.in_flight.get(job_id)
                if entry is None or runtime.is_draining:
                    continue  # claimed as the worker began stopping: it is released
                entry.is_running = True
            execution = self._execute(runtime, job)
            with self._lock:
                runtime.in_flight.pop(job_id, None)
                runtime.running_by_kind[job.kind] -= 1
                # Busy time, not handler time: the GIL and bookkeeping are part of the pace.
                runtime.prefetch.observe(time.monotonic() - taken)
                self._changed.notify_all()
                is_abandoned = entry.is_abandoned
                # Wake the claim loop only when a claim is due, not after every job.
                should_claim = job.kind in self._caps or self._room(runtime) > 0
            if execution is None:
                if should_claim:
                    runtime.waiter.wake()
                continue
            if is_abandoned:
                logger.warning(
                    "job %s (kind %s) ended after it was released at shutdown; "
                    "its %s outcome was discarded",
                    job_id,
                    job.kind,
                    execution.outcome.kind.value,
                    extra={"job_id": job_id, "kind": job.kind},
                )
                continue
            runtime.committer.put(execution)
            if should_claim:
                runtime.waiter.wake()

    def _execute(self, runtime: _Runtime, job: ClaimedJob) -> Execution | None:
        try:
            return execute(self._tasks[job.kind], job)
        except BaseException:
            # Only a bug in venturi gets here; the lease then lapses and recovery retries.
            logger.exception(
                "job %s (kind %s) could not be run",
                job.claim.job_id,
                job.kind,
                extra={"job_id": job.claim.job_id, "kind": job.kind},
            )
            runtime.keeper.drop([job.claim.job_id])
            return None

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
                    del runtime.in_flight[entry.job.claim.job_id]
                    runtime.running_by_kind[entry.job.kind] -= 1
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
            return

    # -- signals -------------------------------------------------------------------------

    def _install_signal_handlers(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            logger.debug("run() outside the main thread: no signal handlers installed")
            return {}
        previous: dict[int, Any] = {}
        for signum in (signal.SIGINT, signal.SIGTERM):
            previous[signum] = signal.signal(signum, self._on_signal)
        return previous

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        # No locks and no logging here: the interrupted main thread may hold them.
        self._signals += 1


@dataclass(slots=True)
class _Runtime:
    """The threads, queues and bookkeeping of one start()..stop() cycle.

    Kept apart from the Worker so that a handler abandoned by one cycle (still
    running after its job was released) never touches the next cycle's counts.
    """

    waiter: Waiter
    keeper: LeaseKeeper
    committer: _Committer
    jobs: queue.SimpleQueue[ClaimedJob | None]
    prefetch: Prefetch
    maintenance: ServiceThread
    floors: ClaimFloors = field(default_factory=ClaimFloors)
    claiming: ServiceThread = field(init=False)
    pruning: ServiceThread | None = None
    handlers: list[threading.Thread] = field(default_factory=list)
    #: Claimed jobs whose handler has not returned yet (running or queued locally).
    in_flight: dict[str, _InFlight] = field(default_factory=dict)
    running_by_kind: Counter[str] = field(default_factory=Counter)
    is_draining: bool = False


class _Committer:
    """The single path that records outcomes, batching whatever is queued.

    A batch that hits ``BackendUnavailable`` is kept and retried (with the
    service's backoff): the fence makes a retry of an already-written outcome
    harmless (it comes back as lost, never as a second completion).

    A batch that returned rows to ``pending`` (paused, retried) wakes the
    claim loop once written: such a row may be eligible at once, and the
    wake-up sent when its handler ended came before it was pending again.
    """

    def __init__(self, backend: Backend, keeper: LeaseKeeper, waiter: Waiter, *, name: str) -> None:
        self._backend = backend
        self._keeper = keeper
        self._waiter = waiter
        self._queue: queue.SimpleQueue[Execution | None] = queue.SimpleQueue()
        self._batch: list[Execution] = []
        self._is_closing = False
        self.service = ServiceThread(name, self._step)

    def put(self, execution: Execution) -> None:
        self._queue.put(execution)

    def close(self) -> None:
        """Record everything queued so far, then end the thread."""
        self._queue.put(None)

    def _step(self) -> float:
        if not self._batch and not self._is_closing:
            try:
                self._take(self._queue.get(timeout=1.0))
            except queue.Empty:
                return 0.0
        while len(self._batch) < MAX_FINISH_BATCH:
            try:
                self._take(self._queue.get_nowait())
            except queue.Empty:
                break
        if self._batch:
            # Renewal stops first, so a renewal racing this finish is not reported as lost.
            self._keeper.drop(e.job.claim.job_id for e in self._batch)
            try:
                record(self._backend, self._batch)
            except BackendUnavailable:
                raise
            except Exception:
                logger.exception(
                    "recording %d outcome(s) failed; trying one by one", len(self._batch)
                )
                self._record_one_by_one()
            if any(e.outcome.kind in _PENDING_AGAIN for e in self._batch):
                self._waiter.wake()
            self._batch = []
        if self._is_closing and self._queue.empty():
            self.service.request_stop()
        return 0.0

    def _record_one_by_one(self) -> None:
        """Isolate an outcome the database refuses, so it cannot block the others.

        A refused outcome is dropped: its job stays claimed until its lease
        lapses and recovery returns it to ``pending`` (counting a failure, so
        the backstop ends a job that can never be recorded).
        """
        for index, execution in enumerate(self._batch):
            try:
                record(self._backend, [execution])
            except BackendUnavailable:
                self._batch = self._batch[index:]
                raise
            except Exception:
                claim = execution.job.claim
                logger.exception(
                    "the outcome of job %s (kind %s) run %d could not be recorded; "
                    "the job will be recovered when its lease expires",
                    claim.job_id,
                    execution.job.kind,
                    claim.run_count,
                    extra={"job_id": claim.job_id, "kind": execution.job.kind},
                )

    def _take(self, item: Execution | None) -> None:
        if item is None:
            self._is_closing = True
        else:
            self._batch.append(item)
