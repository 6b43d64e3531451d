"""Helpers for users' tests: run queued jobs in the test's own thread.

``drain(app)`` runs every due job through the same claim, executor and
``finish`` path a worker uses, one job at a time in priority-then-age order,
until none is left, and returns what happened to each run. A paused job that
is due again at once runs again in the same drain, as it would on a worker.

``perform(task, ...)`` runs a handler once with no database at all and
returns the ``Outcome`` a worker would record, to unit-test a handler's
endings (return, pause, ``Retry``, ``Fail``, an exception) directly.

Both run handlers inline, where nothing can interrupt them (ADR 0121): a run
that returns after its task's ``time_limit`` gets the outcome a worker would
have recorded at the limit (``retried``, or ``dead`` at the backstop, note
``time limit exceeded``), whatever the handler returned. Nobody can cancel a
job while it runs here, so ``ctx.is_cancelled()`` is False; a job cancelled
before ``drain`` is ``dead`` and never runs.

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

from venturi.runtime.executor import execute
from venturi.runtime.runner import Runner, worker_id
from venturi.serialization import decode_json
from venturi.types import Claim, ClaimedJob, Outcome, Priority

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
    served = app.served_kinds(kinds, who="drain")
    if not served:
        return []
    runner = Runner(app.backend, app.tasks(), kinds=served, worker_id=worker_id())
    request = runner.plan.request(free=1, running={}, is_renewed=False)
    assert request is not None  # one free slot, nothing running: every kind has room
    horizon = SCHEDULED_HORIZON if include_scheduled else timedelta(0)
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
