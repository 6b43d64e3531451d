"""Schedule: one periodic job declaration, validated when it is declared.

A schedule is a name, a cron expression read in an IANA time zone, the task to
enqueue and its arguments. It is built by ``app.periodic(...)`` or from
``@task(schedule=..., timezone=...)`` and read by ``Beat``; it does no I/O.

The name identifies the schedule across processes and deployments: Beat's rows
carry the dedup key ``beat:<name>``, so renaming a schedule is removing one and
adding another. Names must therefore be unique within an App; Beat refuses to
start on an App that declares one twice (``app.periodic`` cannot see the
schedules that ``@task(schedule=...)`` tasks will add later, so the check runs
where the full list is known).
"""

from __future__ import annotations

import dataclasses
import unicodedata
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from venturi.cron import next_tick, previous_tick, validate_schedule, zone
from venturi.errors import InvalidSchedule
from venturi.merge import resolve_keep
from venturi.types import NewJob

if TYPE_CHECKING:
    from venturi.task import Task

__all__ = [
    "DEDUP_PREFIX",
    "Schedule",
    "duplicate_names",
    "validated_name",
]

#: Dedup keys starting with this are Beat's bookkeeping; tasks must not use it.
DEDUP_PREFIX = "beat:"


@dataclass(frozen=True, slots=True)
class Schedule:
    """A validated periodic job. Build it with ``declare`` or ``from_task``.

    ``args`` and ``kwargs`` are bound against the task's signature and encoded
    at declaration (a call that does not fit, or is not JSON, fails there);
    ``kwargs`` is a read-only copy. ``catch_up`` chooses what happens to ticks
    that passed while no Beat ran: skipped (default), or the most recent one
    runs once, as soon as a Beat is back (see ``venturi.beat``).
    """

    name: str
    expression: str
    timezone: str
    task: Task[Any, Any]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any]
    catch_up: bool

    @classmethod
    def declare(
        cls,
        cron: str,
        task: Task[Any, Any],
        *,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
        timezone: str = "UTC",
        catch_up: bool = False,
    ) -> Schedule:
        """Validate and build a schedule; ``name`` defaults to the task's kind.

        Raises ``InvalidSchedule`` (bad expression, unknown time zone, bad
        name) and the task's enqueue errors (``ArgumentsMismatch``,
        ``InvalidPayload``) for arguments that could never be enqueued.
        """
        validate_schedule(cron, timezone)
        schedule = cls(
            name=validated_name(task.kind if name is None else name),
            expression=cron,
            timezone=timezone,
            task=task,
            args=tuple(args),
            kwargs=MappingProxyType(dict(kwargs or {})),
            catch_up=bool(catch_up),
        )
        schedule.new_job(eta=None)
        return schedule

    @classmethod
    def from_task(cls, task: Task[Any, Any]) -> Schedule:
        """The schedule of ``@task(schedule=..., timezone=...)``, named after its kind."""
        options = task.options
        if options.schedule is None:
            raise InvalidSchedule(f"task {task.kind!r} declares no schedule")
        return cls.declare(options.schedule, task, timezone=options.timezone)

    @property
    def dedup_key(self) -> str:
        return f"{DEDUP_PREFIX}{self.name}"

    @property
    def zone(self) -> ZoneInfo:
        return zone(self.timezone)

    def next_tick(self, *, after: datetime) -> datetime:
        """The first tick strictly after ``after``, in UTC (DST rules in ``venturi.cron``)."""
        return next_tick(self.expression, self.zone, after=after)

    def previous_tick(self, *, until: datetime) -> datetime:
        """The last tick at or before ``until``, in UTC."""
        return previous_tick(self.expression, self.zone, until=until)

    def new_job(self, *, eta: datetime | None) -> NewJob:
        """The row for one tick: visible at ``eta``, deduplicated on ``beat:<name>``.

        The merge resolver always keeps the existing pending row, so two Beats
        racing through a takeover still leave one row per schedule (ADR 10);
        the task's own merge decision is not consulted for scheduled rows.
        """
        job = self.task.new_job(self.args, dict(self.kwargs), eta=eta, dedup_key=self.dedup_key)
        return dataclasses.replace(job, merge=resolve_keep)


def duplicate_names(schedules: Iterable[Schedule]) -> list[str]:
    """Names declared more than once, sorted (empty when all are unique)."""
    seen: set[str] = set()
    duplicates: set[str] = set()
    for schedule in schedules:
        (duplicates if schedule.name in seen else seen).add(schedule.name)
    return sorted(duplicates)


def validated_name(name: object) -> str:
    """A schedule name: non-empty text without control characters (``InvalidSchedule``)."""
    if not isinstance(name, str) or not name.strip():
        raise InvalidSchedule(f"invalid schedule name {name!r}: must be a non-empty string")
    if any(unicodedata.category(c).startswith("C") for c in name):
        raise InvalidSchedule(
            f"invalid schedule name {name!r}: must not contain control characters"
        )
    return name
