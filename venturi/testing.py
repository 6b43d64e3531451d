"""Helpers for users' tests: run queued jobs in the test's own thread.

``drain(app)`` runs every due job through the same claim, executor and
``finish`` path a worker uses, one job at a time in priority-then-age order,
until none is left, and returns what happened to each run. A paused job that
is due again at once runs again in the same drain, as it would on a worker.

``perform(task, ...)`` runs a handler once with no database at all and
returns the ``Outcome`` a worker would record, to unit-test a handler's
endings (return, pause, ``Retry``, ``Fail``, an exception) directly.

``with eager(app) as session:`` makes ``.delay()``, ``.apply_async()`` and
``.delay_many()`` of the tasks that enqueue through ``app`` run their handler
at once, in the caller's thread, with no database: same validation, same
outcome rules, retries and pauses run at once up to their bounds, and
``session.runs`` says what happened (ADR 0120). A job whose expiry comes at
or before it would be due (``expires`` shorter than its countdown, or already
past) ends ``dead``, note ``expired``, without running, as on a worker (ADR
0135).

``async def`` handlers (ADR 0126) run in all three: ``drain``, ``perform`` and
``eager`` run each on a fresh event loop in the caller's thread
(``asyncio.run``), cut at its ``time_limit`` by real cancellation. Called
inside a running event loop (an async test), they refuse with
``ConfigurationError`` before anything runs, since ``asyncio.run`` cannot
nest: there, ``await aperform(task, ...)`` runs one handler on the running
loop.

Sync handlers run inline, where nothing can interrupt them (ADR 0121): a run
that returns after its task's ``time_limit`` gets the outcome a worker would
have recorded at the limit (``retried``, or ``dead`` at the backstop, note
``time limit exceeded``), whatever the handler returned. Nobody can cancel a
job while it runs here, so ``ctx.is_cancelled()`` is False; a job cancelled
before ``drain`` is ``dead`` and never runs.

Durable steps (ADR 0137): under ``eager`` a job's steps are kept in memory
for the call: its next run replays them, its sleeps pass at once, and a
``wait_for`` (no event can reach a job still running inline) times out at
once, or pauses until ``max_runs`` without a timeout. ``drain`` records them
in the test database, as a worker does; with ``include_scheduled`` its sleeps
pass and its waits time out at once too.

Workflows (ADR 0125): ``drain`` runs a chain or chord to its end, since each
finish makes the next steps pending and ``drain`` claims until nothing is
due. Under ``eager``, ``chain(...).delay()`` / ``chord(...).delay()`` run every
step inline in the order built (a step after its parents), each given its
parents' results through the same JSON round trip; a step whose parent ended
``dead`` does not run and is ``dead`` in the session, note ``dependency <id>
(<kind>) ended dead``, so its ref raises ``JobFailed`` as it would on workers.

Example::

    from venturi.testing import drain

    def test_welcome_mail_is_sent(app):
        send_welcome.delay("a@example.org")
        [run] = drain(app)
        assert run.outcome.kind is OutcomeKind.COMPLETED
"""

from __future__ import annotations

import itertools
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from venturi.errors import ConfigurationError, JobFailed, JobFinished, JobNotFound
from venturi.ids import new_id
from venturi.refs import JobRef
from venturi.runtime.executor import aexecute, execute, refuse_inside_event_loop
from venturi.runtime.runner import Runner, worker_id
from venturi.serialization import decode_json, encode_json
from venturi.step_log import MemorySteps, StepSource
from venturi.task_writes import eager_session
from venturi.types import (
    Claim,
    ClaimedJob,
    NewEdge,
    NewJob,
    NewWorkflow,
    Outcome,
    OutcomeKind,
    Priority,
    Status,
)

__all__ = [
    "DEFAULT_MAX_DEPTH",
    "DEFAULT_MAX_RUNS",
    "SCHEDULED_HORIZON",
    "DrainLimitReached",
    "EagerLimitReached",
    "EagerSession",
    "Run",
    "aperform",
    "drain",
    "eager",
    "perform",
]

if TYPE_CHECKING:
    from venturi.app import App
    from venturi.task import Task

#: How far ahead ``include_scheduled=True`` looks: every future job.
SCHEDULED_HORIZON = timedelta(days=365 * 100)
#: Runs after which ``drain`` (or ``eager``, per job enqueued from the test) gives up,
#: so a job that pauses or retries forever fails the test.
DEFAULT_MAX_RUNS = 10_000
#: How deep ``eager`` runs jobs enqueued from inside handlers run inline, well
#: within Python's recursion limit (a task that enqueues itself fails the test).
DEFAULT_MAX_DEPTH = 32
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Run:
    """One run of one job during ``drain`` or ``eager``.

    ``payload`` is the job's arguments as stored: a JSON object of named
    arguments. ``is_recorded`` is False when the outcome was discarded because
    the job had lost its claim meanwhile (ADR 19); under ``eager`` nothing can
    take the claim, so it is always True.
    """

    job_id: str
    kind: str
    run_count: int
    outcome: Outcome
    is_recorded: bool
    payload: Any


class DrainLimitReached(AssertionError):
    """``drain`` ran ``max_runs`` jobs and work was still left."""


class EagerLimitReached(DrainLimitReached):
    """Under ``eager``, a job led to ``max_runs`` runs, or jobs nested ``max_depth`` deep."""


def drain(
    app: App,
    kinds: Collection[str] | None = None,
    include_scheduled: bool = False,
    *,
    max_runs: int = DEFAULT_MAX_RUNS,
) -> list[Run]:
    """Run due jobs of ``kinds`` (default: every task of ``app``) until none is left.

    With ``include_scheduled``, jobs whose ``visible_at`` is in the future
    (countdowns, backoff, pauses, beat ticks) are run too, and so are the
    retries and pauses they lead to: a failing job is retried until its
    backstop makes it ``dead``. Raises ``DrainLimitReached`` after ``max_runs``
    runs (a job that pauses or retries forever).
    """
    served = app.served_kinds(kinds, who="drain")
    if not served:
        return []
    tasks = app.tasks()
    if any(tasks[kind].is_async for kind in served):
        refuse_inside_event_loop("drain")  # before any claim, so no job is left claimed
    horizon = SCHEDULED_HORIZON if include_scheduled else timedelta(0)
    runner = Runner(
        app.backend,
        app.tasks(),
        kinds=served,
        worker_id=worker_id(),
        result_max_bytes=app.result_max_bytes,
        shared_limits=app.shared_limits(),
        steps_ahead=horizon,
    )
    request = runner.plan.request(free=1, running={}, is_renewed=False)
    assert request is not None  # one free slot, nothing running: every kind has room
    runs: list[Run] = []
    while len(runs) < max_runs:
        ran = runner.run(request, horizon=horizon)
        if not ran:
            return runs
        runs.extend(
            Run(
                job_id=r.execution.job.claim.job_id,
                kind=r.execution.job.kind,
                run_count=r.execution.job.claim.run_count,
                outcome=r.execution.outcome,
                is_recorded=r.is_recorded,
                payload=r.execution.job.payload,
            )
            for r in ran
        )
    left = runner.claim(request, horizon=horizon)
    if not left:
        return runs
    app.backend.release([job.claim for job in left])
    raise DrainLimitReached(
        f"drain ran {max_runs} jobs and work is still left; "
        "a handler may be pausing or retrying forever"
    )


def perform(task: Task[Any, Any], /, *args: Any, **kwargs: Any) -> Outcome:
    """Run ``task``'s handler once, in this thread, without a database.

    The arguments go through the same binding and JSON round trip as
    ``.delay()`` (so a call that could not be enqueued raises here too), and
    the handler's ending is mapped exactly as a worker maps it. The context is
    that of a first run (``run_count=1``, no carry). An ``async def`` handler
    runs on a fresh event loop (``asyncio.run``); inside a running loop use
    ``await aperform(...)``.
    """
    return execute(task, _performed_job(task, args, kwargs)).outcome


async def aperform(task: Task[Any, Any], /, *args: Any, **kwargs: Any) -> Outcome:
    """``perform`` awaited on the running event loop, for async tests and handlers.

    An ``async def`` handler is awaited here (its ``time_limit`` is checked
    after the fact, like a sync handler's under ``perform``); a sync one runs
    in this thread, blocking the loop meanwhile, as ``perform`` would.
    """
    job = _performed_job(task, args, kwargs)
    if task.is_async:
        return (await aexecute(task, job)).outcome
    return execute(task, job).outcome


def _performed_job(task: Task[Any, Any], args: Sequence[Any], kwargs: dict[str, Any]) -> ClaimedJob:
    payload = decode_json(task.new_job(args, kwargs).payload)
    return _claimed_job(new_id(), task.kind, payload, worker=worker_id())


@contextmanager
def eager(
    app: App, *, max_runs: int = DEFAULT_MAX_RUNS, max_depth: int = DEFAULT_MAX_DEPTH
) -> Iterator[EagerSession]:
    """Run the jobs enqueued through ``app`` at once, in the enqueuing thread, without a database.

    Inside the block, ``.delay()``, ``.apply_async()`` and ``.delay_many()`` of
    ``app``'s tasks, and of default-registry tasks while ``app`` is the current
    App, validate the call exactly as usual (a refused call raises the same
    error and nothing runs), then run the handler to its end before returning
    a ``JobRef`` with a fresh id: retries and pauses run again at once, without
    waiting for their delay; ``countdown``/``eta`` are ignored; dedup never
    merges (no job is pending); ``connection=`` is ignored and nothing is
    written. Jobs enqueued by a handler run inline too, depth first. The
    session records every run in ``session.runs``.

    The scope is this context (a contextvar), so threads started elsewhere,
    such as a worker's, enqueue as usual. Raises ``EagerLimitReached`` from the
    enqueuing call when one job led to ``max_runs`` runs, or when jobs were
    enqueued ``max_depth`` deep inside each other. Example::

        with eager(app) as session:
            ref = send_welcome.delay("a@example.org")
        assert session.outcome_of(ref).kind is OutcomeKind.COMPLETED
    """
    session = EagerSession(app, max_runs=max_runs, max_depth=max_depth)
    token = eager_session.set(session)
    try:
        yield session
    finally:
        eager_session.reset(token)


class EagerSession:
    """The runs of one ``eager`` block, and where its enqueues go (``Task`` calls ``enqueue``)."""

    def __init__(self, app: App, *, max_runs: int, max_depth: int) -> None:
        self.app = app
        self.runs: list[Run] = []
        self._max_runs = max_runs
        self._max_depth = max_depth
        self._worker_id = worker_id()
        self._depth = 0
        self._runs_left = max_runs
        self._not_run: dict[str, Outcome] = {}

    def outcome_of(self, ref: JobRef | str) -> Outcome:
        """How the job of ``ref`` (or that id) ended: the outcome of its last run."""
        job_id = ref.id if isinstance(ref, JobRef) else ref
        outcome = self._find_outcome(job_id)
        if outcome is None:
            raise KeyError(f"no job {job_id!r} ran in this eager session")
        return outcome

    def _find_outcome(self, job_id: str) -> Outcome | None:
        for run in reversed(self.runs):
            if run.job_id == job_id:
                return run.outcome
        return self._not_run.get(job_id)

    def enqueue_workflow(self, workflow: NewWorkflow) -> None:
        """Run the steps inline in position order (parents first), each given its
        parents' results; the dependants of a dead step end dead without running."""
        kinds = {step.job.id: step.job.kind for step in workflow.steps}
        parents: dict[str, list[NewEdge]] = {}
        for edge in sorted(workflow.edges, key=lambda e: e.position):
            parents.setdefault(edge.child_id, []).append(edge)
        for step in workflow.steps:
            edges = parents.get(step.job.id, [])
            dead = next(
                (e.parent_id for e in edges if self.status(e.parent_id) is Status.DEAD), None
            )
            if dead is not None:
                note = f"dependency {dead} ({kinds[dead]}) ended dead"
                self._not_run[step.job.id] = Outcome(OutcomeKind.DEAD, note=note)
                continue
            job = step.job
            if step.input_arg is not None:
                results = [self.result(e.parent_id) for e in edges]
                payload = decode_json(job.payload)
                payload[step.input_arg] = results if step.input_all else results[0]
                job = replace(job, payload=encode_json(payload, what=f"the inputs of {job.kind}"))
            self.enqueue([job])

    def enqueue(self, jobs: Sequence[NewJob], *, connection: object | None = None) -> list[JobRef]:
        """Run each validated job to its end; ``connection`` is ignored: nothing is written."""
        refs = []
        for job in jobs:
            if self._depth > 0:
                self._run_to_end(job)
            else:
                self._runs_left = self._max_runs
                try:
                    self._run_to_end(job)
                except _Unwind as unwind:
                    raise EagerLimitReached(unwind.reason) from None
            refs.append(JobRef(job.id, source=self))
        return refs

    # -- results of the session's jobs (ADR 0124): its refs wait here, not in a database --

    def result(self, job_id: str, timeout: float | None = 0) -> Any:
        """The result of a job run in this session (it has ended: eager runs to the end)."""
        outcome = self._last_outcome(job_id)
        if outcome.kind is OutcomeKind.DEAD:
            raise JobFailed(job_id, outcome.note)
        return None if outcome.result is None else decode_json(outcome.result)

    async def aresult(self, job_id: str, timeout: float | None = 0) -> Any:
        return self.result(job_id, timeout)

    def send(
        self, job_id: str, name: str, payload: Any = None, *, connection: object | None = None
    ) -> None:
        """An event to a job of this session: it has ended (eager runs to the end)."""
        raise JobFinished(job_id, self.status(job_id).value)

    async def asend(
        self, job_id: str, name: str, payload: Any = None, *, connection: object | None = None
    ) -> None:
        self.send(job_id, name, payload)

    def status(self, job_id: str) -> Status:
        kind = self._last_outcome(job_id).kind
        return Status.DEAD if kind is OutcomeKind.DEAD else Status.COMPLETED

    def _is_dead(self, job_id: str) -> bool:
        return self._last_outcome(job_id).kind is OutcomeKind.DEAD

    def _last_outcome(self, job_id: str) -> Outcome:
        outcome = self._find_outcome(job_id)
        if outcome is None:
            raise JobNotFound(job_id)
        return outcome

    def _run_to_end(self, job: NewJob) -> None:
        """Run ``job`` again and again, as a worker's retries and pauses would, until it ends."""
        task = self.app.tasks().get(job.kind)
        if task is None:
            raise ConfigurationError(f"eager: no task of this App serves kind {job.kind!r}")
        if self._depth >= self._max_depth:
            raise _Unwind(
                f"eager: jobs were enqueued {self._max_depth} deep inside each other "
                f"(the last one {job.kind!r}); a task may be enqueueing itself"
            )
        payload = decode_json(job.payload)
        carry: Any = None
        failure_count = 0
        # The job's durable steps, kept for its runs (ADR 0137): a paused run's next
        # run replays them, its sleeps pass and its waits time out.
        steps = StepSource(MemorySteps(fast_clock=True), self.app.result_max_bytes)
        self._depth += 1
        try:
            for run_count in itertools.count(1):
                if self._runs_left == 0:
                    raise _Unwind(
                        f"eager: {self._max_runs} runs and {job.kind!r} has not ended; "
                        "a handler may be pausing or retrying forever"
                    )
                self._runs_left -= 1
                claimed = _claimed_job(
                    job.id,
                    job.kind,
                    payload,
                    worker=self._worker_id,
                    run_count=run_count,
                    failure_count=failure_count,
                    carry=carry,
                    priority=job.priority,
                    is_expired=run_count == 1 and _is_expired(job),
                )
                outcome = execute(task, claimed, steps=steps).outcome
                self.runs.append(
                    Run(
                        job_id=job.id,
                        kind=job.kind,
                        run_count=run_count,
                        outcome=outcome,
                        is_recorded=True,
                        payload=payload,
                    )
                )
                if outcome.kind in (OutcomeKind.COMPLETED, OutcomeKind.DEAD):
                    return
                failure_count += outcome.is_failure
                if outcome.carry is not None:
                    carry = decode_json(outcome.carry)
        finally:
            self._depth -= 1


class _Unwind(BaseException):
    """Carries an eager limit out of every handler it runs in, up to the test's own call.

    A ``BaseException``, so the executor does not take it for the failure of
    the handler that enqueued the job (which would retry, and enqueue again).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _claimed_job(
    job_id: str,
    kind: str,
    payload: Any,
    *,
    worker: str,
    run_count: int = 1,
    failure_count: int = 0,
    carry: Any = None,
    priority: Priority = Priority.NORMAL,
    is_expired: bool = False,
) -> ClaimedJob:
    """A claim of a job that is in no table: what ``perform`` and ``eager`` hand the executor."""
    return ClaimedJob(
        claim=Claim(job_id=job_id, claimed_by=worker, run_count=run_count),
        kind=kind,
        payload=payload,
        carry=carry,
        priority=priority,
        failure_count=failure_count,
        created_at=_EPOCH,
        claim_expires_at=_EPOCH,
        is_expired=is_expired,
    )


def _is_expired(job: NewJob) -> bool:
    """Whether a worker's first claim of ``job`` would find it expired (ADR 0135): its
    expiry is past, or comes at or before the job is due. Decided at enqueue, by this
    process's clock, since eager has no database and runs the job at once."""
    now = datetime.now(UTC)
    if job.expires_at is not None:
        expires = job.expires_at
    elif job.expires_in is not None:
        expires = now + job.expires_in
    else:
        return False
    due = job.eta if job.eta is not None else now + job.delay
    return expires <= max(due, now)
