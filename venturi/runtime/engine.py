"""The running worker: one start()..stop() cycle of a Worker's threads and claims.

The parts of one cycle (threads named ``venturi-worker-...``):

- **claim loop** - claims batches planned by ``ClaimPlan`` (room under each
  cap, ADR 0107; claim-ahead, ADR 0114; floors, ADR 0115), then waits
  (``Waiter``, ADR 20) when there was less work than room, on the listener
  that turns NOTIFY into wake-ups (ADR 0102; no thread of its own, ADR 0132);
- **handlers** - ``concurrency`` threads, each running one job at a time
  (runtime/handlers.py);
- **event loop** - when some served task is ``async def``: one thread owning
  one asyncio loop, running up to ``async_concurrency`` async handlers at
  once; it never runs a sync handler, and an async one never holds a handler
  thread (runtime/aio.py, ADR 0126);
- **committer** - the one path that records outcomes (ADR 0104);
- **lease keeper** - renews held claims and sweeps expired ones (ADR 19, 0109);
- **limits** - ends runs past their task's ``time_limit``, and cancelled runs
  still going one renewal interval after the worker learnt of the request
  (runtime/deadlines.py, ADR 0121);
- **pruner** - with ``retention``, deletes old terminal jobs;
- **registry** - keeps the worker's registry entry alive (ADR 0119).

The claim, the run and the record go through one ``Runner``, the same path
``Worker.run_once`` and ``venturi.testing.drain`` use. The engine logs as
``venturi.worker``, the logger of the ``Worker`` it runs for.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from venturi.backend import Backend
from venturi.errors import BackendUnavailable
from venturi.events import Events, JobsReleased
from venturi.runtime.aio import EventLoopThread
from venturi.runtime.claim_plan import ClaimPlan
from venturi.runtime.committer import Committer
from venturi.runtime.deadlines import Deadlines
from venturi.runtime.floors import ClaimFloors
from venturi.runtime.handlers import HandlerThreads, Runs
from venturi.runtime.held import HeldJob, Holdings
from venturi.runtime.prefetch import Prefetch
from venturi.runtime.pruner import Pruner
from venturi.runtime.registration import Registration
from venturi.runtime.runner import Runner
from venturi.runtime.service import Backoff, Part, ServiceThread
from venturi.runtime.waiting import Waiter
from venturi.types import ClaimedJob

__all__ = ["SHUTDOWN_TIMEOUT", "Engine", "EngineSettings"]

#: The Worker's logger: log consumers and tests read this name.
logger = logging.getLogger("venturi.worker")

#: How long stop() gives the committer to record what handlers finished, and
#: the lease keeper, listener and claim loop to end, beyond the grace period.
SHUTDOWN_TIMEOUT = 10.0
#: How long stop() waits for handler threads to end once their jobs were released.
_HANDLER_JOIN_TIMEOUT = 0.5
#: How long stop() waits for the event loop to end once its runs were cancelled.
_LOOP_JOIN_TIMEOUT = 1.0
#: How often stop()'s wait for running handlers looks for a second signal.
_GRACE_SLICE = 0.2


@dataclass(frozen=True, slots=True)
class EngineSettings:
    """A Worker's options, as its engine runs them (``Worker`` validated them)."""

    concurrency: int
    async_concurrency: int
    kinds: tuple[str, ...]
    poll_interval: float
    recovery_interval: float
    retention: timedelta | None
    prefetch: int


@dataclass(slots=True)
class _Pool:
    """Where one kind of handler runs (threads or the event loop), and how it is claimed for.

    Each pool claims apart, with its own floors: a short claim of one must not
    drop the other's (ADR 0115).
    """

    plan: ClaimPlan
    is_async: bool = False
    floors: ClaimFloors = field(default_factory=ClaimFloors)


class Engine:
    """One start()..stop() cycle of a Worker: its parts, its claims, their ordered stop.

    Built and started by ``Worker.start()``; ``drain()`` then ``stop()`` end
    it, and a new cycle is a new Engine, so a handler abandoned by this one
    never touches the next one's counts. ``backend`` releases unfinished jobs
    and serves the waiter, pruner and registry entry; ``events`` is told of
    the release.
    """

    def __init__(
        self,
        runner: Runner,
        settings: EngineSettings,
        *,
        backend: Backend,
        events: Events,
        name: str,
    ) -> None:
        self._runner = runner
        self._settings = settings
        self._backend = backend
        self._events = events
        self._holdings = holdings = Holdings()
        #: Set when stop() ends; until then a bounded pause of the release retries.
        self._stopped = threading.Event()
        self._waiter = waiter = Waiter(backend, poll_interval=settings.poll_interval)
        self._keeper = keeper = runner.lease_keeper(
            recovery_interval=settings.recovery_interval,
            on_recovered=waiter.wake,
            # Late-bound: the deadlines, built below, need this keeper.
            on_cancel_requested=lambda job_ids: deadlines.cancel_requested(job_ids),  # noqa: PLW0108
        )
        keyed = {kind for kind, limits in runner.plan.limits.items() if limits.is_keyed}
        self._committer = committer = Committer(
            runner.record,
            keeper,
            on_pending=waiter.wake,
            name=f"{name}-committer",
            # Late-bound: the pools, built below, hold the plans to tell (ADR 0138).
            on_recorded=(lambda kinds: self._keys_freed(kinds & keyed)) if keyed else None,
        )
        self._prefetch = prefetch = Prefetch(
            concurrency=settings.concurrency, limit=settings.prefetch
        )
        async_kinds = {kind for kind in settings.kinds if runner.task(kind).is_async}
        #: Whether some served task is ``async def`` (then the event loop runs).
        self.has_async_kinds = bool(async_kinds)
        #: The sync handlers' pool, then the async handlers' one (indexed by ``is_async``).
        self._pools = [
            _Pool(self._plan(set(settings.kinds) - async_kinds, settings.concurrency)),
            _Pool(self._plan(async_kinds, settings.async_concurrency), is_async=True),
        ]
        self._loop = (
            EventLoopThread(f"{name}-loop", describe=holdings.describe) if async_kinds else None
        )
        self._runs = Runs(
            holdings,
            runner=runner,
            keeper=keeper,
            committer=committer,
            prefetch=prefetch,
            loop=self._loop,
            is_claim_due=self._is_claim_due,
            wake_claims=waiter.wake,
        )
        self._handlers = HandlerThreads(
            self._runs.run_in_thread, count=settings.concurrency, name=f"{name}-handler"
        )
        deadlines = Deadlines(
            holdings,
            runner=runner,
            keeper=keeper,
            committer=committer,
            loop=self._loop,
            replace_thread=self._handlers.add,
            concurrency=settings.concurrency,
            wake_claims=waiter.wake,
        )
        self._claiming = ServiceThread(f"{name}-claim", self._claim_step, on_exit=waiter.close)
        #: The parts whose stop order does not matter: lease keeper, limits, pruner, registry.
        self._others: list[Part] = [
            ServiceThread(f"{name}-leases", keeper.step),
            ServiceThread(f"{name}-limits", deadlines.step),
        ]
        if settings.retention is not None:
            pruner = Pruner(backend, retention=settings.retention)
            self._others.append(ServiceThread(f"{name}-pruner", pruner.step))
        # Registered by its first step, deregistered when its thread ends (ADR 0119).
        registration = Registration(
            backend,
            claimed_by=runner.worker_id,
            kinds=settings.kinds,
            concurrency=settings.concurrency,
            interval=keeper.renew_interval,
            running=holdings.running,
        )
        self._others.append(
            ServiceThread(f"{name}-registry", registration.step, on_exit=registration.deregister)
        )

    def start(self) -> None:
        """Start every part, the claim loop last (it hands work to the others)."""
        loop: list[Part] = [self._loop] if self._loop is not None else []
        parts: list[Part] = [self._handlers, *loop, self._committer, *self._others, self._claiming]
        for part in parts:
            part.start()

    def drain(self) -> int:
        """Start no more held jobs (the first step of stopping); returns how many run now."""
        with self._holdings.lock:
            self._holdings.is_draining = True
            return sum(entry.is_running for entry in self._holdings.in_flight.values())

    def stop(self, grace_deadline: float, hurry: Callable[[], bool]) -> None:
        """Stop after ``drain()`` (ADR 21): running handlers finish until ``grace_deadline``
        (``hurry`` returning True cuts that short), the jobs still held are released, every
        outcome already produced is recorded, then the threads end, each with a deadline."""
        # In this order, because each step hands work to the next: nothing new is
        # claimed, handlers finish within the grace, what they did not finish is
        # released, then the committer records every outcome they produced.
        self._claiming.request_stop()
        self._waiter.wake()  # ends the claim loop's idle wait
        self._wait_for_handlers(grace_deadline, hurry)
        deadline = time.monotonic() + SHUTDOWN_TIMEOUT
        self._claiming.join(deadline)
        self._release_unfinished(deadline)
        if self._loop is not None:
            # Async runs still going were released just now: cancel them for real.
            self._loop.request_stop()
            self._loop.join(min(deadline, time.monotonic() + _LOOP_JOIN_TIMEOUT))
        self._handlers.request_stop()
        self._committer.request_stop()
        self._committer.join(deadline)
        for part in self._others:
            part.request_stop()
        self._holdings.limits_changed.set()  # ends the limits thread's wait
        for part in self._others:
            part.join(deadline)
        # Idle handlers end at once on their sentinel; one still running a released job
        # is not waited for (it is a daemon, and its outcome is discarded).
        self._handlers.join(min(deadline, time.monotonic() + _HANDLER_JOIN_TIMEOUT))
        self._stopped.set()

    # -- the claim loop ------------------------------------------------------------------

    def _plan(self, kinds: set[str], concurrency: int) -> ClaimPlan:
        """The claims of one pool: its kinds, each cap counting that kind's runs (ADR 0126)."""
        return ClaimPlan.for_tasks(
            {kind: self._runner.task(kind) for kind in kinds},
            concurrency=concurrency,
            shared=self._runner.shared_limits,
        )

    def _claim_step(self) -> float:
        """One claim per pool with room (sync handlers, async handlers), then the wait."""
        runner, waiter, holdings = self._runner, self._waiter, self._holdings
        waiter.arm()
        runner.promote_due(time.monotonic())
        with holdings.lock:
            if holdings.is_draining:
                return 0.0
            requests = [
                (pool, request)
                for pool in self._pools
                if (
                    request := pool.plan.request(
                        free=self._room(pool),
                        running=holdings.running_by_kind,
                        is_renewed=True,
                        now=time.monotonic(),
                    )
                )
                is not None
            ]
        if not requests:
            # Not worth a claim yet (or every capped kind is full): a handler ending wakes us,
            # and a kind throttled across workers (ADR 0128) is due at its time.
            if waiter.wait(self._throttled_wait(self._settings.poll_interval)):
                runner.woken()  # perhaps a control change (ADR 0139)
            return 0.0
        short: list[str] = []
        for pool, request in requests:
            floors = pool.floors.current(time.monotonic())
            jobs = runner.claim(request, floors=floors, plan=pool.plan)
            pool.floors.record(jobs, used=floors, limit=request.limit, now=time.monotonic())
            if jobs:
                self._dispatch(jobs, is_async=pool.is_async)
                # Yield the GIL so a handler starts its job now, not after this thread has
                # prepared its next query (bench/README.md, "What changed").
                time.sleep(0)
            if len(jobs) < request.limit:
                now = time.monotonic()
                short.extend(k for k in request.kinds if pool.plan.is_unthrottled(k, now))
        if short:
            wait = self._until_control_read(self._throttled_wait(waiter.time_to_next_job(short)))
            if waiter.wait(wait):
                runner.woken()
        return 0.0

    def _throttled_wait(self, wait: float) -> float:
        """``wait``, shortened to when the soonest throttled kind is due (ADR 0128)."""
        now = time.monotonic()
        dues = [
            due for pool in self._pools if (due := pool.plan.next_unthrottled(now)) is not None
        ]
        return min([wait, *dues])

    def _until_control_read(self, wait: float) -> float:
        """``wait``, shortened to the overrides' read a wake-up asked for (ADR 0139). Only
        after a claim: with no claim due, the read waits for the next one (no spin)."""
        due = self._runner.control_read_due_in(time.monotonic())
        return wait if due is None else min(wait, due)

    def _room(self, pool: _Pool) -> int:
        """Jobs worth claiming now for ``pool`` (called under the holdings' lock).

        Sync handlers: a slot whose abandoned handler got no replacement is
        still taken, and claims run ahead (ADR 0114). Async handlers: free
        places on the loop, nothing held ahead, and only once half of them
        are free, so that a busy loop is refilled by batches rather than by
        one claim per run that ends.
        """
        holdings = self._holdings
        if pool.is_async:
            limit = self._settings.async_concurrency
            free = limit - holdings.held_async
            return free if 2 * free >= limit else 0
        held = len(holdings.in_flight) - holdings.held_async + holdings.unreplaced
        return pool.plan.room(held=held, prefetch=self._prefetch)

    def _keys_freed(self, kinds: set[str]) -> None:
        """Outcomes of keyed kinds were written: their keys' slots are free, so claim
        for them now rather than after their recheck wait (ADR 0138)."""
        if kinds:
            for pool in self._pools:
                for kind in kinds:
                    pool.plan.ended(kind)
            self._waiter.wake()

    def _is_claim_due(self, entry: HeldJob) -> bool:
        """Whether ``entry`` ending makes a claim worth it (under the holdings' lock)."""
        pool = self._pools[entry.is_async]
        return pool.plan.is_capped(entry.job.kind) or self._room(pool) > 0

    def _dispatch(self, jobs: list[ClaimedJob], *, is_async: bool) -> None:
        self._keeper.hold(jobs)
        with self._holdings.lock:
            for job in jobs:
                self._holdings.add(HeldJob(job, is_async=is_async))
        if logger.isEnabledFor(logging.DEBUG):  # off, as usual: no extra dict made per job
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
                self._handlers.put(job)
            return
        assert self._loop is not None  # async kinds are served: the loop was built
        for job in jobs:
            self._loop.submit(functools.partial(self._runs.start_async, job))

    # -- stopping ------------------------------------------------------------------------

    def _wait_for_handlers(self, deadline: float, hurry: Callable[[], bool]) -> None:
        holdings = self._holdings
        with holdings.lock:
            while any(entry.is_running for entry in holdings.in_flight.values()):
                remaining = deadline - time.monotonic()
                if remaining <= 0 or hurry():
                    return
                holdings.changed.wait(min(remaining, _GRACE_SLICE))

    def _release_unfinished(self, deadline: float) -> None:
        """Give back every job held but not finished (ADR 21); late outcomes are discarded."""
        holdings = self._holdings
        with holdings.lock:
            unfinished = [e for e in holdings.in_flight.values() if not e.is_abandoned]
            for entry in unfinished:
                entry.is_abandoned = True
                if not entry.is_running:
                    holdings.forget(entry)
        if not unfinished:
            return
        claims = [entry.job.claim for entry in unfinished]
        self._keeper.drop(claim.job_id for claim in claims)
        backoff = Backoff()
        while True:
            try:
                released = self._backend.release(claims)
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
            if self._events.active:
                self._events.emit(JobsReleased(count=released, worker_id=self._runner.worker_id))
            return
