"""The jobs of calls that take every one of their task's defaults.

A call with no per-call option (``.delay(...)``, a ``delay_many`` item) to a
task whose own options read none of the call's arguments (no ``dedup``,
``fair_key``, ``concurrency_key`` or ``rate_key`` function) gets the same tier,
delay and expiry as every other such call. ``DefaultJobs`` works those out once,
when the task is made, so that each call makes only its payload and its id: the
jobs ``Task.new_job`` would make, without its per-call checks (bench/JOURNAL.md,
sections 16 and 21).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from venturi.ids import new_id, new_ids
from venturi.options import TaskOptions, validate_delay, validate_expires
from venturi.types import NewJob, Priority

__all__ = ["DefaultJobs"]


@dataclass(frozen=True, slots=True)
class DefaultJobs:
    """A task's jobs for calls that take every default; ``of`` says whether it has them."""

    kind: str
    priority: Priority
    delay: timedelta
    expires_in: timedelta | None
    expires_at: datetime | None

    @classmethod
    def of(cls, kind: str, options: TaskOptions, *, keyed: bool) -> DefaultJobs | None:
        """The task's defaults, or None when its options need each call's arguments
        (a dedup, fair key or claim key function: ``keyed``)."""
        if options.dedup is not None or options.fair_key is not None or keyed:
            return None
        delay, eta = validate_delay(None, None)
        expires_in, expires_at = validate_expires(
            None, default=options.expires, delay=delay, eta=eta
        )
        return cls(kind, options.priority, delay, expires_in, expires_at)

    def job(self, payload: str) -> NewJob:
        """The job of one call, with a new id."""
        return NewJob(
            id=new_id(),
            kind=self.kind,
            payload=payload,
            priority=self.priority,
            delay=self.delay,
            expires_in=self.expires_in,
            expires_at=self.expires_at,
        )

    def jobs(self, payloads: list[str]) -> list[NewJob]:
        """The jobs of ``payloads``, their ids made in one go (``new_ids``)."""
        kind, priority, delay = self.kind, self.priority, self.delay
        expires_in, expires_at = self.expires_in, self.expires_at
        return [
            NewJob(
                id=job_id,
                kind=kind,
                payload=payload,
                priority=priority,
                delay=delay,
                expires_in=expires_in,
                expires_at=expires_at,
            )
            for job_id, payload in zip(new_ids(len(payloads)), payloads, strict=True)
        ]
