"""Helpers for users' tests: run queued jobs in the test's own thread.

``drain(app)`` runs every due job through the same claim, executor and
``finish`` path a worker uses, one job at a time in priority-then-age order,
until none is left, and returns what happened to each run. A paused job that
is due again at once runs again in the same drain, as it would on a worker.

``perform(task, ...)`` runs a handler once with no database at all and
returns the ``Outcome`` a worker would record, to unit-test a handler's
endings (return, pause, ``Retry``, ``Fail``, an exception) directly.

Example::

    from venturi.testing import drain

    def test_welcome_mail_is_sent(app):
        send_welcome.delay("a@example.org")
        [run] = drain(app)
        assert run.outcome.kind is OutcomeKind.COMPLETED
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ulid import ULID

from venturi.executor import execute, record
from venturi.serialization import decode_json
from venturi.types import Claim, ClaimedJob, Outcome, Priority
from venturi.worker import served_kinds, worker_id

if TYPE_CHECKING:
    from venturi.app import App
    from venturi.task import Task

#: How far ahead ``include_scheduled=True`` looks: every future job.
SCHEDULED_HORIZON = timedelta(days=365 * 100)
#: Runs after which ``drain`` gives up, so a job that pauses forever fails the test.
DEFAULT_MAX_RUNS = 10_000
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Run:
    """One run of one job during ``drain``.

    ``is_recorded`` is False when the outcome was discarded because the job
    had lost its claim meanwhile (ADR 19).
    """

    job_id: str
    kind: str
    run_count: int
    outcome: Outcome
    is_recorded: bool


class DrainLimitReached(AssertionError):
    """``drain`` ran ``max_runs`` jobs and work was still left."""


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
    tasks = app.tasks()
    served = served_kinds(tasks, kinds, who="drain")
    if not served:
        return []
    backend = app.backend
    lease = max(tasks[kind].options.lease for kind in served)
    horizon = SCHEDULED_HORIZON if include_scheduled else timedelta(0)
    runs: list[Run] = []
    while True:
        jobs = backend.claim(
            kinds=served, limit=1, worker_id=worker_id(), lease=lease, horizon=horizon
        )
        if not jobs:
            return runs
        if len(runs) >= max_runs:
            backend.release([job.claim for job in jobs])
            raise DrainLimitReached(
                f"drain ran {max_runs} jobs and work is still left; "
                "a handler may be pausing or retrying forever"
            )
        executions = [execute(tasks[job.kind], job) for job in jobs]
        written = record(backend, executions)
        runs.extend(
            Run(
                job_id=e.job.claim.job_id,
                kind=e.job.kind,
                run_count=e.job.claim.run_count,
                outcome=e.outcome,
                is_recorded=e.job.claim.job_id in written,
            )
            for e in executions
        )


def perform(task: Task[Any, Any], /, *args: Any, **kwargs: Any) -> Outcome:
    """Run ``task``'s handler once, in this thread, without a database.

    The arguments go through the same binding and JSON round trip as
    ``.delay()`` (so a call that could not be enqueued raises here too), and
    the handler's ending is mapped exactly as a worker maps it. The context is
    that of a first run (``run_count=1``, no carry).
    """
    payload = decode_json(task.new_job(args, kwargs).payload)
    job = ClaimedJob(
        claim=Claim(job_id=str(ULID()), claimed_by=worker_id(), run_count=1),
        kind=task.kind,
        payload=payload,
        carry=None,
        priority=Priority.NORMAL,
        failure_count=0,
        created_at=_EPOCH,
        claim_expires_at=_EPOCH,
    )
    return execute(task, job).outcome
