"""What the jobs of calls that take every one of their task's defaults share.

A call with no per-call option (``.delay(...)``, a ``delay_many`` item) to a
task whose own options read none of the call's arguments (no ``dedup``,
``fair_key``, ``concurrency_key`` or ``rate_key`` function) gets the same tier,
delay and expiry as every other such call. ``TaskOptions.template`` works those
out once, when the task is made, so that each call makes only its payload and its
id, and the backend writes them with ``Enqueue.enqueue_alike``: no ``NewJob``
and no second ``JobRef`` per job (ADR 0142; bench/JOURNAL.md, sections 16, 22
and 23).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING

from venturi.types import NewJob, Priority

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["JobTemplate"]

_ZERO = timedelta(0)


@dataclass(frozen=True, slots=True)
class JobTemplate:
    """The fields a run of plain jobs shares; each job adds an id and a payload.

    Such a job is pending, eligible ``delay`` after the database's time of its
    enqueue, and expires ``expires_in`` after that time (None: never); it has no
    eta, dedup key, fair key or headers.
    """

    kind: str
    priority: Priority = Priority.NORMAL
    delay: timedelta = _ZERO
    expires_in: timedelta | None = None

    #: Whether its jobs are eligible at once and never expire (made once: ``.delay()``
    #: reads it at every call).
    immediate: bool = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "immediate", not self.delay and self.expires_in is None)

    def job(self, job_id: str, payload: str) -> NewJob:
        """One of its jobs as a ``NewJob``: what ``Enqueue.enqueue`` takes."""
        return NewJob(
            id=job_id,
            kind=self.kind,
            payload=payload,
            priority=self.priority,
            delay=self.delay,
            expires_in=self.expires_in,
        )

    def jobs(self, ids: Sequence[str], payloads: Sequence[str]) -> list[NewJob]:
        """Its jobs of ``ids`` and ``payloads`` (pairwise) as ``NewJob``s."""
        return [self.job(job_id, payload) for job_id, payload in zip(ids, payloads, strict=True)]
