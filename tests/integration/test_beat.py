"""Beat against real PostgreSQL: ticks enqueued ahead of time, once each, by one leader.

Iteration tests drive ``Beat.run_once(now=...)`` with explicit instants in
2020, so the rows are already due for the database clock and a worker (or a
bare ``claim``) can take them at once; nothing waits for a real tick. The
leadership tests run several Beats as threads, each with its own App (own
pool, own leadership connection) on the test's prefix, against a schedule
that ticks every second, consumed by a real Worker. Connections of the Apps
made here carry an ``application_name`` of their own, so a test can
terminate exactly them (and never another test's) with
``pg_terminate_backend``.
"""

from __future__ import annotations

import os
import secrets
import signal
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from psycopg.conninfo import make_conninfo
from support import count, duplicate_ticks, wait_until

import venturi
from venturi.beat import Beat
from venturi.naming import BEAT_ROLE as ROLE
from venturi.naming import Prefix
from venturi.task import Task
from venturi.worker import Worker

KIND = "beat.tick"


def noop() -> None:
    """The scheduled handler: the tests look at rows and journal entries, not at effects."""


def at(hour: int, minute: int = 0, second: int = 0) -> datetime:
    """An instant on 2020-01-01 (UTC), long past for the database clock."""
    return datetime(2020, 1, 1, hour, minute, second, tzinfo=UTC)


def ticking(app: venturi.App) -> Task[Any, Any]:
    return app.task(kind=KIND)(noop)


def visible_ats(db: Any, name: str) -> list[tuple[datetime, str]]:
    return [
        (r["visible_at"], r["status"])
        for r in db.all(
            "SELECT visible_at, status FROM {{prefix}}_jobs WHERE dedup_key = %s "
            "ORDER BY visible_at, created_at",
            (f"beat:{name}",),
        )
    ]


@pytest.fixture
def make_app(database_url: str, prefix: str) -> Iterator[Callable[[], venturi.App]]:
    """More Apps on this test's prefix, their connections tagged with one application_name."""
    made: list[venturi.App] = []

    def make() -> venturi.App:
        tag = f"venturi_beat_test_{secrets.token_hex(4)}"
        instance = venturi.App(
            make_conninfo(database_url, application_name=tag), prefix=prefix, set_as_current=False
        )
        instance.tag = tag  # type: ignore[attr-defined]
        made.append(instance)
        return instance

    yield make
    for instance in made:
        instance.close()


@pytest.fixture
def beats() -> Iterator[list[Beat]]:
    """Beats a test starts; all stopped at teardown (stop is idempotent)."""
    started: list[Beat] = []
    yield started
    for beat in started:
        beat.stop(grace=5)


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop(grace=5)


# -- one iteration -------------------------------------------------------------------------


def test_the_next_tick_is_enqueued_ahead_of_time_as_a_row_visible_at_the_tick(
    app: venturi.App, db: Any
) -> None:
    app.task(kind="reports.nightly", schedule="0 3 * * *", timezone="Europe/Paris")(noop)
    beat = Beat(app)

    refs = beat.run_once(now=datetime(2026, 1, 10, 12, 0, tzinfo=UTC))

    [row] = db.jobs()
    assert [ref.id for ref in refs] == [row["id"]]
    assert row["kind"] == "reports.nightly"
    assert row["status"] == "pending"
    assert row["dedup_key"] == "beat:reports.nightly"
    assert row["visible_at"] == datetime(2026, 1, 11, 2, 0, tzinfo=UTC)  # 03:00 in Paris
    assert row["payload"] == {}
    # Until that row is taken, further iterations add nothing.
    assert beat.run_once(now=datetime(2026, 1, 10, 23, 0, tzinfo=UTC)) == []
    assert len(db.jobs()) == 1


def test_a_minutely_schedule_puts_its_rows_on_minute_boundaries(app: venturi.App, db: Any) -> None:
    app.periodic("* * * * *", ticking(app), name="every-minute")
    before = app.backend.now()

    Beat(app).run_once()

    visible_at = db.scalar("SELECT visible_at FROM {{prefix}}_jobs")
    assert (visible_at.second, visible_at.microsecond) == (0, 0)
    assert before < visible_at <= before + timedelta(minutes=1)


def test_a_tick_whose_row_was_already_claimed_is_not_enqueued_again(
    app: venturi.App, db: Any
) -> None:
    app.periodic("0 * * * *", ticking(app), name="hourly")
    beat = Beat(app)
    beat.run_once(now=at(10, 30))
    claimed = app.backend.claim(
        kinds=[KIND], limit=5, worker_id="test:1", lease=timedelta(minutes=1)
    )
    assert len(claimed) == 1

    # A clock that has not reached the tick yet still sees the tick taken.
    assert beat.run_once(now=at(10, 45)) == []
    assert beat.run_once(now=at(11, 0, 1)) != []
    assert visible_ats(db, "hourly") == [(at(11), "claimed"), (at(12), "pending")]


def test_ticks_missed_while_no_beat_ran_are_skipped_by_default(app: venturi.App, db: Any) -> None:
    app.periodic("0 * * * *", ticking(app), name="hourly")
    beat = Beat(app)
    beat.run_once(now=at(10, 30))
    assert Worker(app).run_once() == 1

    beat.run_once(now=at(14, 30))  # no beat ran at 12:00, 13:00 or 14:00

    assert visible_ats(db, "hourly") == [(at(11), "completed"), (at(15), "pending")]


def test_catch_up_runs_the_most_recent_missed_tick_once_then_resumes(
    app: venturi.App, db: Any
) -> None:
    app.periodic("0 * * * *", ticking(app), name="hourly", catch_up=True)
    beat = Beat(app)
    worker = Worker(app)
    beat.run_once(now=at(10, 30))
    assert worker.run_once() == 1

    beat.run_once(now=at(14, 30))
    assert visible_ats(db, "hourly") == [(at(11), "completed"), (at(14), "pending")]
    assert beat.run_once(now=at(14, 31)) == []  # the catch-up row is still waiting
    assert worker.run_once() == 1
    beat.run_once(now=at(14, 32))

    assert visible_ats(db, "hourly") == [
        (at(11), "completed"),
        (at(14), "completed"),
        (at(15), "pending"),
    ]


def test_catch_up_has_nothing_to_catch_up_for_a_schedule_without_history(
    app: venturi.App, db: Any
) -> None:
    app.periodic("0 * * * *", ticking(app), name="hourly", catch_up=True)

    Beat(app).run_once(now=at(14, 30))

    assert visible_ats(db, "hourly") == [(at(15), "pending")]


def test_cancelling_a_pending_beat_row_skips_that_one_tick(app: venturi.App, db: Any) -> None:
    app.periodic("0 * * * *", ticking(app), name="hourly")
    beat = Beat(app)
    [ref] = beat.run_once(now=at(10, 30))

    app.cancel(ref.id)

    assert beat.run_once(now=at(10, 45)) == []
    beat.run_once(now=at(11, 0, 1))
    assert visible_ats(db, "hourly") == [(at(11), "dead"), (at(12), "pending")]


def test_a_run_being_retried_holds_back_the_next_ticks(app: venturi.App, db: Any) -> None:
    @app.task(kind="beat.flaky")
    def flaky() -> None:
        raise RuntimeError("not today")

    app.periodic("0 * * * *", flaky, name="flaky")
    beat = Beat(app)
    [ref] = beat.run_once(now=at(10, 30))
    assert Worker(app).run_once() == 1
    assert db.one("SELECT status, run_count FROM {{prefix}}_jobs WHERE id = %s", (ref.id,)) == {
        "status": "pending",
        "run_count": 1,
    }

    assert beat.run_once(now=at(11, 0, 1)) == []
    assert beat.run_once(now=at(13, 0, 1)) == []
    assert [r["id"] for r in db.jobs()] == [ref.id]


def test_a_schedule_removed_from_the_code_has_its_future_row_cancelled(
    app: venturi.App, db: Any, make_app: Callable[[], venturi.App]
) -> None:
    task = ticking(app)
    app.periodic("0 * * * *", task, name="kept")
    app.periodic("30 * * * *", task, name="removed")
    Beat(app).run_once(now=at(10, 10))
    before = {r["dedup_key"]: r["id"] for r in db.jobs()}

    newer = make_app()
    newer.periodic("0 * * * *", ticking(newer), name="kept")
    assert Beat(newer).run_once(now=at(10, 15)) == []

    removed = db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (before["beat:removed"],))
    assert removed["status"] == "dead"
    assert [(e["outcome"], e["note"]) for e in db.journal(removed["id"])] == [
        ("dead", "schedule removed")
    ]
    kept = db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (before["beat:kept"],))
    assert kept["status"] == "pending"


def test_a_due_row_of_a_removed_schedule_is_left_to_run(
    app: venturi.App, db: Any, make_app: Callable[[], venturi.App]
) -> None:
    app.periodic("30 * * * *", ticking(app), name="removed")
    [ref] = Beat(app).run_once(now=at(10, 10))

    newer = make_app()
    newer.periodic("0 * * * *", ticking(newer), name="kept")
    Beat(newer).run_once(now=at(10, 45))  # its 10:30 tick has passed: the row is due

    assert db.scalar("SELECT status FROM {{prefix}}_jobs WHERE id = %s", (ref.id,)) == "pending"


def test_a_changed_expression_replaces_the_future_row_and_later_ticks_all_run(
    app: venturi.App, db: Any, make_app: Callable[[], venturi.App]
) -> None:
    app.periodic("0 4 * * *", ticking(app), name="report")
    [old] = Beat(app).run_once(now=at(2))

    newer = make_app()
    newer.periodic("*/30 * * * *", ticking(newer), name="report")
    beat = Beat(newer)
    beat.run_once(now=at(2))
    assert [(e["outcome"], e["note"]) for e in db.journal(old.id)] == [("dead", "schedule changed")]
    # Consume each tick and go on: 04:00, the old row's time, is not mistaken for taken.
    for now in (at(2, 30, 1), at(3, 0, 1), at(3, 30, 1)):
        assert (
            len(
                newer.backend.claim(
                    kinds=[KIND], limit=5, worker_id="t:1", lease=timedelta(minutes=1)
                )
            )
            == 1
        )
        beat.run_once(now=now)

    assert visible_ats(db, "report") == [
        (at(2, 30), "claimed"),
        (at(3), "claimed"),
        (at(3, 30), "claimed"),
        (at(4), "dead"),
        (at(4), "pending"),
    ]


def test_changed_arguments_replace_the_future_row(
    app: venturi.App, db: Any, make_app: Callable[[], venturi.App]
) -> None:
    @app.task(kind="beat.greet")
    def greet(to: str) -> None: ...

    app.periodic("0 * * * *", greet, args=("old@example.org",), name="greet")
    Beat(app).run_once(now=at(10, 30))

    newer = make_app()
    newer.periodic(
        "0 * * * *",
        newer.task(kind="beat.greet")(greet.fn),
        args=("new@example.org",),
        name="greet",
    )
    Beat(newer).run_once(now=at(10, 31))

    rows = db.all("SELECT status, payload FROM {{prefix}}_jobs ORDER BY created_at")
    assert rows == [
        {"status": "dead", "payload": {"to": "old@example.org"}},
        {"status": "pending", "payload": {"to": "new@example.org"}},
    ]


def test_two_beats_racing_through_one_iteration_leave_one_row_per_schedule(
    app: venturi.App, db: Any, make_app: Callable[[], venturi.App]
) -> None:
    names = [f"s{n}" for n in range(8)]
    racers = []
    for _ in range(2):
        racer_app = make_app()
        task = ticking(racer_app)
        for name in names:
            racer_app.periodic("0 * * * *", task, name=name)
        racers.append(Beat(racer_app))
    start = threading.Barrier(len(racers))
    results: list[list[venturi.JobRef]] = []

    def race(beat: Beat) -> None:
        start.wait(timeout=10)
        results.append(beat.run_once(now=at(10, 30)))

    threads = [threading.Thread(target=race, args=(beat,)) for beat in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)

    rows = db.jobs()
    assert sorted(r["dedup_key"] for r in rows) == sorted(f"beat:{n}" for n in names)
    assert {ref.id for refs in results for ref in refs} <= {r["id"] for r in rows}


# -- leadership ----------------------------------------------------------------------------


def every_second(app: venturi.App) -> venturi.App:
    app.periodic("* * * * * *", ticking(app), name="every-second")
    return app


def leaders(beats: list[Beat]) -> list[Beat]:
    return [beat for beat in beats if beat.is_leader]


def lock_holder_pid(db: Any, prefix: str) -> int | None:
    """The backend holding the beat leadership lock (as the adapter names it) of this prefix."""
    row = db.all(
        "SELECT l.pid FROM pg_locks AS l, "
        "LATERAL (SELECT hashtextextended(%s, 0) AS key) AS k "
        "WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1 "
        "AND l.classid = ((k.key >> 32) & 4294967295)::oid "
        "AND l.objid = (k.key & 4294967295)::oid",
        (Prefix.parse(prefix).lock_name(f"lead:{ROLE}"),),
    )
    return row[0]["pid"] if row else None


def completed(db: Any) -> int:
    return count(db, "status = 'completed'")


@pytest.mark.slow
def test_one_of_three_beats_leads_and_a_standby_takes_over_when_it_stops(
    make_app: Callable[[], venturi.App],
    db: Any,
    beats: list[Beat],
    workers: list[Worker],
    app: venturi.App,
) -> None:
    for _ in range(3):
        beats.append(Beat(every_second(make_app()), interval=0.05, standby_interval=0.1))
    for beat in beats:
        beat.start()
    worker = Worker(every_second(make_app()), concurrency=2, poll_interval=1.0)
    workers.append(worker)
    worker.start()

    [leader] = wait_until(lambda: leaders(beats) or None)
    wait_until(lambda: completed(db) >= 2)
    assert count(db, "status = 'pending'") <= 1
    leader.stop()
    assert not leader.is_leader
    [successor] = wait_until(lambda: leaders(beats) or None)
    done = completed(db)
    wait_until(lambda: completed(db) >= done + 2)

    assert successor is not leader
    assert len(leaders(beats)) == 1
    assert duplicate_ticks(db) == []
    assert count(db, "status = 'pending'") <= 1


@pytest.mark.slow
def test_a_standby_takes_over_when_the_leaders_connection_is_terminated(
    make_app: Callable[[], venturi.App],
    db: Any,
    beats: list[Beat],
    workers: list[Worker],
    prefix: str,
    app: venturi.App,
) -> None:
    for _ in range(2):
        beats.append(Beat(every_second(make_app()), interval=0.05, standby_interval=0.1))
    for beat in beats:
        beat.start()
    worker = Worker(every_second(make_app()), concurrency=2, poll_interval=1.0)
    workers.append(worker)
    worker.start()
    wait_until(lambda: leaders(beats) or None)
    wait_until(lambda: completed(db) >= 2)
    killed = lock_holder_pid(db, prefix)
    assert killed is not None

    db.execute("SELECT pg_terminate_backend(%s)", (killed,))

    wait_until(lambda: (holder := lock_holder_pid(db, prefix)) is not None and holder != killed)
    done = completed(db)
    wait_until(lambda: completed(db) >= done + 2)
    assert len(leaders(beats)) == 1
    assert duplicate_ticks(db) == []
    assert count(db, "status = 'pending'") <= 1


@pytest.mark.slow
def test_beat_keeps_scheduling_after_every_one_of_its_connections_is_terminated(
    make_app: Callable[[], venturi.App],
    db: Any,
    beats: list[Beat],
    workers: list[Worker],
    app: venturi.App,
) -> None:
    beat_app = every_second(make_app())
    beat = Beat(beat_app, interval=0.05, standby_interval=0.1)
    beats.append(beat)
    beat.start()
    worker = Worker(every_second(make_app()), concurrency=2, poll_interval=1.0)
    workers.append(worker)
    worker.start()
    wait_until(lambda: completed(db) >= 1)

    terminated = db.all(
        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
        (beat_app.tag,),  # type: ignore[attr-defined]
    )
    assert terminated

    done = completed(db)
    wait_until(lambda: completed(db) >= done + 2)
    assert beat.is_leader
    assert duplicate_ticks(db) == []


def test_a_seconds_schedule_runs_within_a_second_after_each_tick(
    app: venturi.App, db: Any, beats: list[Beat], workers: list[Worker]
) -> None:
    """The worker sleeps until the row's visible_at (ADR 20): the bound stated here is 1 s."""
    app.periodic("* * * * * *", ticking(app), name="every-second")
    worker = Worker(app, concurrency=2, poll_interval=5.0)
    workers.append(worker)
    worker.start()
    beat = Beat(app, interval=0.1)
    beats.append(beat)
    beat.start()

    wait_until(lambda: completed(db) >= 3)

    runs = db.all(
        "SELECT j.visible_at, e.recorded_at FROM {{prefix}}_jobs AS j "
        "JOIN {{prefix}}_journal AS e ON e.job_id = j.id AND e.outcome = 'completed'"
    )
    assert len(runs) >= 3
    for run in runs:
        assert run["visible_at"].microsecond == 0
        assert timedelta(0) <= run["recorded_at"] - run["visible_at"] < timedelta(seconds=1)


# -- run(): the blocking form --------------------------------------------------------------


def test_run_blocks_until_stop_and_then_hands_the_leadership_over(
    app: venturi.App, make_app: Callable[[], venturi.App]
) -> None:
    beat = Beat(every_second(app), interval=0.05)
    runner = threading.Thread(target=beat.run)
    runner.start()
    wait_until(lambda: beat.is_leader)
    other = make_app()
    assert other.backend.try_lead(ROLE) is None

    beat.stop(grace=5)
    runner.join(timeout=5)

    assert not runner.is_alive()
    leadership = other.backend.try_lead(ROLE)
    assert leadership is not None
    leadership.release()


def test_run_stops_gracefully_on_sigterm_and_restores_the_previous_handler(
    app: venturi.App,
) -> None:
    beat = Beat(every_second(app), interval=0.05)
    previous = signal.getsignal(signal.SIGTERM)

    def terminate_once_leading() -> None:
        try:
            wait_until(lambda: beat.is_leader)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    sender = threading.Thread(target=terminate_once_leading)
    sender.start()
    beat.run()  # returns on SIGTERM instead of killing the test process
    sender.join(timeout=5)

    assert not beat.is_leader
    assert signal.getsignal(signal.SIGTERM) is previous
    leadership = app.backend.try_lead(ROLE)
    assert leadership is not None
    leadership.release()
