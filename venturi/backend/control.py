"""Control at run time (ADR 0139): kinds paused or given limit overrides, schedules stored
in the database, and the audit trail of every change.

Part of the storage boundary; ``venturi.backend`` is where callers import it from.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from venturi.controls import AuditEntry, KindControl, StoredSchedule, SubjectType
from venturi.refs import JobRef
from venturi.types import NewJob

__all__ = ["Control"]


class Control(Protocol):
    """What an operator changes while workers and beats run, and what they read of it.

    Used by the App's control methods (and through them the CLI and the
    dashboard), by the worker's claim runner (``kind_controls``: the limit
    overrides, refreshed every second) and by beat (``stored_schedules``).
    Pausing needs no read by the worker: every claim statement (``Claims``)
    leaves a paused kind's rows alone, so a worker that was away while a kind
    was paused never claims it on its return.

    Every change writes its audit entry (who: ``actor``; what; when: the
    database clock) in the same transaction, and wakes the prefix's workers
    (the enqueue wake-up, ADR 20) so they look again at once.
    """

    def kind_controls(self, kinds: Collection[str] | None = None) -> list[KindControl]:
        """The stored state of ``kinds`` (None: every kind that has one), by kind; a kind
        without a row is not listed (it is active, with its decorator's limits)."""
        ...

    def kind_known(self, kind: str) -> bool:
        """Whether the prefix has a job of ``kind`` (any status) or a stored state of it."""
        ...

    def set_kind_paused(self, kind: str, *, paused: bool, actor: str) -> KindControl:
        """Pause or resume ``kind`` (idempotent: the audit entry is written either way);
        returns its new state. Running jobs are not touched."""
        ...

    def set_kind_limits(
        self, kind: str, changes: Mapping[str, int | str | None], *, actor: str
    ) -> KindControl:
        """Set (a value) or clear (None) the named overrides of ``kind``
        (``controls.LIMIT_NAMES``, validated by the caller); the others stay."""
        ...

    def audit_trail(
        self, subject_type: SubjectType, subject: str, *, limit: int
    ) -> list[AuditEntry]:
        """The newest ``limit`` changes of one kind or schedule, newest first."""
        ...

    def record_audit(
        self,
        subject_type: SubjectType,
        subject: str,
        action: str,
        details: Mapping[str, Any],
        *,
        actor: str,
    ) -> None:
        """Journal a change that stores nothing else (a schedule triggered)."""
        ...

    def add_schedule(self, schedule: StoredSchedule, *, actor: str) -> StoredSchedule:
        """Store a validated schedule (its created_at / updated_at set by the database);
        ``DuplicateSchedule`` when the name is taken, nothing written."""
        ...

    def stored_schedules(self) -> list[StoredSchedule]:
        """Every stored schedule, by name."""
        ...

    def set_schedule_paused(self, name: str, *, paused: bool, actor: str) -> StoredSchedule:
        """Pause or resume a stored schedule; ``ScheduleNotFound`` when none has the name."""
        ...

    def remove_schedule(self, name: str, *, actor: str) -> StoredSchedule:
        """Delete a stored schedule (and its backfill record); returns what it was.
        ``ScheduleNotFound`` when none has the name."""
        ...

    def backfill(
        self, name: str, ticks: Sequence[tuple[datetime, NewJob]], *, actor: str
    ) -> list[tuple[datetime, JobRef]]:
        """Enqueue the job of each tick no earlier backfill of ``name`` enqueued, and record
        them, in one transaction (so a tick is enqueued once, however often the window is
        backfilled); returns the ticks enqueued now and their refs, in tick order."""
        ...
