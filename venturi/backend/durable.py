"""Durable steps and events: what a durable run and the App's ``send`` use (ADR 0137).

Part of the storage boundary; ``venturi.backend`` is where callers import it from.
"""

from __future__ import annotations

from typing import Protocol

from venturi.durable import DurableState, NewDurableStep, RecordedStep
from venturi.types import Claim, JobRow

__all__ = ["Durable"]


class Durable(Protocol):
    """A job's recorded steps and the events sent to it (SPEC 6.1).

    Used by the run's step log (``venturi.step_log``: ``ctx.step``, ``ctx.sleep``,
    ``ctx.wait_for``) and by the App (``send``, ``job``, ``retry(reset_steps=)``).
    Both go with their job when it is deleted (cleanup).
    """

    def load_steps(self, job_id: str) -> DurableState:
        """The job's recorded steps in recording order, the events sent to it, and the
        database's now; empty tuples for a job with none (or no such job)."""
        ...

    def record_step(self, claim: Claim, step: NewDurableStep) -> RecordedStep | None:
        """Record ``step`` for the claimed job in one statement, fenced on ``claim``
        (``status='claimed'``, same ``claimed_by`` and ``run_count``; ADR 19), with
        ``recorded_at`` now and ``wake_at`` now + ``wake_after`` (database clock).

        Returns the row written, or ``None`` when nothing was: the claim was lost
        (a zombie run), or a step of that kind and name is recorded already; the
        row that exists stands."""
        ...

    def send_event(
        self, job_id: str, name: str, payload: str, *, connection: object | None = None
    ) -> None:
        """Record the event ``name`` (``payload`` encoded JSON) for the job and wake it:
        a pending job that waits for it (a recorded wait of that name) is visible now,
        a claimed one is marked so that its run's paused finish makes it visible now;
        one NOTIFY at commit. Inside ``connection``'s transaction when given (the
        adapter says which handles it takes), so the event exists exactly when it
        commits.

        Raises ``JobNotFound``, ``JobFinished`` (completed or dead) or
        ``EventAlreadySent``; nothing is written then."""
        ...

    async def asend_event(
        self, job_id: str, name: str, payload: str, *, connection: object | None = None
    ) -> None:
        """``send_event`` on the running event loop (an async connection when given)."""
        ...

    def retry_job_from_start(self, job_id: str) -> JobRow:
        """``Operator.retry_job`` with the job's recorded steps deleted in the same
        transaction (its events kept): the next run starts over. Raises as it does."""
        ...
