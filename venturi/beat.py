"""Beat: the one active scheduler of a prefix, enqueuing each cron tick once, ahead of time.

The design and its reasons (rows enqueued ahead of their tick, one
``beat:<name>`` dedup key per schedule, why that is at most once, the
leadership) are in ADR 0108. One iteration (``run_once``), per schedule:

1. A pending row of the schedule that will hold the next tick, a due row still
   waiting for a worker, or a row being retried or paused: nothing to do (the
   ticks it covers coalesce into that one row).
2. A not-yet-due row that no longer matches the code (expression, time zone,
   arguments or task kind changed) is cancelled with the note
   ``schedule changed`` and replaced.
3. Otherwise the next tick after ``now`` is enqueued, unless a row for exactly
   that tick already exists in any status (claimed or finished, or cancelled
   by an operator: cancelling a beat row skips that one tick).
4. Missed ticks are skipped by default; with ``catch_up=True`` the most recent
   missed tick runs once, now, when the schedule's latest row is older than it.

Pending rows of a schedule this App does not declare are cancelled with the
note ``schedule removed`` when not yet due; due rows and runs in progress are
left to finish.

Schedules stored in the database (``App.add_schedule``, ADR 0139) are read at
every iteration and handled as code ones, so a change is live within one
``interval``, on whichever beat leads. A paused one's future row is cancelled
with the note ``schedule paused``; one whose task this process does not
register is left alone (with a warning), its rows untouched. A code schedule
wins over a stored one of the same name.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Protocol

from venturi.backend import Control, Coordination, Enqueue, Leadership, Operator
from venturi.errors import (
    BackendUnavailable,
    ConfigurationError,
    InvalidSchedule,
    InvalidState,
    JobNotFound,
    SchemaMissing,
    VenturiError,
)
from venturi.events import BeatTicked
from venturi.naming import BEAT_ROLE
from venturi.refs import JobRef
from venturi.runtime.service import ServiceThread, check_at_start, run_until_signalled
from venturi.schedule import DEDUP_PREFIX, Schedule, duplicate_names
from venturi.schedule_control import stored_as_schedule
from venturi.serialization import decode_json
from venturi.types import JobRow, NewJob

if TYPE_CHECKING:
    from venturi.app import App

__all__ = ["Beat", "BeatBackend"]

logger = logging.getLogger(__name__)


class BeatBackend(Enqueue, Coordination, Operator, Control, Protocol):
    """The storage roles a Beat uses: enqueue and the dedup-key reads of its ticks,
    the database clock and leadership, cancelling a superseded tick, and the stored
    schedules."""


class Beat:
    """Enqueues the App's schedules, as the one active scheduler of its prefix.

    Options:
        interval: seconds between two iterations of the leader. A tick is
            enqueued up to ``interval`` after the previous one was claimed, so
            schedules more frequent than this coalesce.
        standby_interval: seconds between two attempts of a standby to take
            the lead; a takeover happens within about this long.

    Raises ``InvalidSchedule`` when two of the App's schedules share a name,
    ``ConfigurationError`` when the App declares no schedule at all (a Beat
    that knows none would cancel every other schedule's rows as removed) or
    for a non-positive interval.

    Three ways to run it::

        venturi.Beat(app).run()                   # blocks; SIGINT/SIGTERM stop it
        beat = venturi.Beat(app); beat.start()    # a thread inside another process
        beat.stop(grace=5)
        refs = venturi.Beat(app).run_once()       # one iteration, in tests
    """

    def __init__(self, app: App, *, interval: float = 1.0, standby_interval: float = 2.0) -> None:
        if not interval > 0:
            raise ConfigurationError(f"interval must be positive, got {interval!r}")
        if not standby_interval > 0:
            raise ConfigurationError(f"standby_interval must be positive, got {standby_interval!r}")
        self.app = app
        self.interval = float(interval)
        self.standby_interval = float(standby_interval)
        if not self.schedules() and not self._has_stored_schedules():
            raise ConfigurationError(
                "the App declares no schedules and the database stores none: declare them "
                "with @task(schedule=...) or app.periodic(...), and import their modules "
                "before starting Beat (or add one with app.add_schedule)"
            )
        self._lock = threading.Lock()
        self._leadership: Leadership | None = None
        self._service: ServiceThread | None = None
        self._stopped = threading.Event()
        self._stopped.set()
        #: Rows this Beat cancelled as ``schedule changed``: their tick is not "taken".
        self._superseded: set[str] = set()
        #: Whether "standing by" was logged since the last time this Beat led (logged once).
        self._is_standing_by = False
        #: The stored schedules' names as of the last iteration (a removal is a name gone).
        self._stored_seen: frozenset[str] = frozenset()
        #: Stored schedules this Beat warned it cannot run (logged once each).
        self._unrunnable: set[str] = set()

    @property
    def backend(self) -> BeatBackend:
        return self.app.backend

    @property
    def is_leader(self) -> bool:
        """True while this Beat holds the prefix's leadership (as of its last check)."""
        return self._leadership is not None

    def schedules(self) -> Mapping[str, Schedule]:
        """The App's schedules by name; ``InvalidSchedule`` if a name is declared twice."""
        schedules = self.app.schedules()
        duplicates = duplicate_names(schedules)
        if duplicates:
            raise InvalidSchedule(
                f"schedule name(s) declared more than once: {', '.join(duplicates)}; "
                "pass name=... to app.periodic() to tell them apart"
            )
        return {schedule.name: schedule for schedule in schedules}

    def _has_stored_schedules(self) -> bool:
        try:
            return bool(self.backend.stored_schedules())
        except (BackendUnavailable, SchemaMissing):
            return False

    def _with_stored(
        self, schedules: Mapping[str, Schedule]
    ) -> tuple[dict[str, Schedule], set[str], set[str]]:
        """The code schedules and the active stored ones, by name; the names of the paused
        stored ones; the names whose rows are left alone (a task not registered here)."""
        active = dict(schedules)
        paused: set[str] = set()
        left: set[str] = set()
        tasks = self.app.tasks()
        for stored in self.backend.stored_schedules():
            if stored.name in schedules:
                continue  # the code's declaration wins
            if stored.paused:
                paused.add(stored.name)
                continue
            try:
                schedule = stored_as_schedule(stored, tasks)
            except VenturiError as exc:  # its arguments no longer fit the task's code
                schedule, reason = None, str(exc)
            else:
                reason = f"no task of this process registers {stored.kind!r}"
            if schedule is None:
                left.add(stored.name)
                if stored.name not in self._unrunnable:
                    self._unrunnable.add(stored.name)
                    logger.warning(
                        "stored schedule %s is not run by this beat: %s", stored.name, reason
                    )
                continue
            self._unrunnable.discard(stored.name)
            active[stored.name] = schedule
        self._stored_seen = frozenset(active.keys() - schedules.keys()) | paused | left
        return active, paused, left

    # -- one iteration ---------------------------------------------------------------------

    def run_once(self, now: datetime | None = None) -> list[JobRef]:
        """Bring every schedule's rows up to date; returns the refs of the rows enqueued.

        ``now`` defaults to the database clock. This does not take the
        leadership: tests call it directly (STYLE R9), and so may a caller that
        knows it is the only scheduler.
        """
        stored_before = self._stored_seen
        schedules, paused, left = self._with_stored(self.schedules())
        # A Beat that knows no schedule at all cancels only the rows of the stored ones
        # it saw removed: any other row may be another App's code schedule's.
        knows_the_prefix = bool(schedules or paused or left)
        if not knows_the_prefix and not stored_before:
            return []
        # Read the pending rows before the clock ("At most once", ADR 0108).
        rows = self.backend.pending_with_dedup_prefix(DEDUP_PREFIX)
        if now is None:
            now = self.backend.now()
        pending: dict[str, list[JobRow]] = {}
        for row in rows:
            assert row.dedup_key is not None
            pending.setdefault(row.dedup_key.removeprefix(DEDUP_PREFIX), []).append(row)
        for name, orphans in pending.items():
            if name in paused:
                # Superseded, not taken: resumed, the schedule enqueues that tick again.
                self._superseded.update(
                    self._cancel_future(orphans, now, note="schedule paused", name=name)
                )
            elif (
                name not in schedules
                and name not in left
                and (knows_the_prefix or name in stored_before)
            ):
                self._cancel_future(orphans, now, note="schedule removed", name=name)
        jobs = [
            job
            for schedule in schedules.values()
            if (job := self._next_job(schedule, pending.get(schedule.name, []), now)) is not None
        ]
        if not jobs:
            return []
        refs = self.backend.enqueue(jobs)
        for job, ref in zip(jobs, refs, strict=True):
            logger.log(
                logging.DEBUG if ref.merged else logging.INFO,
                "schedule %s: %s tick %s as job %s",
                (job.dedup_key or "").removeprefix(DEDUP_PREFIX),
                "already had its" if ref.merged else "enqueued its",
                job.eta.isoformat() if job.eta else "now",
                ref.id,
                extra={"job_id": ref.id, "kind": job.kind},
            )
            if self.app.events.active:
                self.app.events.emit(
                    BeatTicked(
                        job_id=ref.id,
                        kind=job.kind,
                        schedule=(job.dedup_key or "").removeprefix(DEDUP_PREFIX),
                        eta=job.eta,
                        merged=ref.merged,
                    )
                )
        return refs

    def _next_job(self, schedule: Schedule, rows: list[JobRow], now: datetime) -> NewJob | None:
        tick = schedule.next_tick(after=now)
        expected = schedule.new_job(eta=tick)
        kind = schedule.task.kind
        stale = [row for row in rows if _is_stale(row, expected, now)]
        if stale:
            self._superseded.update(
                self._cancel_future(stale, now, note="schedule changed", name=schedule.name)
            )
        if any(row.kind == kind and row not in stale for row in rows):
            return None
        latest = self.backend.latest_with_dedup_key(kind, schedule.dedup_key)
        if latest is not None and latest.id not in self._superseded:
            if latest.visible_at == tick:
                return None
            if schedule.catch_up:
                missed = schedule.previous_tick(until=now)
                if latest.visible_at < missed:
                    logger.info(
                        "schedule %s missed its tick of %s; catching up now",
                        schedule.name,
                        missed.isoformat(),
                        extra={"kind": kind},
                    )
                    return schedule.new_job(eta=missed)
        return expected

    def _cancel_future(
        self, rows: list[JobRow], now: datetime, *, note: str, name: str
    ) -> list[str]:
        """Cancel the rows that are not yet due and never ran; returns their ids."""
        cancelled = []
        for row in rows:
            if row.run_count > 0 or row.visible_at <= now:
                continue
            try:
                self.backend.cancel_job(row.id, note)
            except (InvalidState, JobNotFound):
                continue  # claimed, or cancelled by another Beat, since the read
            cancelled.append(row.id)
            logger.info(
                "cancelled job %s of schedule %s (%s)",
                row.id,
                name,
                note,
                extra={"job_id": row.id, "kind": row.kind},
            )
        return cancelled

    # -- leadership and the loop -----------------------------------------------------------

    def step(self) -> float:
        """One turn of the loop: lead (or try to), run an iteration; returns the wait.

        Raises what ``run_once`` raises; the loop turns ``BackendUnavailable``
        into a backoff (service.py).
        """
        if not self._lead():
            return self.standby_interval
        self.run_once()
        return self.interval

    def _lead(self) -> bool:
        leadership = self._leadership
        if leadership is not None:
            try:
                is_held = leadership.is_held()
            except BackendUnavailable:
                is_held = False
            if is_held:
                return True
            logger.warning("beat lost the leadership of prefix %s; standing by", self.app.prefix)
            self._release()
            return False
        leadership = self.backend.try_lead(BEAT_ROLE)
        if leadership is None:
            if not self._is_standing_by:
                self._is_standing_by = True
                logger.info(
                    "beat is standing by: another beat is the active scheduler of prefix %s; "
                    "taking over if it stops",
                    self.app.prefix,
                )
            return False
        with self._lock:
            service = self._service
            if service is not None and service.stopping.is_set():
                leadership.release()
                return False
            self._leadership = leadership
        logger.info(
            "beat %s the active scheduler of prefix %s",
            "took over as" if self._is_standing_by else "is",
            self.app.prefix,
        )
        self._is_standing_by = False
        return True

    def _release(self) -> None:
        with self._lock:
            leadership, self._leadership = self._leadership, None
        if leadership is not None:
            leadership.release()

    def start(self) -> None:
        """Start the loop on a named daemon thread and return; a no-op while running.

        Checks the database first (``App.check_schema``): an unmigrated prefix
        or a refused login raises here, before the thread starts. An outage does
        not (the loop waits for the database); under ``run()`` it is waited for
        up to ``START_WAIT`` seconds (runtime/service.py), then raised (ADR 0118).
        """
        location = check_at_start(self.app.check_schema, f"beat of prefix {self.app.prefix}")
        with self._lock:
            if self._service is not None:
                return
            service = ServiceThread(f"venturi-beat-{id(self):x}", self.step, on_exit=self._ended)
            self._service = service
            self._stopped.clear()
            self._is_standing_by = False
        schedules = self.schedules()
        logger.info(
            "beat started for prefix %s, database %s: %d schedule(s)",
            self.app.prefix,
            location,
            len(schedules),
        )
        now = datetime.now(UTC)  # for the log line only; ticks are enqueued on the database clock
        for schedule in schedules.values():
            logger.info(
                "schedule %s: %r in %s, runs %s, next tick %s",
                schedule.name,
                schedule.expression,
                schedule.timezone,
                schedule.task.kind,
                schedule.next_tick(after=now).astimezone(schedule.zone).isoformat(),
                extra={"kind": schedule.task.kind},
            )
        service.start()

    def run(self) -> None:
        """Run the loop until ``stop()``, SIGINT or SIGTERM.

        Signal handlers are installed only here, only from the main thread, and
        restored on return; the leadership is released on the way out so that
        a standby takes over at once. The App is left open.
        """
        with self._lock:
            if self._service is not None:
                raise ConfigurationError("this Beat is already running")
        run_until_signalled(
            start=self.start,
            stop=lambda hurry: self.stop(),
            stopped=self._stopped,
            name=f"beat of prefix {self.app.prefix}",
        )

    def stop(self, grace: float = 10.0) -> None:
        """Stop the loop and release the leadership; idempotent, safe before ``start()``.

        Waits up to ``grace`` seconds for the current iteration to end.
        """
        with self._lock:
            service = self._service
        if service is not None:
            service.request_stop()
            service.join(time.monotonic() + grace)
        self._release()

    def _ended(self) -> None:
        """The loop thread's last act: hand the leadership over, allow a new start."""
        self._release()
        with self._lock:
            self._service = None
        self._stopped.set()
        logger.info("beat stopped for prefix %s", self.app.prefix)


def _is_stale(row: JobRow, expected: NewJob, now: datetime) -> bool:
    """A future, never-run row that is not what the schedule would enqueue now."""
    if row.run_count > 0 or row.visible_at <= now:
        return False
    return (
        row.kind != expected.kind
        or row.visible_at != expected.eta
        or row.payload != decode_json(expected.payload)
    )
