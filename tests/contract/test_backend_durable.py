"""The Durable role (venturi/backend/durable.py, ADR 0137): steps recorded in one
statement fenced on the claim (a lost claim writes nothing, a step recorded once
stands), read back in recording order with the events and the database's now;
events sent once, to live jobs only, waking a waiting job; a retry that starts
over deletes the steps in its transaction."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import psycopg
import pytest
from backends import ClaimAll, new_job, running, stored_row

from venturi.backend import Backend
from venturi.durable import NewDurableStep, StepKind
from venturi.errors import (
    EventAlreadySent,
    InvalidArgument,
    InvalidState,
    JobFinished,
    JobNotFound,
)
from venturi.types import Claim, Finished, Outcome, OutcomeKind

UNKNOWN = "01J00000000000000000000000"


def step(name: str, result: str | None = "1", **options: Any) -> NewDurableStep:
    return NewDurableStep(options.pop("kind", StepKind.STEP), name, result, **options)


def test_record_step_writes_the_step_and_load_steps_reads_them_in_order(
    backend: Backend, claim_all: ClaimAll
) -> None:
    [claim] = running(backend, claim_all)
    first = backend.record_step(claim, step("b", '{"x": [1, 2]}'))
    second = backend.record_step(claim, step("a", "null"))
    sleep = backend.record_step(
        claim, step("1", None, kind=StepKind.SLEEP, wake_after=timedelta(hours=1))
    )
    assert first is not None and second is not None and sleep is not None
    assert (first.kind, first.name, first.run_no, first.result) == (
        StepKind.STEP,
        "b",
        claim.run_count,
        '{"x": [1, 2]}',
    )
    assert first.wake_at is None
    assert sleep.wake_at is not None
    assert sleep.wake_at - sleep.recorded_at == timedelta(hours=1)  # one clock: the database's

    state = backend.load_steps(claim.job_id)
    assert [(s.kind, s.name) for s in state.steps] == [
        (StepKind.STEP, "b"),
        (StepKind.STEP, "a"),
        (StepKind.SLEEP, "1"),
    ]
    assert state.steps[0] == first
    assert state.events == ()
    assert state.now >= sleep.recorded_at


def test_load_steps_of_a_job_without_any_or_of_no_job_is_empty(
    backend: Backend, claim_all: ClaimAll
) -> None:
    [claim] = running(backend, claim_all)
    for job_id in (claim.job_id, UNKNOWN):
        state = backend.load_steps(job_id)
        assert (state.steps, state.events) == ((), ())


def test_a_step_of_a_lost_claim_writes_nothing(
    backend: Backend, claim_all: ClaimAll, db: Any
) -> None:
    [claim] = running(backend, claim_all)
    stale = [
        Claim(claim.job_id, "other-host:2", claim.run_count),
        Claim(claim.job_id, claim.claimed_by, claim.run_count - 1),
        Claim(UNKNOWN, claim.claimed_by, claim.run_count),
    ]
    for lost in stale:
        assert backend.record_step(lost, step("s")) is None
    backend.release([claim])  # no longer claimed at all
    assert backend.record_step(claim, step("s")) is None
    assert db.scalar("SELECT count(*) FROM {{prefix}}_checkpoints") == 0


def test_a_step_recorded_once_stands(backend: Backend, claim_all: ClaimAll) -> None:
    [claim] = running(backend, claim_all)
    assert backend.record_step(claim, step("s", '"first"')) is not None
    assert backend.record_step(claim, step("s", '"second"')) is None
    [kept] = backend.load_steps(claim.job_id).steps
    assert kept.result == '"first"'


def test_send_event_records_it_once_and_load_steps_reads_it(
    backend: Backend, claim_all: ClaimAll
) -> None:
    [claim] = running(backend, claim_all)
    backend.send_event(claim.job_id, "approved", '{"by": "ana"}')
    with pytest.raises(EventAlreadySent):
        backend.send_event(claim.job_id, "approved", '{"by": "bo"}')
    [event] = backend.load_steps(claim.job_id).events
    assert (event.name, event.payload) == ("approved", '{"by": "ana"}')


def test_send_event_refuses_unknown_and_terminal_jobs_writing_nothing(
    backend: Backend, claim_all: ClaimAll, db: Any
) -> None:
    with pytest.raises(JobNotFound):
        backend.send_event(UNKNOWN, "e", "null")
    done, dead = running(backend, claim_all, 2)
    backend.finish(
        [
            Finished(done, Outcome(OutcomeKind.COMPLETED)),
            Finished(dead, Outcome(OutcomeKind.DEAD, note="x")),
        ]
    )
    for claim, status in ((done, "completed"), (dead, "dead")):
        with pytest.raises(JobFinished, match=status):
            backend.send_event(claim.job_id, "e", "null")
    assert db.scalar("SELECT count(*) FROM {{prefix}}_events") == 0


def test_a_send_wakes_a_pending_job_waiting_for_it_only(
    backend: Backend, claim_all: ClaimAll, db: Any
) -> None:
    waiting, other = running(backend, claim_all, 2)
    backend.record_step(waiting, step("go", None, kind=StepKind.WAIT))
    backend.finish(
        [
            Finished(c, Outcome(OutcomeKind.PAUSED, delay=timedelta(hours=1)))
            for c in (waiting, other)
        ]
    )
    backend.send_event(waiting.job_id, "go", "null")
    backend.send_event(other.job_id, "go", "null")  # it never waited: stays scheduled
    now = db.scalar("SELECT now()")
    assert stored_row(db, waiting.job_id)["visible_at"] <= now
    assert stored_row(db, other.job_id)["visible_at"] > now + timedelta(minutes=59)


def test_a_send_during_a_run_makes_its_paused_finish_visible_now(
    backend: Backend, claim_all: ClaimAll, db: Any
) -> None:
    woken, quiet = running(backend, claim_all, 2)
    backend.send_event(woken.job_id, "go", "null")
    assert stored_row(db, woken.job_id)["status"] == "claimed"
    backend.finish(
        [Finished(c, Outcome(OutcomeKind.PAUSED, delay=timedelta(hours=1))) for c in (woken, quiet)]
    )
    now = db.scalar("SELECT now()")
    assert stored_row(db, woken.job_id)["visible_at"] <= now
    assert stored_row(db, quiet.job_id)["visible_at"] > now + timedelta(minutes=59)
    # The next run of the woken job pauses as it asks: the mark was that run's only.
    [again] = [j.claim for j in claim_all() if j.claim.job_id == woken.job_id]
    backend.finish([Finished(again, Outcome(OutcomeKind.PAUSED, delay=timedelta(hours=1)))])
    assert stored_row(db, woken.job_id)["visible_at"] > now + timedelta(minutes=59)


def test_send_event_inside_the_callers_transaction(
    backend: Backend, claim_all: ClaimAll, database_url: str, db: Any
) -> None:
    [claim] = running(backend, claim_all)
    with psycopg.connect(database_url) as conn:
        backend.send_event(claim.job_id, "e", "1", connection=conn)
        assert db.scalar("SELECT count(*) FROM {{prefix}}_events") == 0
        conn.rollback()
    assert db.scalar("SELECT count(*) FROM {{prefix}}_events") == 0
    with psycopg.connect(database_url) as conn:
        backend.send_event(claim.job_id, "e", "2", connection=conn)
    assert [e.payload for e in backend.load_steps(claim.job_id).events] == ["2"]
    with pytest.raises(InvalidArgument):
        backend.send_event(claim.job_id, "f", "1", connection="not a connection")


@pytest.mark.anyio
async def test_asend_event_is_send_event_on_the_loop(
    backend: Backend, claim_all: ClaimAll, database_url: str
) -> None:
    [claim] = running(backend, claim_all)
    await backend.asend_event(claim.job_id, "e", "1")
    with pytest.raises(EventAlreadySent):
        await backend.asend_event(claim.job_id, "e", "2")
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        await backend.asend_event(claim.job_id, "f", "3", connection=conn)
    with pytest.raises(JobNotFound):
        await backend.asend_event(UNKNOWN, "e", "1")
    assert sorted(e.name for e in backend.load_steps(claim.job_id).events) == ["e", "f"]


def test_retry_job_from_start_deletes_the_steps_keeps_the_events(
    backend: Backend, claim_all: ClaimAll
) -> None:
    [claim] = running(backend, claim_all)
    backend.record_step(claim, step("s"))
    backend.send_event(claim.job_id, "e", "null")
    backend.finish([Finished(claim, Outcome(OutcomeKind.DEAD, note="x"))])
    retried = backend.retry_job_from_start(claim.job_id)
    assert retried.status.value == "pending"
    state = backend.load_steps(claim.job_id)
    assert state.steps == ()
    assert [e.name for e in state.events] == ["e"]


def test_retry_job_from_start_refuses_as_retry_job_does_deleting_nothing(
    backend: Backend, claim_all: ClaimAll
) -> None:
    [claim] = running(backend, claim_all)
    backend.record_step(claim, step("s"))
    with pytest.raises(InvalidState):
        backend.retry_job_from_start(claim.job_id)
    assert len(backend.load_steps(claim.job_id).steps) == 1
    with pytest.raises(JobNotFound):
        backend.retry_job_from_start(UNKNOWN)


def test_steps_and_events_go_with_their_job(backend: Backend, claim_all: ClaimAll, db: Any) -> None:
    [claim] = running(backend, claim_all)
    backend.record_step(claim, step("s"))
    backend.send_event(claim.job_id, "e", "null")
    backend.finish([Finished(claim, Outcome(OutcomeKind.COMPLETED))])
    backend.enqueue([new_job()])
    assert backend.cleanup(older_than=timedelta(0), status=None, batch_size=10) == 1
    assert db.scalar("SELECT count(*) FROM {{prefix}}_checkpoints") == 0
    assert db.scalar("SELECT count(*) FROM {{prefix}}_events") == 0
