"""The Control role on PostgreSQL (ADR 0139): kind states and limit overrides, stored
schedules, backfills and the audit trail.

Every change and its audit entry commit in one transaction, with the prefix's
wake-up, so idle workers look again at once (a resumed kind's backlog, a raised
cap). Validation is the App's; the table's CHECKs are the last guard.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Any, TypeVar

import orjson

from venturi.controls import (
    LIMIT_NAMES,
    AuditEntry,
    KindControl,
    Limits,
    StoredSchedule,
    SubjectType,
)
from venturi.errors import DuplicateSchedule, ScheduleNotFound
from venturi.postgres.sessions import Connection
from venturi.postgres.store import Store
from venturi.refs import JobRef
from venturi.types import NewJob

__all__ = ["ControlVerbs"]

T = TypeVar("T")


class ControlVerbs(Store):
    """``Control``'s verbs (venturi/backend/); a backfill enqueues through ``enqueue``."""

    #: ``EnqueueVerbs.enqueue``, beside this mixin in ``PostgresBackend``.
    enqueue: Callable[..., list[JobRef]]

    def kind_controls(self, kinds: Collection[str] | None = None) -> list[KindControl]:
        rows = self._run(
            lambda conn: self._queries.kind_controls.many(
                conn, kinds=None if kinds is None else list(kinds)
            )
        )
        return [_kind_control(row) for row in rows]

    def kind_known(self, kind: str) -> bool:
        row = self._run(lambda conn: self._queries.kind_known.one(conn, kind=kind))
        return bool(row is not None and row["known"])

    def set_kind_paused(self, kind: str, *, paused: bool, actor: str) -> KindControl:
        def change(conn: Connection) -> KindControl:
            row = self._queries.set_kind_paused.one(conn, kind=kind, paused=paused)
            assert row is not None  # an upsert returns its row
            self._audit(conn, "kind", kind, "resume" if not paused else "pause", {}, actor)
            return _kind_control(row)

        return self._change(change)

    def set_kind_limits(
        self, kind: str, changes: Mapping[str, int | str | None], *, actor: str
    ) -> KindControl:
        params: dict[str, Any] = {"kind": kind}
        for name in LIMIT_NAMES:
            params[name] = changes.get(name)
            params[f"set_{name}"] = name in changes

        def change(conn: Connection) -> KindControl:
            row = self._queries.set_kind_limits.one(conn, **params)
            assert row is not None
            self._audit(conn, "kind", kind, "set_limits", dict(changes), actor)
            return _kind_control(row)

        return self._change(change)

    def audit_trail(
        self, subject_type: SubjectType, subject: str, *, limit: int
    ) -> list[AuditEntry]:
        rows = self._run(
            lambda conn: self._queries.audit_trail.many(
                conn, subject_type=subject_type, subject=subject, limit=limit
            )
        )
        return [
            AuditEntry(
                id=r["id"],
                at=r["at"],
                actor=r["actor"],
                subject_type=r["subject_type"],
                subject=r["subject"],
                action=r["action"],
                details=r["details"],
            )
            for r in rows
        ]

    def record_audit(
        self,
        subject_type: SubjectType,
        subject: str,
        action: str,
        details: Mapping[str, Any],
        *,
        actor: str,
    ) -> None:
        self._run(lambda conn: self._audit(conn, subject_type, subject, action, details, actor))

    def add_schedule(self, schedule: StoredSchedule, *, actor: str) -> StoredSchedule:
        def change(conn: Connection) -> StoredSchedule:
            row = self._queries.add_schedule.one(
                conn,
                name=schedule.name,
                cron=schedule.cron,
                timezone=schedule.timezone,
                kind=schedule.kind,
                kwargs=orjson.dumps(dict(schedule.kwargs)).decode(),
            )
            if row is None:
                raise DuplicateSchedule(schedule.name, "stored")
            stored = _stored_schedule(row)
            details = {
                "cron": stored.cron,
                "timezone": stored.timezone,
                "task": stored.kind,
                "kwargs": dict(stored.kwargs),
            }
            self._audit(conn, "schedule", schedule.name, "add", details, actor)
            return stored

        return self._change(change)

    def stored_schedules(self) -> list[StoredSchedule]:
        return [_stored_schedule(r) for r in self._run(self._queries.stored_schedules.many)]

    def set_schedule_paused(self, name: str, *, paused: bool, actor: str) -> StoredSchedule:
        def change(conn: Connection) -> StoredSchedule:
            row = self._queries.set_schedule_paused.one(conn, name=name, paused=paused)
            if row is None:
                raise ScheduleNotFound(name)
            self._audit(conn, "schedule", name, "pause" if paused else "resume", {}, actor)
            return _stored_schedule(row)

        return self._change(change)

    def remove_schedule(self, name: str, *, actor: str) -> StoredSchedule:
        def change(conn: Connection) -> StoredSchedule:
            row = self._queries.remove_schedule.one(conn, name=name)
            if row is None:
                raise ScheduleNotFound(name)
            self._audit(conn, "schedule", name, "remove", {}, actor)
            return _stored_schedule(row)

        return self._change(change)

    def backfill(
        self, name: str, ticks: Sequence[tuple[datetime, NewJob]], *, actor: str
    ) -> list[tuple[datetime, JobRef]]:
        if not ticks:
            return []
        with self._connection() as conn, conn.transaction():
            recorded = self._queries.record_backfill.many(
                conn,
                name=name,
                ticks=[tick for tick, _ in ticks],
                job_ids=[job.id for _, job in ticks],
            )
            new = {row["job_id"] for row in recorded}
            jobs = [(tick, job) for tick, job in ticks if job.id in new]
            refs = self.enqueue([job for _, job in jobs], connection=conn)
            details = {
                "first_tick": ticks[0][0].isoformat(),
                "last_tick": ticks[-1][0].isoformat(),
                "ticks": len(ticks),
                "enqueued": len(jobs),
            }
            self._audit(conn, "schedule", name, "backfill", details, actor)
        return [(tick, ref) for (tick, _), ref in zip(jobs, refs, strict=True)]

    def _change(self, change: Callable[[Connection], T]) -> T:
        """Run ``change`` in a transaction that also wakes the prefix's workers."""
        with self._connection() as conn, conn.transaction():
            result = change(conn)
            self._queries.notify_wakeup.exec(conn, channel=self._channel)
        return result

    def _audit(  # noqa: PLR0917 (the audit row's columns, in order)
        self,
        conn: Connection,
        subject_type: SubjectType,
        subject: str,
        action: str,
        details: Mapping[str, Any],
        actor: str,
    ) -> None:
        self._queries.insert_audit.exec(
            conn,
            actor=actor,
            subject_type=subject_type,
            subject=subject,
            action=action,
            details=orjson.dumps(dict(details)).decode(),
        )


def _kind_control(row: Mapping[str, Any]) -> KindControl:
    return KindControl(
        kind=row["kind"],
        paused=row["paused"],
        overrides=Limits(row["global_concurrency"], row["rate_limit"], row["key_concurrency"]),
        updated_at=row["updated_at"],
    )


def _stored_schedule(row: Mapping[str, Any]) -> StoredSchedule:
    return StoredSchedule(
        name=row["name"],
        cron=row["cron"],
        timezone=row["timezone"],
        kind=row["kind"],
        kwargs=row["kwargs"],
        paused=row["paused"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )
