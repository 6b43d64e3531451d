"""The Enqueue role's template form: ``enqueue_alike`` and ``aenqueue_alike`` write the
rows ``enqueue`` writes for ``template.jobs(ids, payloads)``, in order, woken and
all-or-nothing as it is, in the caller's transaction too (ADR 0142)."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from datetime import timedelta
from typing import Any

import psycopg
import pytest
from backends import BackendCase
from ulid import ULID

from venturi.backend import Backend
from venturi.batches import LazyBatch
from venturi.errors import InvalidPayload
from venturi.job_template import JobTemplate
from venturi.types import Priority

TEMPLATES = [
    pytest.param(JobTemplate("contract.alike"), id="immediate"),
    pytest.param(JobTemplate("contract.alike", Priority.HIGH), id="high"),
    pytest.param(
        JobTemplate("contract.alike", Priority.LOW, timedelta(minutes=3), timedelta(hours=2)),
        id="delayed-expiring",
    ),
    pytest.param(JobTemplate("contract.alike", expires_in=timedelta(seconds=90)), id="expiring"),
]

#: The columns a plain job's row is compared on; the times as offsets from created_at.
COMPARED = (
    "kind",
    "payload",
    "priority",
    "status",
    "dedup_key",
    "fair_key",
    "headers",
    "run_count",
    "failure_count",
    "claimed_by",
)


def sizes(case: BackendCase) -> dict[str, int]:
    return {"one": 1, "few": 5, "large": case.large_batch}


def fresh(count: int) -> tuple[list[str], list[str]]:
    return [str(ULID()) for _ in range(count)], [json.dumps({"n": n}) for n in range(count)]


def shape(row: dict[str, Any]) -> tuple[Any, ...]:
    """A row without its id and clock: what a job of the template must look like."""
    expires = row["expires_at"]
    return (
        *(row[column] for column in COMPARED),
        row["visible_at"] - row["created_at"],
        None if expires is None else expires - row["created_at"],
    )


def write(backend: Backend, is_async: bool, template: JobTemplate, ids: Any, payloads: Any) -> None:
    if not is_async:
        backend.enqueue_alike(template, ids, payloads)
        return

    async def awaited() -> None:
        await backend.aenqueue_alike(template, ids, payloads)
        await backend.aclose()

    asyncio.run(awaited())


@pytest.mark.parametrize("is_async", [False, True], ids=["enqueue_alike", "aenqueue_alike"])
@pytest.mark.parametrize("size", ["one", "few", "large"])
@pytest.mark.parametrize("template", TEMPLATES)
def test_the_rows_are_those_enqueue_writes_for_the_templates_jobs_in_order(
    backend: Backend,
    backend_case: BackendCase,
    db: Any,
    template: JobTemplate,
    size: str,
    is_async: bool,
) -> None:
    count = sizes(backend_case)[size]
    ids, payloads = fresh(count)
    write(backend, is_async, template, ids, payloads)
    alike = db.jobs()
    db.execute("DELETE FROM {{prefix}}_jobs")
    backend.enqueue(template.jobs(*fresh(count)))
    enqueued = db.jobs()

    assert [row["id"] for row in alike] == ids
    assert [row["payload"] for row in alike] == [json.loads(p) for p in payloads]
    assert [shape(row) for row in alike] == [shape(row) for row in enqueued]
    assert alike[0]["kind"] == "contract.alike"
    assert alike[0]["priority"] == int(template.priority)
    assert alike[0]["visible_at"] - alike[0]["created_at"] == template.delay
    assert db.journal() == []


def test_no_ids_write_nothing(backend: Backend, db: Any) -> None:
    backend.enqueue_alike(JobTemplate("contract.alike"), [], [])
    asyncio.run(backend.aenqueue_alike(JobTemplate("contract.alike"), [], []))
    assert db.jobs() == []


@pytest.mark.parametrize("size", ["one", "few", "large"])
def test_the_enqueue_wakes_a_listener(
    backend: Backend, backend_case: BackendCase, size: str
) -> None:
    listener = backend.listen()
    try:
        listener.wait(0)
        backend.enqueue_alike(JobTemplate("contract.alike"), *fresh(sizes(backend_case)[size]))
        assert listener.wait(5.0)
    finally:
        listener.close()


@pytest.mark.parametrize("size", ["one", "few", "large"])
def test_inside_a_rolled_back_transaction_nothing_is_left_and_nobody_woken(
    backend: Backend, backend_case: BackendCase, database_url: str, db: Any, size: str
) -> None:
    count = sizes(backend_case)[size]
    listener = backend.listen()
    try:
        listener.wait(0)
        with psycopg.connect(database_url) as conn:
            backend.enqueue_alike(JobTemplate("contract.alike"), *fresh(count), connection=conn)
            assert conn.execute(db._sql("SELECT count(*) FROM {{prefix}}_jobs")).fetchone() == (
                count,
            )
            assert db.jobs() == []  # not visible outside the transaction
            conn.rollback()

        assert db.jobs() == []
        assert not listener.wait(0.5)
    finally:
        listener.close()


@pytest.mark.parametrize("size", ["one", "few", "large"])
def test_inside_a_committed_transaction_the_rows_appear_and_wake_at_commit(
    backend: Backend, backend_case: BackendCase, database_url: str, db: Any, size: str
) -> None:
    ids, payloads = fresh(sizes(backend_case)[size])
    listener = backend.listen()
    try:
        listener.wait(0)
        with psycopg.connect(database_url) as conn:
            backend.enqueue_alike(JobTemplate("contract.alike"), ids, payloads, connection=conn)
            assert not listener.wait(0.2)  # the wake-up is delivered at commit
            conn.commit()

        assert [row["id"] for row in db.jobs()] == ids
        assert listener.wait(5.0)
    finally:
        listener.close()


@pytest.mark.parametrize("size", ["one", "few", "large"])
def test_inside_a_rolled_back_async_transaction_nothing_is_left(
    backend: Backend, backend_case: BackendCase, database_url: str, db: Any, size: str
) -> None:
    count = sizes(backend_case)[size]

    async def rolled_back() -> None:
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            await backend.aenqueue_alike(
                JobTemplate("contract.alike"), *fresh(count), connection=conn
            )
            await conn.rollback()
        await backend.aclose()

    asyncio.run(rolled_back())
    assert db.jobs() == []


def refused(payloads: list[str]) -> LazyBatch[str]:
    """``payloads`` as ``delay_many`` hands them over, made as they are read, with the
    last one refused when it is."""

    def make(payload: str | None) -> str:
        if payload is None:
            raise InvalidPayload("the last payload is refused")
        return payload

    return LazyBatch([*payloads[:-1], None], make, "the contract's call", 0)


@pytest.mark.parametrize("in_transaction", [False, True], ids=["pooled", "callers"])
@pytest.mark.parametrize("is_async", [False, True], ids=["enqueue_alike", "aenqueue_alike"])
@pytest.mark.parametrize("size", ["one", "few", "large"])
def test_payloads_refused_as_they_are_read_write_nothing_of_the_call(
    backend: Backend,
    backend_case: BackendCase,
    database_url: str,
    db: Any,
    size: str,
    is_async: bool,
    in_transaction: bool,
) -> None:
    ids, payloads = fresh(sizes(backend_case)[size])
    template = JobTemplate("contract.alike")
    kept = str(ULID())

    def sync() -> None:
        if not in_transaction:
            backend.enqueue_alike(template, ids, refused(payloads))
            return
        with psycopg.connect(database_url) as conn:
            backend.enqueue_alike(template, [kept], ['{"kept": 1}'], connection=conn)
            with pytest.raises(InvalidPayload):
                backend.enqueue_alike(template, ids, refused(payloads), connection=conn)
            conn.commit()  # the caller's transaction is still good: its own rows stay

    async def awaited() -> None:
        try:
            if not in_transaction:
                await backend.aenqueue_alike(template, ids, refused(payloads))
                return
            async with await psycopg.AsyncConnection.connect(database_url) as conn:
                await backend.aenqueue_alike(template, [kept], ['{"kept": 1}'], connection=conn)
                with pytest.raises(InvalidPayload):
                    await backend.aenqueue_alike(template, ids, refused(payloads), connection=conn)
                await conn.commit()
        finally:
            await backend.aclose()

    def call() -> None:
        if is_async:
            asyncio.run(awaited())
        else:
            sync()

    if in_transaction:
        call()  # refused inside, where the caller's transaction goes on
    else:
        with pytest.raises(InvalidPayload):
            call()

    assert [row["id"] for row in db.jobs()] == ([kept] if in_transaction else [])
    write(backend, is_async, template, *fresh(3))  # the sessions were given back clean
    assert len(db.jobs()) == 3 + in_transaction


@pytest.mark.parametrize("size", ["one", "few", "large"])
def test_payloads_and_headers_beyond_ascii_arrive_as_sent_on_every_path(
    backend: Backend, backend_case: BackendCase, db: Any, size: str
) -> None:
    """The COPY sends jsonb's binary form as text (the version byte, then UTF-8): accents,
    other scripts, astral characters and JSON escapes come back as they were."""
    count = sizes(backend_case)[size]
    values = ["café", "日本語", "🚀 launch", 'quote " and \\ backslash', "tab\tnew\nline"]
    ids = [str(ULID()) for _ in range(count)]
    payloads = [json.dumps({"text": values[n % len(values)]}) for n in range(count)]
    backend.enqueue_alike(JobTemplate("contract.alike"), ids, payloads)
    headers = {"traceparent": "00-é🚀-01"}
    traced = [
        replace(job, headers=headers) for job in JobTemplate("contract.alike").jobs(*fresh(count))
    ]
    backend.enqueue(traced)

    rows = {row["id"]: row for row in db.jobs()}
    assert [rows[i]["payload"]["text"] for i in ids] == [
        values[n % len(values)] for n in range(count)
    ]
    assert all(rows[job.id]["headers"] == headers for job in traced)
