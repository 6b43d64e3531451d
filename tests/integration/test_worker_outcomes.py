"""Every way a run can end, through a real threaded Worker (ADR 11, 13, 15).

Each test enqueues, lets a started ``Worker`` run the job, and then reads the
row and its journal with plain SQL: the row state, counters, carry and the one
journal entry per run are what the contract promises, not the return values.
Rows the task layer would refuse to write (a payload or carry that no longer
fits the code) are inserted by hand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from support import entries, row, status_is, wait_until
from ulid import ULID

import venturi
from venturi.errors import Fail, Retry
from venturi.worker import Worker


@dataclass
class Progress:
    pages: int
    last: str | None = None


def journal_has(db: Any, job_id: str, count: int) -> Callable[[], bool]:
    return lambda: len(db.journal(job_id)) >= count


def insert_pending(db: Any, kind: str, payload: str, carry: str = "null") -> str:
    job_id = str(ULID())
    db.execute(
        """
        INSERT INTO {{prefix}}_jobs (id, kind, payload, status, created_at, visible_at, carry)
        VALUES (%s, %s, %s::jsonb, 'pending', now(), now(), %s::jsonb)
        """,
        (job_id, kind, payload, carry),
    )
    return job_id


def test_a_returned_value_completes_the_job_with_that_value_as_its_note(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="out.text")
    def greet(name: str) -> str:
        return f"hello {name}"

    @app.task(kind="out.json")
    def count(n: int) -> dict[str, Any]:
        return {"n": n, "ok": True}

    @app.task(kind="out.none")
    def nothing() -> None:
        return None

    text, as_json, empty = greet.delay("ada"), count.delay(2), nothing.delay()
    start_worker()

    for ref in (text, as_json, empty):
        wait_until(status_is(db, ref.id, "completed"))
        job = row(db, ref.id)
        assert job["finished_at"] is not None
        assert (job["run_count"], job["failure_count"]) == (1, 0)
        assert job["claimed_by"] is None
        assert job["claim_expires_at"] is None
    assert entries(db, text.id) == [("completed", 1, "hello ada")]
    assert entries(db, as_json.id) == [("completed", 1, '{"n":2,"ok":true}')]
    assert entries(db, empty.id) == [("completed", 1, None)]


def test_a_return_value_the_journal_cannot_hold_as_is_is_still_recorded_as_text(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="out.nul")
    def with_nul() -> str:
        return "before\x00after"

    @app.task(kind="out.not_json")
    def not_json() -> set[int]:
        return {7}

    nul, odd = with_nul.delay(), not_json.delay()
    start_worker()

    wait_until(status_is(db, nul.id, "completed"))
    wait_until(status_is(db, odd.id, "completed"))
    assert entries(db, nul.id) == [("completed", 1, "before\\x00after")]
    assert entries(db, odd.id) == [("completed", 1, "{7}")]


def test_pause_saves_the_carry_counts_no_failure_and_resumes_the_job(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="out.pause")
    def stepper(ctx: venturi.Context, total: int) -> str:
        done = (ctx.carry or {}).get("done", 0) + 1
        ctx.carry = {"done": done}
        if done < total:
            ctx.pause()
        return f"done after {done} runs"

    ref = stepper.delay(3)
    start_worker()

    wait_until(status_is(db, ref.id, "completed"))
    job = row(db, ref.id)
    assert (job["run_count"], job["failure_count"]) == (3, 0)
    assert job["carry"] == {"done": 3}
    assert entries(db, ref.id) == [
        ("paused", 1, None),
        ("paused", 2, None),
        ("completed", 3, "done after 3 runs"),
    ]


def test_a_carry_set_back_to_none_is_written(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    # A run that finds no carry and leaves none sends none (the row keeps its
    # 'null'); clearing a stored carry must still reach the row.
    @app.task(kind="out.clear_carry")
    def clear(ctx: venturi.Context) -> None:
        assert ctx.carry == {"step": 2}
        ctx.carry = None

    @app.task(kind="out.no_carry")
    def untouched(ctx: venturi.Context) -> None:
        assert ctx.carry is None

    cleared = insert_pending(db, "out.clear_carry", "{}", carry='{"step": 2}')
    never = insert_pending(db, "out.no_carry", "{}")
    start_worker()

    for job_id in (cleared, never):
        wait_until(status_is(db, job_id, "completed"))
        assert entries(db, job_id) == [("completed", 1, None)]
        assert row(db, job_id)["carry"] is None


def test_a_paused_job_waits_until_its_delay_has_passed(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="out.pause_later")
    def later(ctx: venturi.Context) -> None:
        ctx.carry = "waiting"
        ctx.pause(timedelta(hours=2))

    ref = later.delay()
    start_worker()

    wait_until(journal_has(db, ref.id, 1))
    job = row(db, ref.id)
    assert job["status"] == "pending"
    assert job["carry"] == "waiting"
    assert job["failure_count"] == 0
    assert db.scalar(
        "SELECT visible_at > now() + interval '119 minutes' FROM {{prefix}}_jobs WHERE id = %s",
        (ref.id,),
    )


def test_a_declared_carry_dataclass_survives_a_retry(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    seen: list[Any] = []

    @app.task(kind="out.retry_carry", carry=Progress, backoff=0)
    def crawl(ctx: venturi.Context) -> int:
        seen.append(ctx.carry)
        if ctx.carry is None:
            ctx.carry = Progress(pages=1, last="a")
            raise ConnectionError("flaky network")
        ctx.carry = Progress(pages=ctx.carry.pages + 1, last="b")
        return ctx.carry.pages

    ref = crawl.delay()
    start_worker()

    wait_until(status_is(db, ref.id, "completed"))
    assert seen == [None, Progress(pages=1, last="a")]
    job = row(db, ref.id)
    assert (job["run_count"], job["failure_count"]) == (2, 1)
    assert job["carry"] == {"pages": 2, "last": "b"}
    assert entries(db, ref.id) == [
        ("retried", 1, "ConnectionError: flaky network"),
        ("completed", 2, "2"),
    ]


def test_an_exception_is_a_failure_retried_after_the_task_backoff(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="out.backoff", backoff=timedelta(hours=1))
    def broken() -> None:
        raise ValueError("no luck")

    ref = broken.delay()
    start_worker()

    wait_until(journal_has(db, ref.id, 1))
    job = row(db, ref.id)
    assert job["status"] == "pending"
    assert (job["run_count"], job["failure_count"]) == (1, 1)
    assert job["claimed_by"] is None
    assert job["finished_at"] is None
    assert entries(db, ref.id) == [("retried", 1, "ValueError: no luck")]
    assert db.scalar(
        "SELECT visible_at > now() + interval '59 minutes' FROM {{prefix}}_jobs WHERE id = %s",
        (ref.id,),
    )


def test_the_failure_that_reaches_max_failures_makes_the_job_dead(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="out.backstop", max_failures=3, backoff=0)
    def always_down() -> None:
        raise RuntimeError("service down")

    ref = always_down.delay()
    start_worker()

    wait_until(status_is(db, ref.id, "dead"))
    job = row(db, ref.id)
    assert (job["run_count"], job["failure_count"]) == (3, 3)
    assert job["finished_at"] is not None
    outcomes = entries(db, ref.id)
    assert [(o, n) for o, n, _ in outcomes] == [("retried", 1), ("retried", 2), ("dead", 3)]
    last_note = outcomes[-1][2]
    assert last_note is not None
    assert "backstop" in last_note
    assert "RuntimeError: service down" in last_note


def test_fail_makes_the_job_dead_at_once_with_its_message(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="out.fail", max_failures=10)
    def bounce(address: str) -> None:
        raise Fail(f"{address} bounced")

    ref = bounce.delay("a@example.org")
    start_worker()

    wait_until(status_is(db, ref.id, "dead"))
    job = row(db, ref.id)
    assert (job["run_count"], job["failure_count"]) == (1, 1)
    assert job["finished_at"] is not None
    assert entries(db, ref.id) == [("dead", 1, "a@example.org bounced")]


def test_retry_with_a_delay_is_a_failure_retried_after_that_delay(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="out.retry_delay", backoff=timedelta(hours=5))
    def rate_limited() -> None:
        raise Retry("rate limited", delay=timedelta(minutes=10))

    ref = rate_limited.delay()
    start_worker()

    wait_until(journal_has(db, ref.id, 1))
    job = row(db, ref.id)
    assert job["status"] == "pending"
    assert job["failure_count"] == 1
    assert entries(db, ref.id) == [("retried", 1, "Retry: rate limited")]
    assert db.scalar(
        """
        SELECT visible_at BETWEEN now() + interval '9 minutes' AND now() + interval '11 minutes'
        FROM {{prefix}}_jobs WHERE id = %s
        """,
        (ref.id,),
    )


def test_a_payload_that_no_longer_fits_the_handler_goes_dead_and_keeps_the_row(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    calls: list[str] = []

    @app.task(kind="out.mismatch")
    def greet(name: str) -> None:
        calls.append(name)

    job_id = insert_pending(db, "out.mismatch", '{"nickname": "ada"}')
    start_worker()

    wait_until(status_is(db, job_id, "dead"))
    assert calls == []
    job = row(db, job_id)
    assert job["payload"] == {"nickname": "ada"}
    [(outcome, run_no, note)] = entries(db, job_id)
    assert (outcome, run_no) == ("dead", 1)
    assert note is not None
    assert "no longer fits" in note


def test_a_carry_that_no_longer_fits_the_declared_dataclass_goes_dead(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    calls: list[Any] = []

    @app.task(kind="out.bad_carry", carry=Progress)
    def resume(ctx: venturi.Context) -> None:
        calls.append(ctx.carry)

    job_id = insert_pending(db, "out.bad_carry", "{}", carry='{"chapters": 3}')
    start_worker()

    wait_until(status_is(db, job_id, "dead"))
    assert calls == []
    assert row(db, job_id)["carry"] == {"chapters": 3}
    [(outcome, _, note)] = entries(db, job_id)
    assert outcome == "dead"
    assert note is not None
    assert "carry does not fit" in note


def test_an_argument_mismatch_raised_inside_the_handler_is_an_ordinary_failure(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="out.child")
    def child(n: int) -> None: ...

    @app.task(kind="out.parent", backoff=timedelta(hours=1))
    def parent() -> None:
        child.delay("too", "many")  # type: ignore[call-arg]

    ref = parent.delay()
    start_worker(kinds=["out.parent"])

    wait_until(journal_has(db, ref.id, 1))
    assert row(db, ref.id)["status"] == "pending"
    [(outcome, _, note)] = entries(db, ref.id)
    assert outcome == "retried"
    assert note is not None
    assert note.startswith("ArgumentsMismatch:")


def test_an_attachment_is_stored_on_the_journal_entry_of_its_run(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="out.attach", backoff=0)
    def import_file(ctx: venturi.Context, name: str) -> int:
        ctx.set_attachment({"file": name, "run": ctx.run_count})
        if ctx.run_count == 1:
            raise OSError("disk full")
        return 3

    ref = import_file.delay("a.csv")
    start_worker()

    wait_until(status_is(db, ref.id, "completed"))
    journal = db.journal(ref.id)
    assert [(e["outcome"], e["attachment"]) for e in journal] == [
        ("retried", {"file": "a.csv", "run": 1}),
        ("completed", {"file": "a.csv", "run": 2}),
    ]


def test_an_attachment_that_is_not_json_makes_the_run_a_retryable_failure(
    app: venturi.App, db: Any, start_worker: Callable[..., Worker]
) -> None:
    @app.task(kind="out.bad_attachment", backoff=timedelta(hours=1))
    def report(ctx: venturi.Context) -> str:
        ctx.set_attachment({"ids": {1, 2}})
        return "done"

    ref = report.delay()
    start_worker()

    wait_until(journal_has(db, ref.id, 1))
    job = row(db, ref.id)
    assert (job["status"], job["failure_count"]) == ("pending", 1)
    [entry] = db.journal(ref.id)
    assert entry["outcome"] == "retried"
    assert entry["note"].startswith("InvalidPayload:")
    assert entry["attachment"] is None
