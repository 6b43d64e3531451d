"""Poison rows: jobs written by hand that no handler can run (SPEC 3, ADR 11).

Another program, an old release or an operator's SQL can leave rows that the
task layer would have refused: a payload that does not fit the handler, that
is not an object, a kind nobody serves, a carry that no longer fits the
task's carry dataclass. Each test writes one such row among healthy jobs and
runs a real threaded Worker: the worker keeps running (every healthy job, and
one enqueued after the poison, completes normally), the poison row ends
``dead`` with a note that says why (a row of an unknown kind is left alone,
pending), and no other row is affected.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import orjson
import pytest
from support import wait_until
from ulid import ULID

import venturi
from venturi.context import Context
from venturi.worker import Worker

HEALTHY = 12


@dataclass
class Progress:
    pages: int


@pytest.fixture
def tasks(app: venturi.App) -> dict[str, Any]:
    @app.task(kind="poison.add", lease=timedelta(seconds=5))
    def add(a: int, b: int) -> int:
        return a + b

    @app.task(kind="poison.when", lease=timedelta(seconds=5))
    def when(at: datetime) -> str:
        return at.isoformat()

    @app.task(kind="poison.resume", carry=Progress, lease=timedelta(seconds=5))
    def resume(ctx: Context, step: int) -> int:
        done = ctx.carry.pages if ctx.carry is not None else 0
        return done + step

    return {"add": add, "when": when, "resume": resume}


def insert_pending(db: Any, kind: str, payload: str, carry: str = "null") -> str:
    """A pending row written by hand, eligible now, older than every healthy job."""
    job_id = str(ULID())
    db.execute(
        """
        INSERT INTO {{prefix}}_jobs (id, kind, payload, status, created_at, visible_at, carry)
        VALUES (%s, %s, %s::jsonb, 'pending', now() - interval '1 minute',
                now() - interval '1 minute', %s::jsonb)
        """,
        (job_id, kind, payload, carry),
    )
    return job_id


def enqueue_healthy(tasks: dict[str, Any]) -> list[str]:
    refs = [tasks["add"].delay(n, 1) for n in range(HEALTHY // 3)]
    refs += [tasks["when"].delay(datetime(2026, 1, n + 1)) for n in range(HEALTHY // 3)]
    refs += [tasks["resume"].delay(n) for n in range(HEALTHY // 3)]
    return [ref.id for ref in refs]


def row(db: Any, job_id: str) -> dict[str, Any]:
    """The row without its JSON columns, which a poison row may make undecodable here too."""
    return db.one(
        "SELECT id, kind, status, run_count, failure_count, finished_at, claimed_by,"
        " payload::text AS payload_text"
        " FROM {{prefix}}_jobs WHERE id = %s",
        (job_id,),
    )


def assert_completed_normally(db: Any, job_ids: list[str]) -> None:
    """Each ran once, completed, and has exactly one journal entry: nothing else touched it."""
    for job_id in job_ids:
        job = row(db, job_id)
        assert (job["status"], job["run_count"], job["failure_count"]) == ("completed", 1, 0)
        assert [(e["run_no"], e["outcome"]) for e in db.journal(job_id)] == [(1, "completed")]


POISON = {
    "payload missing an argument": ("poison.add", '{"a": 1}', "null", "missing b"),
    "payload with an argument the handler does not take": (
        "poison.add",
        '{"a": 1, "b": 2, "c": 3}',
        "null",
        "unexpected c",
    ),
    "payload value that does not fit its annotation": (
        "poison.when",
        '{"at": "not a date"}',
        "null",
        "'at' does not fit its annotation",
    ),
    "payload that is an array": (
        "poison.add",
        "[1, 2]",
        "null",
        "the payload is not a JSON object",
    ),
    "payload that is a string": (
        "poison.add",
        '"a: 1, b: 2"',
        "null",
        "the payload is not a JSON object",
    ),
    "payload that is null": ("poison.add", "null", "null", "the payload is not a JSON object"),
    "carry with a field the carry dataclass lacks": (
        "poison.resume",
        '{"step": 1}',
        '{"pages": 1, "cursor": "x"}',
        "carry does not fit",
    ),
    "carry that is not an object": ("poison.resume", '{"step": 1}', "[1, 2]", "carry does not fit"),
}


@pytest.mark.parametrize("case", POISON.keys())
def test_a_poison_row_ends_dead_with_a_note_that_says_why_and_every_other_job_completes(
    db: Any, tasks: dict[str, Any], start_worker: Callable[[], Worker], case: str
) -> None:
    kind, payload, carry, why = POISON[case]
    poison = insert_pending(db, kind, payload, carry)
    healthy = enqueue_healthy(tasks)

    start_worker(poll_interval=0.5)
    wait_until(lambda: row(db, poison)["status"] == "dead")
    later = tasks["add"].delay(40, 2).id  # enqueued after the poison was met
    wait_until(lambda: all(row(db, i)["status"] == "completed" for i in [*healthy, later]))

    dead = row(db, poison)
    assert (dead["run_count"], dead["failure_count"]) == (1, 1)
    assert orjson.loads(dead["payload_text"]) == orjson.loads(payload)  # kept as written
    [entry] = db.journal(poison)
    assert (entry["run_no"], entry["outcome"]) == (1, "dead")
    assert why in entry["note"], entry["note"]
    assert_completed_normally(db, [*healthy, later])


def test_a_row_of_a_kind_no_task_declares_is_left_pending_and_untouched(
    db: Any, tasks: dict[str, Any], start_worker: Callable[[], Worker]
) -> None:
    stranger = insert_pending(db, "nobody.serves.this", '{"a": 1}')
    before = row(db, stranger)
    healthy = enqueue_healthy(tasks)

    start_worker(poll_interval=0.5)
    wait_until(lambda: all(row(db, i)["status"] == "completed" for i in healthy))
    later = tasks["add"].delay(40, 2).id
    wait_until(lambda: row(db, later)["status"] == "completed")

    assert row(db, stranger) == before
    assert db.journal(stranger) == []
    assert_completed_normally(db, [*healthy, later])


UNDECODABLE = {
    # Valid jsonb (PostgreSQL keeps it) that orjson, the adapter's decoder, refuses.
    "a number beyond the range of a double": '{"a": 1e400, "b": 1}',
    "nesting deeper than the decoder's 1024 levels": '{"a": ' + "[" * 1100 + "]" * 1100 + "}",
}


@pytest.mark.parametrize("case", UNDECODABLE.keys())
def test_a_payload_the_decoder_cannot_read_ends_dead_without_holding_other_jobs_hostage(
    app: venturi.App, db: Any, tasks: dict[str, Any], case: str
) -> None:
    poison = insert_pending(db, "poison.add", UNDECODABLE[case])
    healthy = enqueue_healthy(tasks)

    # One iteration claims the poison row (the oldest) with three healthy jobs.
    Worker(app, concurrency=4).run_once()

    assert row(db, poison)["status"] == "dead"
    assert "payload" in db.journal(poison)[-1]["note"]
    assert db.scalar("SELECT count(*) FROM {{prefix}}_jobs WHERE status = 'claimed'") == 0
    assert db.scalar("SELECT count(*) FROM {{prefix}}_jobs WHERE status = 'completed'") == 3
    assert len(healthy) == HEALTHY


def test_operations_still_list_show_and_cancel_a_row_whose_payload_cannot_be_decoded(
    app: venturi.App, db: Any
) -> None:
    poison = insert_pending(db, "poison.add", UNDECODABLE["a number beyond the range of a double"])

    assert [job.id for job in app.jobs().jobs] == [poison]
    assert app.job(poison).job.id == poison
    assert app.cancel(poison).status == "dead"
