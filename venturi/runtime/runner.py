"""The one claim -> execute -> record path of every consumer of jobs.

The threaded worker calls its three steps from three places (claim loop,
handlers or its event loop, committer); ``Worker.run_once`` and ``venturi.testing.drain`` call
``run``, which does all three in the calling thread.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from venturi.backend import Backend
from venturi.controls import Limits
from venturi.errors import ConfigurationError
from venturi.events import Events
from venturi.options import parse_rate_limit
from venturi.runtime.claim_plan import ClaimPlan, ClaimRequest
from venturi.runtime.executor import Execution, aexecute, execute, record
from venturi.runtime.leases import LeaseKeeper
from venturi.step_log import StepSource
from venturi.types import ClaimedJob, ClaimFloor, KindLimits, SharedLimit

if TYPE_CHECKING:
    from venturi.task import Task

__all__ = ["Ran", "Runner", "worker_id"]

logger = logging.getLogger(__name__)

#: Most jobs per kind one aging step promotes.
AGING_BATCH = 500
#: Shortest time between two aging steps, in seconds.
MIN_AGING_STEP = 0.1
#: Seconds between two reads of the operator's limit overrides (ADR 0139): an override
#: reaches every worker within about this long. Pauses need no read: the claim itself
#: leaves a paused kind out.
CONTROL_REFRESH = 1.0
#: Shortest time between two reads of the overrides when wake-ups ask for them: a
#: change wakes the workers (its NOTIFY), which then read at once, at most this often.
CONTROL_MIN_GAP = 0.1


def worker_id() -> str:
    """``host:pid``, the ``claimed_by`` of every claim this process makes (ADR 19)."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True, slots=True)
class Ran:
    """One job run by ``Runner.run``: how it ended, and whether that was recorded.

    ``is_recorded`` is False when the job had lost its claim meanwhile (ADR 19).
    """

    execution: Execution
    is_recorded: bool


class Runner:
    """Claims jobs of the served ``kinds``, runs them and records their outcomes.

    Options:
        backend: the App's backend. The runner claims (``Claims``) and records
            (``Leases``) through it; it is the whole ``Backend`` because the
            worker builds its waiter, pruner and registration from
            ``runner.backend``.
        tasks: every task the App knows, by kind (recovery needs each backstop).
        kinds: the kinds served, a subset of ``tasks``.
        worker_id: the ``claimed_by`` of the claims (``worker_id()``).
        concurrency: the handler threads running the claimed jobs (for ``plan``).
        events: the App's event hub, told of claims and runs (ADR 0127).
        age_after: the App's priority aging (``promote_due``); None: none.
        result_max_bytes: the App's bound on stored results, applied to each
            outcome before ``finish`` (``executor.record``), and to durable steps.
        shared_limits: the App's shared limits by name (ADR 0138).
        steps_ahead: how far ahead a durable sleep's or wait's wake time counts as
            come (``drain(include_scheduled=True)``; ADR 0137).
    """

    def __init__(
        self,
        backend: Backend,
        tasks: Mapping[str, Task[Any, Any]],
        *,
        kinds: Collection[str],
        worker_id: str,
        concurrency: int = 1,
        events: Events | None = None,
        age_after: timedelta | None = None,
        result_max_bytes: int,
        shared_limits: Mapping[str, SharedLimit] | None = None,
        steps_ahead: timedelta = timedelta(0),
    ) -> None:
        self.backend = backend
        self.events = events
        self.worker_id = worker_id
        self._age_after = age_after
        self._result_max_bytes = result_max_bytes
        self._next_promotion = 0.0
        self._tasks = {kind: tasks[kind] for kind in kinds}
        self._max_failures = {kind: task.options.max_failures for kind, task in tasks.items()}
        self._dead_callbacks: dict[str, str | None] | None = {
            kind: None if t.options.on_dead is None else t.options.on_dead.kind
            for kind, t in self._tasks.items()
        }
        #: The App's shared limits (``app.limit``, ADR 0138), for every plan made here.
        self.shared_limits = dict(shared_limits or {})
        self.plan = ClaimPlan.for_tasks(
            self._tasks, concurrency=concurrency, shared=self.shared_limits
        )
        #: The overrides last read, and how many reads there were (``_controlled``).
        self._overrides: dict[str, KindLimits] = {}
        self._override_reads = 0
        self._next_control_read = 0.0
        self._last_control_read = 0.0
        #: A wake-up asked for a read that ``CONTROL_MIN_GAP`` deferred (``woken``).
        self._is_control_read_asked = False
        self._steps = StepSource(backend, result_max_bytes, steps_ahead)

    def lease_keeper(
        self,
        *,
        recovery_interval: float,
        on_recovered: Callable[[], None] | None = None,
        on_cancel_requested: Callable[[set[str]], None] | None = None,
    ) -> LeaseKeeper:
        """A keeper for the claims of these tasks (one per worker cycle)."""
        return LeaseKeeper(
            self.backend,
            leases={kind: task.options.lease for kind, task in self._tasks.items()},
            max_failures=self._max_failures,
            recovery_interval=recovery_interval,
            on_recovered=on_recovered,
            on_cancel_requested=on_cancel_requested,
            events=self.events,
        )

    def promote_due(self, now: float) -> None:
        """Priority aging, at most every tenth of ``age_after`` (and at most ten times
        a second): a job is promoted within about 10% of its due time."""
        if self._age_after is None or now < self._next_promotion:
            return
        self._next_promotion = now + max(self._age_after.total_seconds() / 10, MIN_AGING_STEP)
        promoted = self.backend.promote_waiting(
            self._tasks, age_after=self._age_after, limit=AGING_BATCH
        )
        if promoted:
            logger.debug("promoted %d waiting jobs one tier", promoted)

    def task(self, kind: str) -> Task[Any, Any]:
        return self._tasks[kind]

    def claim(
        self,
        request: ClaimRequest,
        *,
        floors: Mapping[str, ClaimFloor] | None = None,
        horizon: timedelta = timedelta(0),
        plan: ClaimPlan | None = None,
    ) -> list[ClaimedJob]:
        """One claim; through ``claim_limited`` when a kind is limited across workers,
        whose throttled kinds ``plan`` (default: this runner's) then leaves out until
        their time (ADR 0128); through ``claim_fair`` for a kind with a fair key (ADR 0129).
        Claims are told to the App's events (ADR 0127)."""
        plan = plan if plan is not None else self.plan
        if self._dead_callbacks is not None:
            # Once per runner, before its first claim: the store's failure callbacks
            # (ADR 0138) of the kinds served are the code's, added or removed.
            self.backend.set_dead_callbacks(self._dead_callbacks)
            self._dead_callbacks = None
        self._controlled(plan)
        if plan.fair.isdisjoint(request.kinds):
            jobs = self._claim_shared(request, floors=floors, horizon=horizon, plan=plan)
        else:
            jobs = self._claim_in_turns(request, floors=floors, horizon=horizon, plan=plan)
        if jobs and self.events is not None and self.events.active:
            self.events.claimed(jobs, self.worker_id)
        return jobs

    def _controlled(self, plan: ClaimPlan) -> None:
        """Put the operator's limit overrides over ``plan`` (ADR 0139), read again at most
        every ``CONTROL_REFRESH`` seconds: one primary-key read of a tiny table per
        worker per second, not per claim."""
        now = time.monotonic()
        if now >= self._next_control_read and self._tasks:
            self._next_control_read = now + CONTROL_REFRESH
            self._last_control_read = now
            self._is_control_read_asked = False
            self._overrides = {
                control.kind: limits
                for control in self.backend.kind_controls(self._tasks)
                if (limits := _override_limits(control.kind, control.overrides)) is not None
            }
            self._override_reads += 1
        if plan.overrides_read != self._override_reads:
            plan.override(self._overrides)
            plan.overrides_read = self._override_reads

    def woken(self) -> None:
        """The claim loop was woken (a NOTIFY, perhaps a control change's): the next claim
        reads the overrides, unless one read them less than ``CONTROL_MIN_GAP`` ago (then
        ``control_read_due_in`` says when the deferred read is due)."""
        self._is_control_read_asked = True
        self._next_control_read = min(
            self._next_control_read, self._last_control_read + CONTROL_MIN_GAP
        )

    def control_read_due_in(self, now: float) -> float | None:
        """Seconds until the read a wake-up asked for; None when none is pending."""
        if not self._is_control_read_asked:
            return None
        return max(self._next_control_read - now, 0.0)

    def _claim_in_turns(
        self,
        request: ClaimRequest,
        *,
        floors: Mapping[str, ClaimFloor] | None,
        horizon: timedelta,
        plan: ClaimPlan,
    ) -> list[ClaimedJob]:
        """The claims of ``plan.turns``, each for what the earlier ones left. A fair
        kind's claim that comes back short is topped up by a plain claim of the kind,
        which finds its jobs without a key (enqueued before it declared one)."""
        jobs: list[ClaimedJob] = []
        for turn in plan.turns(request):
            room = request.limit - len(jobs)
            if room <= 0:
                break
            if turn.kinds[0] not in plan.fair:
                jobs += self._claim_shared(
                    ClaimRequest(turn.kinds, room, turn.lease),
                    floors=floors,
                    horizon=horizon,
                    plan=plan,
                )
                continue
            [kind] = turn.kinds
            fair = self.backend.claim_fair(
                kind=kind, limit=room, worker_id=self.worker_id, lease=turn.lease, horizon=horizon
            )
            if len(fair) < room:
                fair += self.backend.claim(
                    kinds=turn.kinds,
                    limit=room - len(fair),
                    worker_id=self.worker_id,
                    lease=turn.lease,
                    horizon=horizon,
                )
            jobs += fair
        return jobs

    def _claim_shared(
        self,
        request: ClaimRequest,
        *,
        floors: Mapping[str, ClaimFloor] | None,
        horizon: timedelta,
        plan: ClaimPlan,
    ) -> list[ClaimedJob]:
        """The kinds' claim in one statement (or one limited transaction, ADR 0128)."""
        if not any(kind in plan.limits for kind in request.kinds):
            jobs = self.backend.claim(
                kinds=request.kinds,
                limit=request.limit,
                worker_id=self.worker_id,
                lease=request.lease,
                horizon=horizon,
                floors=floors,
            )
        else:
            claimed = self.backend.claim_limited(
                kinds=request.kinds,
                limit=request.limit,
                worker_id=self.worker_id,
                lease=request.lease,
                limits=plan.limits,
                horizon=horizon,
                floors=floors,
            )
            plan.throttle(
                {kind: wait.total_seconds() for kind, wait in claimed.throttled.items()},
                time.monotonic(),
            )
            jobs = claimed.jobs
        return jobs

    def execute(self, job: ClaimedJob, *, cancelled: Callable[[], bool] | None = None) -> Execution:
        """Run the job's handler in this thread (executor.py: it never raises for a handler)."""
        events = self.events
        if events is None or not events.active:
            return execute(self._tasks[job.kind], job, cancelled=cancelled, steps=self._steps)
        started = time.monotonic()
        with events.running(job, self.worker_id):
            execution = execute(self._tasks[job.kind], job, cancelled=cancelled, steps=self._steps)
            events.ended(job, self.worker_id, execution.outcome, time.monotonic() - started)
        return execution

    async def aexecute(
        self, job: ClaimedJob, *, cancelled: Callable[[], bool] | None = None
    ) -> Execution:
        """Await the job's ``async def`` handler on the running loop (``executor.aexecute``),
        observed as ``execute`` is (the run span is the current one inside the task)."""
        events = self.events
        if events is None or not events.active:
            return await aexecute(
                self._tasks[job.kind], job, cancelled=cancelled, steps=self._steps
            )
        started = time.monotonic()
        with events.running(job, self.worker_id):
            execution = await aexecute(
                self._tasks[job.kind], job, cancelled=cancelled, steps=self._steps
            )
            events.ended(job, self.worker_id, execution.outcome, time.monotonic() - started)
        return execution

    def record(self, executions: Sequence[Execution]) -> set[str]:
        """Write the outcomes in one fenced ``finish``; returns the ids written (ADR 0104)."""
        return record(self.backend, executions, result_max_bytes=self._result_max_bytes)

    def run(self, request: ClaimRequest, *, horizon: timedelta = timedelta(0)) -> list[Ran]:
        """Claim one batch, run it here one job after another, record it; returns the runs.

        Nothing renews these claims: ``request`` should carry the longest
        lease of its kinds (``ClaimPlan.request(is_renewed=False)``).
        """
        jobs = self.claim(request, horizon=horizon)
        executions = [self.execute(job) for job in jobs]
        written = self.record(executions)
        return [Ran(e, e.job.claim.job_id in written) for e in executions]


def _override_limits(kind: str, overrides: Limits) -> KindLimits | None:
    """The overrides the claim enforces (``ClaimPlan.override`` puts them over the
    declared limits); None: none."""
    rate = None
    if overrides.rate_limit is not None:
        try:
            rate = parse_rate_limit(overrides.rate_limit)
        except ConfigurationError:
            logger.warning(
                "kind %s: ignoring the stored rate limit override %r, which does not parse",
                kind,
                overrides.rate_limit,
            )
    if overrides.global_concurrency is None and rate is None and overrides.key_concurrency is None:
        return None
    return KindLimits(overrides.global_concurrency, rate, key_concurrency=overrides.key_concurrency)
