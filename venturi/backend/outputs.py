"""Stored outcomes and workflows: what result waiters and workflow readers use.

Part of the storage boundary; ``venturi.backend`` is where callers import it from.
"""

from __future__ import annotations

from typing import Protocol

from venturi.backend.coordination import Listener
from venturi.types import (
    NewWorkflow,
    StoredResult,
    Workflow,
    WorkflowSummary,
)

__all__ = ["Results", "Workflows"]


class Results(Protocol):
    """Jobs' stored results and the wake-ups of their waiters (ADR 0124).

    Used by ``results.wait_for_result`` and ``results.status_of`` (the App's
    ``result`` and ``status``).
    """

    def read_result(self, job_id: str) -> StoredResult | None:
        """The job's status, stored result (encoded JSON; ``None`` when none is
        stored) and last journal note; ``None`` when no such job exists."""
        ...

    def await_result(self, job_id: str) -> None:
        """Mark a pending or claimed job as awaited, so that the ``finish`` that ends
        it wakes ``listen_result`` subscribers; a terminal or unknown job is left
        alone. Idempotent; the mark lasts as long as the row. Callers read the job
        again after marking it: an end recorded just before the mark sends nothing."""
        ...

    def listen_result(self, job_id: str) -> Listener:
        """Wake-ups for one awaited job's end, on a connection of its own (subscribed
        on the first ``wait``). A wake-up is a hint: the waiter reads the row again;
        ends not recorded by ``finish`` (recovery, cancel) send none, so waiters poll."""
        ...


class Workflows(Protocol):
    """Chains and chords as rows (ADR 0125, 0131).

    Written by ``workflows.py`` (``enqueue_workflow``); read by the App
    (``workflow``, ``workflows``, ``workflow_of``). ``finish`` (``Leases``) hands
    results on.
    """

    def enqueue_workflow(self, workflow: NewWorkflow) -> None:
        """Write every step (the first ones pending, the others waiting) and edge of
        ``workflow`` in one transaction, with one wake-up: all or nothing. ``finish``
        then hands each completed step's result on to its children in the
        transaction that records it."""
        ...

    def get_workflow(self, workflow_id: str) -> Workflow | None:
        """Every remaining step of the workflow, in position order; ``None`` when it
        has none (no such workflow, or cleaned up)."""
        ...

    def list_workflows(self, *, limit: int, before: str | None) -> list[WorkflowSummary]:
        """Up to ``limit`` workflows, newest first, each with its steps counted by state;
        only those created before the workflow ``before`` (its id) when given."""
        ...

    def workflow_id_of(self, job_id: str) -> str | None:
        """The workflow the job (or waiting step) ``job_id`` is a step of; None for a
        plain job or an unknown id."""
        ...
