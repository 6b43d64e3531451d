"""The App's schedules stored in the database (ADR 0139): add, pause, resume, remove,
trigger, backfill, and the list of every schedule, code and stored.

``App`` inherits ``ScheduleControlMethods``. A stored schedule is validated as a
code one is (``Schedule.declare``: expression, time zone, arguments bound to the
task) before anything is written; a running beat reads the stored schedules at
every iteration, so a change is live within its interval, with no restart.
Stored ticks carry the same ``beat:<name>`` dedup key as code ones, so one row
holds each tick however many beats run (ADR 0108).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from venturi.controls import (
    BACKFILL_MAX_TICKS,
    AuditEntry,
    KindState,
    ScheduleInfo,
    StoredSchedule,
)
from venturi.cron import next_tick, zone
from venturi.errors import (
    DuplicateSchedule,
    InvalidArgument,
    InvalidSchedule,
    ScheduleNotFound,
)
from venturi.kind_control import actor_name, audit_limit
from venturi.refs import JobRef
from venturi.schedule import Schedule, validated_name

if TYPE_CHECKING:
    from venturi.backend import Backend
    from venturi.task import Task

__all__ = ["ScheduleControlMethods", "stored_as_schedule"]


def stored_as_schedule(
    stored: StoredSchedule, tasks: Mapping[str, Task[Any, Any]]
) -> Schedule | None:
    """The ``Schedule`` a stored one enqueues with; None when no task of ``tasks`` has its
    kind (this process cannot encode its jobs)."""
    task = tasks.get(stored.kind)
    if task is None:
        return None
    return Schedule.declare(
        stored.cron, task, kwargs=stored.kwargs, name=stored.name, timezone=stored.timezone
    )


class ScheduleControlMethods:
    """``App``'s methods for stored schedules (a mixin; ``App`` provides ``backend``,
    ``tasks`` and ``schedules``, the code ones)."""

    if TYPE_CHECKING:

        @property
        def backend(self) -> Backend: ...

        def tasks(self) -> Mapping[str, Task[Any, Any]]: ...

        def schedules(self) -> list[Schedule]: ...

    def add_schedule(
        self,
        name: str,
        cron: str,
        task: Task[Any, Any] | str,
        kwargs: Mapping[str, Any] | None = None,
        timezone: str = "UTC",
        *,
        actor: str | None = None,
    ) -> StoredSchedule:
        """Store a schedule; every running beat enqueues its ticks from its next iteration.

        ``task``: a task of this App, or its kind. ``InvalidSchedule`` for a bad
        expression or time zone, a task this App does not register, arguments
        that do not fit it, and (``DuplicateSchedule``) a name already stored
        or declared in code: nothing is written.
        """
        name = validated_name(name)
        kind = task if isinstance(task, str) else task.kind
        found = self.tasks().get(kind)
        if found is None:
            raise InvalidSchedule(
                f"unknown task {kind!r}: no task of this App registers it (pass --app so "
                "its module is imported)"
            )
        schedule = Schedule.declare(cron, found, kwargs=kwargs, name=name, timezone=timezone)
        if any(declared.name == name for declared in self.schedules()):
            raise DuplicateSchedule(name, "declared in code")
        stored = StoredSchedule(name, cron, timezone, kind, dict(schedule.kwargs))
        by = actor_name(actor)
        return self.backend.add_schedule(stored, actor=by)

    def stored_schedules(self) -> list[StoredSchedule]:
        """Every schedule stored in the database, by name."""
        return self.backend.stored_schedules()

    def list_schedules(self) -> list[ScheduleInfo]:
        """Every schedule, by name: the code ones (``schedules()``) and the stored ones,
        with their state and next tick (database clock)."""
        now = self.backend.now()
        infos = [
            ScheduleInfo(
                name=s.name,
                source="code",
                cron=s.expression,
                timezone=s.timezone,
                kind=s.task.kind,
                kwargs=dict(s.kwargs),
                state=KindState.ACTIVE,
                next_tick=s.next_tick(after=now),
            )
            for s in self.schedules()
        ]
        tasks = self.tasks()
        for stored in self.stored_schedules():
            is_runnable = not stored.paused and stored.kind in tasks
            infos.append(
                ScheduleInfo(
                    name=stored.name,
                    source="database",
                    cron=stored.cron,
                    timezone=stored.timezone,
                    kind=stored.kind,
                    kwargs=stored.kwargs,
                    state=KindState.PAUSED if stored.paused else KindState.ACTIVE,
                    next_tick=(
                        next_tick(stored.cron, zone(stored.timezone), after=now)
                        if is_runnable
                        else None
                    ),
                    created_at=stored.created_at,
                    updated_at=stored.updated_at,
                )
            )
        return sorted(infos, key=lambda info: (info.name, info.source))

    def schedule_info(self, name: str) -> ScheduleInfo:
        """``list_schedules()``'s entry named ``name``; ``ScheduleNotFound`` when none."""
        for info in self.list_schedules():
            if info.name == name:
                return info
        raise ScheduleNotFound(name)

    def pause_schedule(self, name: str, *, actor: str | None = None) -> StoredSchedule:
        """Stop enqueuing a stored schedule's ticks (its next, not yet due row is
        cancelled by the beat, note ``schedule paused``)."""
        name, actor = self._stored_name(name), actor_name(actor)
        return self.backend.set_schedule_paused(name, paused=True, actor=actor)

    def resume_schedule(self, name: str, *, actor: str | None = None) -> StoredSchedule:
        """Enqueue a paused schedule's ticks again, from its next tick (none is caught up)."""
        name, actor = self._stored_name(name), actor_name(actor)
        return self.backend.set_schedule_paused(name, paused=False, actor=actor)

    def remove_schedule(self, name: str, *, actor: str | None = None) -> StoredSchedule:
        """Delete a stored schedule (the beat cancels its not yet due row); returns it."""
        name, actor = self._stored_name(name), actor_name(actor)
        return self.backend.remove_schedule(name, actor=actor)

    def trigger_schedule(self, name: str, *, actor: str | None = None) -> JobRef:
        """Enqueue one run of a schedule's task now (code or stored, paused or not),
        outside its ticks: the next tick still runs."""
        schedule = self._runnable(name)
        ref = self.backend.enqueue([schedule.task.new_job(schedule.args, dict(schedule.kwargs))])[0]
        self.backend.record_audit(
            "schedule", name, "trigger", {"job_id": ref.id}, actor=actor_name(actor)
        )
        return ref

    def backfill_schedule(
        self, name: str, start: datetime, end: datetime, *, actor: str | None = None
    ) -> list[JobRef]:
        """Enqueue one run for each tick in ``[start, end]`` that no earlier backfill of
        this schedule enqueued; returns the refs of the runs enqueued now.

        Idempotent: backfilling a window again enqueues nothing twice. ``end``
        may not be in the future (those ticks are the beat's) and the window
        may hold at most ``controls.BACKFILL_MAX_TICKS`` ticks (split a longer
        one): ``InvalidArgument``, nothing written.
        """
        schedule = self._runnable(name)
        for label, moment in (("start", start), ("end", end)):
            if not isinstance(moment, datetime) or moment.tzinfo is None:
                raise InvalidArgument(f"{label} must be an aware datetime, got {moment!r}")
        if start > end:
            raise InvalidArgument(f"start ({start.isoformat()}) is after end ({end.isoformat()})")
        now = self.backend.now()
        if end > now:
            raise InvalidArgument(
                f"end ({end.isoformat()}) is in the future: ticks to come are the beat's;"
                " backfill a window that has passed"
            )
        ticks: list[datetime] = []
        tick = start
        if schedule.previous_tick(until=start) == start:
            ticks.append(start)
        while len(ticks) <= BACKFILL_MAX_TICKS:
            tick = schedule.next_tick(after=tick)
            if tick > end:
                break
            ticks.append(tick)
        if len(ticks) > BACKFILL_MAX_TICKS:
            raise InvalidArgument(
                f"the window holds more than {BACKFILL_MAX_TICKS} ticks of {name!r}:"
                " backfill it in shorter windows"
            )
        jobs = [(t, schedule.task.new_job(schedule.args, dict(schedule.kwargs))) for t in ticks]
        done = self.backend.backfill(name, jobs, actor=actor_name(actor))
        return [ref for _, ref in done]

    def schedule_audit(self, name: str, *, limit: int = 50) -> list[AuditEntry]:
        """The newest ``limit`` changes made to the schedule ``name``, newest first."""
        return self.backend.audit_trail("schedule", name, limit=audit_limit(limit))

    def _stored_name(self, name: str) -> str:
        """``name``, when it is not a code schedule's (those change in code)."""
        if any(declared.name == name for declared in self.schedules()):
            raise InvalidSchedule(
                f"schedule {name!r} is declared in code: change it there (only stored"
                " schedules are paused, resumed or removed at run time)"
            )
        return name

    def _runnable(self, name: str) -> Schedule:
        """The schedule ``name`` (code first, then stored) as this App enqueues it."""
        for declared in self.schedules():
            if declared.name == name:
                return declared
        for stored in self.stored_schedules():
            if stored.name == name:
                schedule = stored_as_schedule(stored, self.tasks())
                if schedule is None:
                    raise InvalidSchedule(
                        f"schedule {name!r} runs task {stored.kind!r}, which this App does not"
                        " register (pass --app so its module is imported)"
                    )
                return schedule
        raise ScheduleNotFound(name)
