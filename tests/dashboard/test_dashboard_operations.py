"""The App operations added for the dashboard: throughput, listing with the last
note, counts, and bulk retry/cancel by filter (validated, nothing written on bad input)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from dashboard_support import dead_job

from venturi.errors import InvalidArgument
from venturi.types import OutcomeKind, Status


def test_throughput_counts_completed_and_dead_per_kind_and_minute(app, db, tasks) -> None:
    refs = tasks["send"].delay_many([{"to": f"u{i}@example.org"} for i in range(5)])
    for ref, (status, minutes) in zip(
        refs,
        [("completed", 0), ("completed", 0), ("dead", 0), ("completed", 3), ("dead", 90)],
        strict=True,
    ):
        db.execute(
            "UPDATE {{prefix}}_jobs SET status = %s,"
            " finished_at = date_trunc('minute', now()) - make_interval(mins => %s)"
            " + interval '1 second' WHERE id = %s",
            (status, minutes, ref.id),
        )
    found = app.throughput(timedelta(hours=1))
    by_minute = {
        (m.kind, found.current_minute - m.minute): (m.completed, m.dead) for m in found.minutes
    }
    assert by_minute == {
        ("mail.send", timedelta(0)): (2, 1),
        ("mail.send", timedelta(minutes=3)): (1, 0),
    }


def test_throughput_of_an_idle_queue_still_has_the_current_minute(app) -> None:
    found = app.throughput()
    assert found.minutes == ()
    assert found.current_minute.second == 0


@pytest.mark.parametrize("window", [timedelta(0), timedelta(seconds=59), timedelta(days=2)])
def test_throughput_refuses_a_window_out_of_range(app, window) -> None:
    with pytest.raises(InvalidArgument):
        app.throughput(window)


def test_job_summaries_carry_the_last_journal_entry(app, db, tasks) -> None:
    job_id = dead_job(app, db, tasks["send"], note="first")
    db.execute(
        "INSERT INTO {{prefix}}_journal (job_id, kind, run_no, recorded_at, outcome, note)"
        " VALUES (%s, 'mail.send', 2, now(), 'retried', 'Boom: 100%% broken_')",
        (job_id,),
    )
    fresh = tasks["send"].delay("x@example.org").id
    page = app.job_summaries()
    assert [(s.job.id, s.last_outcome, s.last_note) for s in page.jobs] == [
        (fresh, None, None),
        (job_id, OutcomeKind.RETRIED, "Boom: 100% broken_"),
    ]
    # wildcards of LIKE are plain characters; matching ignores case
    assert [s.job.id for s in app.job_summaries(note="100% BROKEN_").jobs] == [job_id]
    assert app.job_summaries(note="first").jobs == ()
    assert app.job_summaries(note="%").jobs[0].job.id == job_id
    assert app.job_summaries(note="_ x").jobs == ()


def test_job_summaries_page_with_the_cursor(app, tasks) -> None:
    refs = tasks["send"].delay_many([{"to": f"u{i}"} for i in range(5)])
    first = app.job_summaries(limit=3)
    second = app.job_summaries(limit=3, after=first.next)
    assert [s.job.id for s in first.jobs + second.jobs] == [r.id for r in reversed(refs)]
    assert second.next is None


@pytest.mark.parametrize(
    "filters",
    [{"note": ""}, {"note": "a\x00b"}, {"kind": ""}, {"status": "running"}, {"limit": 0}],
)
def test_job_summaries_refuse_bad_filters(app, filters) -> None:
    with pytest.raises(InvalidArgument):
        app.job_summaries(**filters)


def test_count_jobs_counts_every_page(app, db, tasks) -> None:
    tasks["send"].delay_many([{"to": f"u{i}"} for i in range(7)])
    dead_job(app, db, tasks["send"], note="SMTP down")
    assert app.count_jobs() == 8
    assert app.count_jobs(status=Status.PENDING) == 7
    assert app.count_jobs(status="dead", note="smtp") == 1
    assert app.count_jobs(kind="other") == 0


def test_retry_matching_retries_only_matching_dead_jobs_in_batches(app, db, tasks) -> None:
    matching = [dead_job(app, db, tasks["send"], note="SMTP down") for _ in range(5)]
    other = dead_job(app, db, tasks["send"], note="ValueError")
    assert app.retry_matching(kind="mail.send", note="smtp", batch_size=2) == 5
    rows = {r["id"]: r for r in db.jobs()}
    assert {rows[i]["status"] for i in matching} == {"pending"}
    assert all(rows[i]["failure_count"] == 0 and rows[i]["finished_at"] is None for i in matching)
    assert rows[other]["status"] == "dead"
    notes = [e["note"] for e in db.journal(matching[0])]
    assert notes == ["SMTP down", "retried by operator"]


def test_cancel_matching_cancels_only_matching_pending_jobs(app, db, tasks) -> None:
    pending = tasks["send"].delay_many([{"to": f"u{i}"} for i in range(3)])
    dead = dead_job(app, db, tasks["send"])
    assert app.cancel_matching(kind="mail.send") == 3
    rows = {r["id"]: r for r in db.jobs()}
    assert {rows[r.id]["status"] for r in pending} == {"dead"}
    assert [e["note"] for e in db.journal(pending[0].id)] == ["cancelled"]
    assert len(db.journal(dead)) == 1
    assert app.cancel_matching(kind="nothing.here") == 0


@pytest.mark.parametrize("bulk", ["retry_matching", "cancel_matching"])
@pytest.mark.parametrize("filters", [{"kind": ""}, {"note": "\x00"}, {"batch_size": 0}])
def test_bulk_changes_refuse_bad_filters_and_write_nothing(app, db, tasks, bulk, filters) -> None:
    tasks["send"].delay("a")
    dead_job(app, db, tasks["send"])
    before = (db.jobs(), db.journal())
    with pytest.raises(InvalidArgument):
        getattr(app, bulk)(**filters)
    assert (db.jobs(), db.journal()) == before
