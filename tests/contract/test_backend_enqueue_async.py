"""The Enqueue role, awaited: ``aenqueue`` gives the same rows, refs, dedup decisions
and wake-ups as ``enqueue``, and honours the caller's async transaction (ADR 10, 12,
0122; venturi/backend/). Runs on asyncio through anyio's pytest plugin."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from backends import BackendCase, new_job
from ulid import ULID

from venturi.backend import Backend
from venturi.errors import InvalidArgument
from venturi.refs import JobRef
from venturi.types import MergeAction, MergeDecision, NewJob, Priority

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def keep(existing: Any) -> MergeDecision:
    return MergeDecision(MergeAction.KEEP)


async def test_one_job_becomes_one_pending_row_as_with_enqueue(backend: Backend, db: Any) -> None:
    job = new_job("contract.kind", '{"to": "a@x.org"}', priority=Priority.HIGH)

    assert await backend.aenqueue([job]) == [JobRef(job.id)]

    [row] = db.jobs()
    assert (row["id"], row["kind"], row["payload"], row["priority"], row["status"]) == (
        job.id,
        "contract.kind",
        {"to": "a@x.org"},
        0,
        "pending",
    )
    assert row["visible_at"] == row["created_at"]
    assert db.journal() == []


async def test_an_empty_batch_writes_nothing(backend: Backend, db: Any) -> None:
    assert await backend.aenqueue([]) == []
    assert db.jobs() == []


@pytest.mark.parametrize("size", ["few", "large"])
async def test_a_batch_keeps_order_delays_etas_and_tiers(
    backend: Backend, backend_case: BackendCase, db: Any, size: str
) -> None:
    count = 7 if size == "few" else backend_case.large_batch
    eta = datetime(2030, 1, 1, tzinfo=UTC)
    jobs = [
        NewJob(
            str(ULID()),
            "bulk.item",
            json.dumps({"n": n}),
            delay=timedelta(seconds=60) if n % 3 == 1 else timedelta(0),
            eta=eta if n % 3 == 2 else None,
            priority=Priority.HIGH if n % 2 else Priority.LOW,
        )
        for n in range(count)
    ]

    refs = await backend.aenqueue(jobs)

    assert refs == [JobRef(job.id) for job in jobs]
    rows = {r["id"]: r for r in db.jobs()}
    assert len(rows) == count
    created = [rows[j.id]["created_at"] for j in jobs]
    assert created == sorted(created) and len(set(created)) == len(created)
    for n, job in enumerate(jobs):
        row = rows[job.id]
        assert (row["payload"], row["priority"]) == ({"n": n}, 0 if n % 2 else 2)
        if n % 3 == 1:
            assert row["visible_at"] - row["created_at"] == timedelta(seconds=60)
        elif n % 3 == 2:
            assert row["visible_at"] == eta
        else:
            assert row["visible_at"] == row["created_at"]


async def test_keep_returns_the_siblings_id_and_journals_the_merge(
    backend: Backend, db: Any
) -> None:
    first = new_job(payload='{"n": 1}', dedup_key="k")
    await backend.aenqueue([first])
    second = new_job(payload='{"n": 2}', dedup_key="k", merge=keep)

    assert await backend.aenqueue([second]) == [JobRef(first.id, merged=True)]

    [row] = db.jobs()
    assert (row["id"], row["payload"]) == (first.id, {"n": 1})
    [entry] = db.journal(first.id)
    assert (entry["outcome"], entry["note"]) == ("merged", f"keep: absorbed {second.id}")


async def test_replace_gives_the_sibling_the_new_payload_and_the_higher_tier(
    backend: Backend, db: Any
) -> None:
    first = new_job(payload='{"n": 1}', dedup_key="k")
    backend.enqueue([first])  # a sync sibling: both paths see the same rows
    seen: list[Any] = []

    def replace(existing: Any) -> MergeDecision:
        seen.append(existing)
        return MergeDecision(MergeAction.REPLACE, '{"n": 2}')

    second = new_job(payload='{"n": 2}', dedup_key="k", priority=Priority.HIGH, merge=replace)
    plain = new_job()

    refs = await backend.aenqueue([second, plain])

    assert refs == [JobRef(first.id, merged=True), JobRef(plain.id)]
    assert seen == [{"n": 1}]
    rows = {row["id"]: row for row in db.jobs()}
    assert (rows[first.id]["payload"], rows[first.id]["priority"]) == ({"n": 2}, 0)
    assert set(rows) == {first.id, plain.id}


async def test_independent_inserts_a_row_of_its_own(backend: Backend, db: Any) -> None:
    first = new_job(dedup_key="k")
    await backend.aenqueue([first])
    second = new_job(dedup_key="k", merge=lambda existing: MergeDecision(MergeAction.INDEPENDENT))

    assert await backend.aenqueue([second]) == [JobRef(second.id)]

    assert [row["id"] for row in db.jobs()] == [first.id, second.id]


async def test_a_failing_merge_resolver_propagates_and_writes_nothing_of_the_batch(
    backend: Backend, db: Any
) -> None:
    existing = new_job(dedup_key="k")
    await backend.aenqueue([existing])

    def merge(existing: Any) -> MergeDecision:
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        await backend.aenqueue([new_job(), new_job(dedup_key="k", merge=merge)])

    assert [row["id"] for row in db.jobs()] == [existing.id]
    assert db.journal() == []


# -- the caller's async transaction ---------------------------------------------------


def batch_size(case: BackendCase, size: str) -> int:
    return {"one": 1, "few": 3, "large": case.large_batch}[size]


@pytest.mark.parametrize("size", ["one", "few", "large"])
async def test_aenqueue_inside_a_rolled_back_transaction_leaves_nothing_and_wakes_nobody(
    backend: Backend, backend_case: BackendCase, database_url: str, db: Any, size: str
) -> None:
    count = batch_size(backend_case, size)
    listener = backend.listen()
    try:
        listener.wait(0)
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            await backend.aenqueue([new_job() for _ in range(count)], connection=conn)
            cursor = await conn.execute(db._sql("SELECT count(*) FROM {{prefix}}_jobs"))
            assert await cursor.fetchone() == (count,)
            assert db.jobs() == []  # not visible outside the transaction
            await conn.rollback()

        assert db.jobs() == []
        assert not listener.wait(0.5)
    finally:
        listener.close()


@pytest.mark.parametrize("size", ["one", "few", "large"])
async def test_aenqueue_inside_a_committed_transaction_writes_the_rows_and_wakes_at_commit(
    backend: Backend, backend_case: BackendCase, database_url: str, db: Any, size: str
) -> None:
    count = batch_size(backend_case, size)
    listener = backend.listen()
    try:
        listener.wait(0)
        async with await psycopg.AsyncConnection.connect(database_url) as conn:
            jobs = [new_job() for _ in range(count)]
            await backend.aenqueue(jobs, connection=conn)
            assert not listener.wait(0.2)  # the wake-up is delivered at commit
            await conn.commit()

        assert [row["id"] for row in db.jobs()] == [job.id for job in jobs]
        assert listener.wait(5.0)
    finally:
        listener.close()


async def test_a_deduplicated_aenqueue_inside_a_rolled_back_transaction_leaves_no_merge(
    backend: Backend, database_url: str, db: Any
) -> None:
    existing = new_job(dedup_key="k")
    await backend.aenqueue([existing])

    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        refs = await backend.aenqueue(
            [new_job(dedup_key="k", merge=keep), new_job(dedup_key="j", merge=keep)],
            connection=conn,
        )
        assert refs[0] == JobRef(existing.id, merged=True)
        await conn.rollback()

    assert [row["id"] for row in db.jobs()] == [existing.id]
    assert db.journal() == []


async def test_a_sync_connection_is_refused_by_aenqueue_with_nothing_written(
    backend: Backend, database_url: str, db: Any
) -> None:
    with psycopg.connect(database_url) as conn:
        with pytest.raises(InvalidArgument, match="AsyncConnection"):
            await backend.aenqueue([new_job()], connection=conn)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE

    with pytest.raises(InvalidArgument, match="AsyncConnection"):
        await backend.aenqueue([new_job(dedup_key="k")], connection="not a connection")
    assert db.jobs() == []


async def test_an_async_connection_is_refused_by_enqueue_with_nothing_written(
    backend: Backend, database_url: str, db: Any
) -> None:
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        with pytest.raises(InvalidArgument, match=r"psycopg\.Connection"):
            backend.enqueue([new_job()], connection=conn)
    assert db.jobs() == []
