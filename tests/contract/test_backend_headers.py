"""Trace headers in the Backend contract (ADR 0127): ``NewJob.headers`` is stored by
``enqueue`` and ``aenqueue`` on every insert path (one job, a few, a large batch, a
deduplicated one) and comes back on ``ClaimedJob.headers``; jobs without headers, also
in the same batch, store none."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any

import pytest
from backends import BackendCase, ClaimAll, new_job

from venturi.backend import Backend

HEADERS = {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}


def sizes(case: BackendCase) -> list[int]:
    return [1, 3, case.large_batch]


@pytest.mark.parametrize("size_index", [0, 1, 2])
@pytest.mark.parametrize("is_async", [False, True], ids=["enqueue", "aenqueue"])
def test_headers_are_stored_and_claimed_back(
    backend: Backend,
    backend_case: BackendCase,
    claim_all: ClaimAll,
    size_index: int,
    is_async: bool,
) -> None:
    size = sizes(backend_case)[size_index]
    jobs = [replace(new_job(), headers=HEADERS) for _ in range(size)]
    if size > 1:
        jobs[-1] = new_job()  # one without, in the same batch
    if is_async:

        async def write() -> None:
            await backend.aenqueue(jobs)
            await backend.aclose()

        asyncio.run(write())
    else:
        backend.enqueue(jobs)
    claimed = {job.claim.job_id: job.headers for job in claim_all(limit=size)}
    expected = {job.id: job.headers for job in jobs}
    assert claimed == expected


def test_a_deduplicated_job_keeps_its_headers(
    backend: Backend, claim_all: ClaimAll, db: Any
) -> None:
    [ref] = backend.enqueue([replace(new_job(dedup_key="k"), headers=HEADERS)])
    [job] = claim_all()
    assert job.claim.job_id == ref.id
    assert job.headers == HEADERS
    assert db.one("SELECT headers FROM {{prefix}}_jobs WHERE id = %s", (ref.id,)) == {
        "headers": HEADERS
    }
