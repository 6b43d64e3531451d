"""Control at run time (ADR 0139) through the App, on real PostgreSQL and in-process
workers: pausing and resuming kinds, limit overrides, ``kinds()``, stored schedules (add,
pause, resume, remove, trigger, backfill), beat running them, and every bad input
refused with nothing written. The multi-process fleet tests are in
tests/reliability/test_run_time_control_fleet.py."""

from __future__ import annotations

import json
import sys
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from support import count, wait_until

import venturi
from venturi.beat import Beat
from venturi.cli import main
from venturi.controls import UNSET, KindState, Limits
from venturi.errors import (
    ConfigurationError,
    DuplicateSchedule,
    InvalidArgument,
    InvalidSchedule,
    KindNotFound,
    ScheduleNotFound,
)
from venturi.testing import drain
from venturi.types import Status

KIND = "control.work"


def nothing_written(db: Any) -> bool:
    tables = ("kind_controls", "schedules", "backfills", "audit")
    return all(db.scalar(f"SELECT count(*) FROM {{{{prefix}}}}_{t}") == 0 for t in tables)


# -- pause and resume ------------------------------------------------------------------------


def test_a_paused_kind_waits_pending_while_others_run_and_resuming_wakes_the_worker(
    app: venturi.App, db: Any, start_worker: Any
) -> None:
    """The worker polls only every 30 s here: the resume's wake-up starts the backlog."""
    done: list[str] = []

    @app.task(kind=KIND)
    def work(tag: str) -> None:
        done.append(tag)

    @app.task(kind="control.other")
    def other() -> None:
        done.append("other")

    app.pause_kind(KIND, actor="ops")
    start_worker(poll_interval=30.0)
    work.delay("paused-1")
    other.delay()
    wait_until(lambda: "other" in done)
    time.sleep(0.5)
    assert "paused-1" not in done
    assert count(db, "kind = %s AND status = 'pending'", (KIND,)) == 1

    started = time.monotonic()
    app.resume_kind(KIND, actor="ops")
    wait_until(lambda: "paused-1" in done, timeout=5)
    assert time.monotonic() - started < 5
    assert [(e.actor, e.action) for e in app.kind_audit(KIND)] == [
        ("ops", "resume"),
        ("ops", "pause"),
    ]


def test_a_running_job_finishes_after_its_kind_is_paused_and_no_next_one_starts(
    app: venturi.App, db: Any, start_worker: Any
) -> None:
    release = threading.Event()
    started: list[int] = []

    @app.task(kind=KIND)
    def work(n: int) -> int:
        started.append(n)
        release.wait(10)
        return n

    start_worker(concurrency=1, prefetch=0)
    first = work.delay(1)
    wait_until(lambda: started == [1])
    app.pause_kind(KIND)
    work.delay(2)
    release.set()
    wait_until(lambda: app.status(first.id) is Status.COMPLETED)
    time.sleep(0.5)
    assert started == [1]
    assert count(db, "kind = %s AND status = 'pending'", (KIND,)) == 1


def test_a_process_that_never_saw_the_pause_does_not_claim_the_kind(
    app: venturi.App, database_url: str, prefix: str
) -> None:
    """A worker back from a partition has no cached state to trust: the claim reads it."""

    @app.task(kind=KIND)
    def work() -> None: ...

    work.delay()
    app.pause_kind(KIND)
    returning = venturi.App(database_url, prefix=prefix, set_as_current=False)
    returning.task(kind=KIND)(lambda: None)
    try:
        assert drain(returning) == []
        app.resume_kind(KIND)
        assert len(drain(returning)) == 1
    finally:
        returning.close()


def test_enqueue_still_works_on_a_paused_kind(app: venturi.App) -> None:
    @app.task(kind=KIND)
    def work() -> None: ...

    app.pause_kind(KIND)
    ref = work.delay()
    assert app.status(ref.id) is Status.PENDING


def test_pausing_an_unknown_kind_is_refused_and_nothing_is_written(
    app: venturi.App, db: Any
) -> None:
    for bad in ("no.such.kind", "", "bad\nkind"):
        with pytest.raises(KindNotFound):
            app.pause_kind(bad)
    assert nothing_written(db)


def test_a_kind_known_only_from_its_rows_can_be_paused(app: venturi.App, db: Any) -> None:
    db.execute(
        "INSERT INTO {{prefix}}_jobs (id, kind, payload, status, created_at, visible_at)"
        " VALUES ('J1', 'legacy.kind', '{}', 'dead', now(), now())"
    )
    assert app.pause_kind("legacy.kind").paused is True
    [info] = [k for k in app.kinds() if k.kind == "legacy.kind"]
    assert (info.state, info.registered, info.counts[Status.DEAD]) == (
        KindState.PAUSED,
        False,
        1,
    )


# -- limits ----------------------------------------------------------------------------------


def test_a_global_concurrency_override_reaches_a_running_worker_and_clearing_it_lifts_it(
    app: venturi.App, start_worker: Any
) -> None:
    lock = threading.Lock()
    running = [0]
    peak = [0]

    @app.task(kind=KIND)
    def work() -> None:
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        time.sleep(0.05)
        with lock:
            running[0] -= 1

    # Polling every 30 s: the change's wake-up makes the idle worker read the overrides
    # at once, not at its next poll.
    start_worker(concurrency=4, poll_interval=30.0)
    work.delay()
    wait_until(lambda: app.kind(KIND).counts[Status.COMPLETED] == 1)
    app.set_limits(KIND, global_concurrency=1)
    time.sleep(0.5)
    peak[0] = 0
    for _ in range(12):
        work.delay()
    wait_until(lambda: app.kind(KIND).counts[Status.COMPLETED] == 13, timeout=15)
    assert peak[0] == 1

    app.set_limits(KIND, global_concurrency=None)
    time.sleep(0.5)
    peak[0] = 0
    for _ in range(16):
        work.delay()
    wait_until(lambda: app.kind(KIND).counts[Status.COMPLETED] == 29, timeout=15)
    assert peak[0] > 1


def test_set_limits_distinguishes_not_given_from_none(app: venturi.App) -> None:
    @app.task(
        kind=KIND, global_concurrency=3, rate_limit="5/s", concurrency_key=lambda tenant: tenant
    )
    def work(tenant: str) -> None: ...

    app.set_limits(KIND, global_concurrency=8, rate_limit="2/m", key_concurrency=2)
    app.set_limits(KIND, rate_limit=None)
    info = app.kind(KIND)
    assert info.declared == Limits(3, "5/s", 1)
    assert info.overrides == Limits(8, None, 2)
    assert info.limits == Limits(8, "5/s", 2)
    app.set_limits(KIND, global_concurrency=UNSET, key_concurrency=None)
    assert app.kind(KIND).overrides == Limits(8, None, None)


def test_a_key_override_for_a_kind_without_a_key_is_refused_and_nothing_is_written(
    app: venturi.App,
) -> None:
    @app.task(kind=KIND)
    def work() -> None: ...

    with pytest.raises(ConfigurationError, match="declares no concurrency_key"):
        app.set_limits(KIND, key_concurrency=2)
    assert app.kind(KIND).overrides == Limits()


@pytest.mark.parametrize(
    "given",
    [
        {"global_concurrency": -1},
        {"global_concurrency": 0},
        {"global_concurrency": 1.5},
        {"global_concurrency": True},
        {"key_concurrency": -3},
        {"rate_limit": "fast"},
        {"rate_limit": "0/s"},
        {"rate_limit": "10/d"},
        {},
    ],
)
def test_a_bad_limit_is_refused_and_nothing_is_written(
    app: venturi.App, db: Any, given: dict[str, Any]
) -> None:
    @app.task(kind=KIND)
    def work() -> None: ...

    with pytest.raises(InvalidArgument):
        app.set_limits(KIND, **given)
    assert nothing_written(db)


def test_limits_on_an_unknown_or_a_fair_kind_are_refused(app: venturi.App, db: Any) -> None:
    @app.task(kind="control.fair", fair_key=lambda tenant: tenant)
    def fair(tenant: str) -> None: ...

    with pytest.raises(KindNotFound):
        app.set_limits("no.such.kind", global_concurrency=2)
    with pytest.raises(ConfigurationError):
        app.set_limits("control.fair", global_concurrency=2)
    assert nothing_written(db)


def test_kinds_lists_registered_row_only_and_state_only_kinds_with_every_status(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind=KIND, global_concurrency=2)
    def work() -> None: ...

    work.delay()
    db.execute(
        "INSERT INTO {{prefix}}_jobs (id, kind, payload, status, created_at, visible_at)"
        " VALUES ('J2', 'rows.only', '{}', 'completed', now(), now())"
    )
    kinds = {info.kind: info for info in app.kinds()}
    assert set(kinds) >= {KIND, "rows.only"}
    assert kinds[KIND].counts == {
        Status.PENDING: 1,
        Status.CLAIMED: 0,
        Status.COMPLETED: 0,
        Status.DEAD: 0,
    }
    assert kinds[KIND].limits == Limits(2, None, None)
    assert kinds["rows.only"].registered is False


# -- stored schedules ------------------------------------------------------------------------


def scheduled(app: venturi.App) -> Any:
    @app.task(kind=KIND)
    def report(day: str = "today") -> str:
        return day

    return report


def test_bad_schedules_are_refused_and_nothing_is_written(app: venturi.App, db: Any) -> None:
    report = scheduled(app)
    app.periodic("0 * * * *", report, name="in-code")
    refused: list[tuple[type[Exception], tuple[Any, ...], dict[str, Any]]] = [
        (InvalidSchedule, ("a", "61 * * * *", report), {}),
        (InvalidSchedule, ("a", "* * * * *", report), {"timezone": "Mars/Olympus"}),
        (InvalidSchedule, ("a", "* * * * *", "no.such.task"), {}),
        (InvalidSchedule, ("", "* * * * *", report), {}),
        (DuplicateSchedule, ("in-code", "* * * * *", report), {}),
        (venturi.errors.ArgumentsMismatch, ("a", "* * * * *", report), {"kwargs": {"x": 1}}),
    ]
    for error, args, kwargs in refused:
        with pytest.raises(error):
            app.add_schedule(*args, **kwargs)
    assert nothing_written(db)
    app.add_schedule("a", "* * * * *", report)
    with pytest.raises(DuplicateSchedule):
        app.add_schedule("a", "0 0 * * *", KIND)
    assert [s.cron for s in app.stored_schedules()] == ["* * * * *"]


def test_list_schedules_shows_code_and_stored_ones_with_state_and_next_tick(
    app: venturi.App,
) -> None:
    report = scheduled(app)
    app.periodic("0 * * * *", report, name="hourly")
    app.add_schedule("nightly", "0 3 * * *", report, kwargs={"day": "x"}, timezone="Europe/Paris")
    app.pause_schedule("nightly")
    listed = {info.name: info for info in app.list_schedules()}
    code, stored = listed["hourly"], listed["nightly"]
    assert (code.name, code.source, code.state) == ("hourly", "code", KindState.ACTIVE)
    assert code.next_tick is not None and code.next_tick.minute == 0
    assert (stored.name, stored.source, stored.state, stored.next_tick) == (
        "nightly",
        "database",
        KindState.PAUSED,
        None,
    )
    app.resume_schedule("nightly")
    tick = app.schedule_info("nightly").next_tick
    assert tick is not None
    assert tick.astimezone(venturi.cron.zone("Europe/Paris")).hour == 3
    code_names = {schedule.name for schedule in app.schedules()}  # the code ones, as before
    assert "hourly" in code_names and "nightly" not in code_names


def test_code_schedules_are_not_paused_or_removed_at_run_time(app: venturi.App) -> None:
    report = scheduled(app)
    app.periodic("0 * * * *", report, name="hourly")
    for change in (app.pause_schedule, app.resume_schedule, app.remove_schedule):
        with pytest.raises(InvalidSchedule):
            change("hourly")
    for change in (app.pause_schedule, app.remove_schedule, app.trigger_schedule):
        with pytest.raises(ScheduleNotFound):
            change("missing")


def test_trigger_enqueues_one_run_now_even_while_paused(app: venturi.App) -> None:
    report = scheduled(app)
    app.add_schedule("nightly", "0 3 * * *", report, kwargs={"day": "now"})
    app.pause_schedule("nightly")
    ref = app.trigger_schedule("nightly", actor="ops")
    [run] = drain(app)
    assert (run.job_id, run.outcome.result) == (ref.id, '"now"')
    assert app.schedule_audit("nightly")[0].details == {"job_id": ref.id}


def test_backfill_runs_each_tick_once_and_refuses_bad_windows(app: venturi.App, db: Any) -> None:
    report = scheduled(app)
    app.add_schedule("hourly", "0 * * * *", report)
    now = app.backend.now()
    end = now.replace(minute=0, second=0, microsecond=0)
    start = end - timedelta(hours=5)
    first = app.backfill_schedule("hourly", start, end, actor="ops")
    assert len(first) == 6  # both ends of the window are ticks
    assert app.backfill_schedule("hourly", start, end) == []
    assert len(app.backfill_schedule("hourly", start - timedelta(hours=2), end)) == 2
    assert count(db, "kind = %s", (KIND,)) == 8

    audit_before = len(app.schedule_audit("hourly"))
    for bad_start, bad_end in [
        (start, now + timedelta(hours=1)),
        (end, start),
        (start.replace(tzinfo=None), end),
        (end - timedelta(days=60), end),
    ]:
        with pytest.raises(InvalidArgument):
            app.backfill_schedule("hourly", bad_start, bad_end)
    assert len(app.schedule_audit("hourly")) == audit_before
    assert count(db, "kind = %s", (KIND,)) == 8


def test_beat_runs_a_stored_schedule_pauses_and_removes_it(app: venturi.App, db: Any) -> None:
    report = scheduled(app)
    app.add_schedule("often", "*/5 * * * *", report)
    beat = Beat(app)
    noon = datetime(2030, 1, 1, 12, 1, tzinfo=UTC)
    [ref] = beat.run_once(now=noon)
    row = app.job(ref.id).job
    tick = datetime(2030, 1, 1, 12, 5, tzinfo=UTC)
    assert (row.dedup_key, row.visible_at) == ("beat:often", tick)

    app.pause_schedule("often")
    assert beat.run_once(now=noon) == []
    assert app.job(ref.id).journal[-1].note == "schedule paused"
    app.resume_schedule("often")
    [again] = beat.run_once(now=noon)
    app.remove_schedule("often")
    assert beat.run_once(now=noon) == []
    assert app.job(again.id).journal[-1].note == "schedule removed"
    # Two rows held the 12:05 tick, one after the other; neither ran, none is left.
    assert count(db, "dedup_key = 'beat:often' AND (status <> 'dead' OR run_count > 0)") == 0


def test_beat_leaves_a_stored_schedule_of_a_task_it_does_not_register_alone(
    app: venturi.App, database_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    report = scheduled(app)
    app.add_schedule("elsewhere", "*/5 * * * *", report)
    [ref] = Beat(app).run_once(now=datetime(2030, 1, 1, 12, 1, tzinfo=UTC))
    other = venturi.App(database_url, prefix=prefix, set_as_current=False)
    other.periodic("0 0 * * *", other.task(kind="control.own")(lambda: None), name="own")
    try:
        Beat(other).run_once(now=datetime(2030, 1, 1, 12, 1, tzinfo=UTC))
    finally:
        other.close()
    assert app.status(ref.id) is Status.PENDING
    assert "stored schedule elsewhere is not run by this beat" in caplog.text


def test_a_beat_with_only_stored_schedules_starts(app: venturi.App) -> None:
    with pytest.raises(ConfigurationError):
        Beat(app)
    app.add_schedule("often", "*/5 * * * *", scheduled(app))
    assert Beat(app).run_once(now=datetime(2030, 1, 1, 12, 1, tzinfo=UTC)) != []


# -- the CLI ---------------------------------------------------------------------------------


def test_the_cli_changes_kinds_and_schedules_as_named_and_shows_the_trail(
    app: venturi.App,
    database_url: str,
    prefix: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "control_cli_app.py").write_text(
        "import venturi\n"
        f"app = venturi.App({database_url!r}, prefix={prefix!r}, set_as_current=False)\n"
        f"@app.task(kind={KIND!r}, global_concurrency=2)\n"
        "def report(day: str = 'today') -> str:\n"
        "    return day\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    options = ["--app", "control_cli_app:app"]

    def run(*argv: str) -> tuple[int, str, str]:
        monkeypatch.delitem(sys.modules, "control_cli_app", raising=False)
        status = main([*argv, *options])
        out, err = capsys.readouterr()
        return status, out, err

    assert run("kinds", "pause", KIND, "--as", "alice")[0] == 0
    assert run("kinds", "limits", KIND, "--global-concurrency", "5", "--as", "bob")[0] == 0
    assert run("kinds", "limits", KIND, "--global-concurrency", "-1")[0] == 2
    assert run("kinds", "limits", KIND)[0] == 2
    assert run("kinds", "pause", "no.such.kind")[0] == 1
    status, out, _ = run("kinds", "--json")
    [listed] = [k for k in json.loads(out) if k["kind"] == KIND]
    assert (status, listed["state"], listed["limits"]["global_concurrency"]) == (0, "paused", 5)
    status, out, _ = run("kinds", "show", KIND)
    assert status == 0 and "bob" in out and "alice" in out and "in force" in out

    assert run("schedules", "add", "nightly", "0 3 * * *", KIND, "--kwargs", '{"day": "x"}')[0] == 0
    assert run("schedules", "add", "nightly", "0 3 * * *", KIND)[0] == 2
    assert run("schedules", "add", "bad", "0 3 * *", KIND)[0] == 2
    assert run("schedules", "pause", "nightly", "--as", "carol")[0] == 0
    status, out, _ = run("schedules", "list", "--json")
    stored = [(s["name"], s["state"]) for s in json.loads(out) if s["source"] == "database"]
    assert stored == [("nightly", "paused")]
    status, out, _ = run("schedules", "trigger", "nightly", "--json")
    assert status == 0 and json.loads(out)["job_id"]
    window = ["--start", "2026-01-01T00:00Z", "--end", "2026-01-03T00:00Z"]
    status, out, _ = run("schedules", "backfill", "nightly", *window, "--json")
    assert len(json.loads(out)["job_ids"]) == 2
    assert run("schedules", "backfill", "nightly", "--start", "2026-01-01", "--end", "x")[0] == 2
    status, out, _ = run("schedules", "show", "nightly")
    assert status == 0 and "carol" in out and "backfill" in out
    assert run("schedules", "remove", "nightly")[0] == 0
    assert run("schedules", "remove", "nightly")[0] == 1
