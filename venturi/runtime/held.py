"""The jobs one running worker holds, from their claim until their handler returns.

A ``Holdings`` belongs to one start()..stop() cycle (``Engine``), so that a
handler abandoned by one cycle (still running after its job was released)
never touches the next cycle's counts. Everything in it is read and written
under its ``lock``; ``changed`` is notified whenever a held job ends, which is
what stop() waits on within the grace. It also carries when the limits thread
(runtime/deadlines.py) looks next, and the event that wakes it sooner.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Any

from venturi.runtime.executor import CANCELLED_NOTE, TIME_LIMIT_NOTE
from venturi.types import ClaimedJob

__all__ = ["HeldJob", "Holdings"]


@dataclass(slots=True)
class HeldJob:
    """A claimed job between its claim and the moment its handler returns.

    ``is_abandoned``: its outcome is no longer the handler's to give (released
    at shutdown, or ended by the worker for ``ended_by``).
    """

    job: ClaimedJob
    is_running: bool = False
    is_abandoned: bool = False
    #: What ``ctx.is_cancelled()`` reads (a plain flag: no Event per job); set when
    #: renewal reports a cancel request.
    is_cancel_requested: bool = False
    started: float = 0.0
    #: When the worker ends the run itself (``time.monotonic()``), and why.
    time_limit_at: float | None = None
    cancel_at: float | None = None
    ended_by: str | None = None
    #: Whether a replacement thread took over this run's slot when it was ended.
    is_replaced: bool = False
    #: An ``async def`` handler's run, on the event loop, as ``aio_task`` once started.
    is_async: bool = False
    aio_task: asyncio.Task[None] | None = None

    def deadline(self) -> tuple[float, str] | None:
        """The earliest ending the worker will impose, and its note; a cancel wins ties."""
        cancel, limit = self.cancel_at, self.time_limit_at
        if cancel is not None and (limit is None or cancel <= limit):
            return cancel, CANCELLED_NOTE
        return (limit, TIME_LIMIT_NOTE) if limit is not None else None

    def is_cancelled(self) -> bool:
        return self.is_cancel_requested


class Holdings:
    """Every job one cycle holds, and the counts its claims and its stop read.

    Attributes (all under ``lock``):
        in_flight: claimed jobs whose handler has not returned yet (running, or
            queued locally), by job id.
        running_by_kind: how many of them each kind has (its cap counts them).
        held_async: how many of them are async runs (they count against
            ``async_concurrency``, not against the handler threads).
        is_draining: stop() began: nothing held starts any more.
        replaced, unreplaced: abandoned handler threads still running (ADR
            0121), with a replacement thread started (at most ``concurrency``)
            and without one (their slot stays taken).
        limits_wake_at: when the limits thread looks next (``time.monotonic()``);
            ``limits_changed`` (no lock needed) wakes it for a deadline sooner
            than that, or at stop().
    """

    __slots__ = (
        "changed",
        "held_async",
        "in_flight",
        "is_draining",
        "limits_changed",
        "limits_wake_at",
        "lock",
        "replaced",
        "running_by_kind",
        "unreplaced",
    )

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.changed = threading.Condition(self.lock)
        self.in_flight: dict[str, HeldJob] = {}
        self.running_by_kind: Counter[str] = Counter()
        self.held_async = 0
        self.is_draining = False
        self.replaced = 0
        self.unreplaced = 0
        self.limits_changed = threading.Event()
        self.limits_wake_at = 0.0

    def add(self, entry: HeldJob) -> None:
        """Count a claimed job as held (under ``lock``)."""
        self.in_flight[entry.job.claim.job_id] = entry
        self.running_by_kind[entry.job.kind] += 1
        self.held_async += entry.is_async

    def forget(self, entry: HeldJob) -> None:
        """Stop counting a held job (under ``lock``): its place (and its kind's cap) is free."""
        del self.in_flight[entry.job.claim.job_id]
        self.running_by_kind[entry.job.kind] -= 1
        self.held_async -= entry.is_async

    def running(self) -> int:
        """How many held jobs are running now (takes ``lock``)."""
        with self.lock:
            return sum(entry.is_running for entry in self.in_flight.values())

    def describe(self, task: asyncio.Task[Any]) -> str | None:
        """The async run ``task`` is, for the blocked-loop warning (takes ``lock``)."""
        with self.lock:
            for entry in self.in_flight.values():
                if entry.aio_task is task:
                    job = entry.job
                    return f"job {job.claim.job_id} (kind {job.kind}) run {job.claim.run_count}"
        return None
