"""The implementations the conformance suite runs against, and the jobs it feeds them.

To run the whole suite on another Backend (PgBouncer in front of the test
server, an in-process adapter), add one entry to ``CASES``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from pgbouncer import shared_pgbouncer
from ulid import ULID

from venturi.backend import Backend
from venturi.postgres import PostgresBackend
from venturi.postgres.backend import COPY_THRESHOLD
from venturi.types import Claim, ClaimedJob, MergeResolver, NewJob, Priority

LEASE = timedelta(minutes=1)
WORKER = "contract-host:1"
KIND = "contract.kind"

#: The ``claim_all`` fixture: claims the eligible jobs of some kinds for ``WORKER``.
ClaimAll = Callable[..., list[ClaimedJob]]


@dataclass(frozen=True)
class BackendCase:
    """One implementation under test.

    ``build(database_url, prefix)`` makes a Backend on an already migrated
    prefix of the test database; ``large_batch`` is a batch size that takes
    its bulk-insert path.
    """

    name: str
    build: Callable[[str, str], Backend]
    large_batch: int


def _postgres(database_url: str, prefix: str) -> Backend:
    return PostgresBackend(database_url, prefix=prefix)


def _through_pgbouncer(database_url: str, prefix: str) -> Backend:
    """Pooled statements through PgBouncer in transaction mode; sessions go direct (ADR 0123)."""
    bouncer = shared_pgbouncer(database_url)
    return PostgresBackend(bouncer.url, prefix=prefix, direct_url=database_url)


CASES = (
    BackendCase("postgres", _postgres, large_batch=COPY_THRESHOLD + 44),
    BackendCase("postgres through pgbouncer", _through_pgbouncer, large_batch=COPY_THRESHOLD + 44),
)


def new_job(
    kind: str = KIND,
    payload: str = "{}",
    *,
    priority: Priority = Priority.NORMAL,
    delay: timedelta = timedelta(0),
    eta: datetime | None = None,
    dedup_key: str | None = None,
    merge: MergeResolver | None = None,
    fair_key: str | None = None,
    expires_in: timedelta | None = None,
    expires_at: datetime | None = None,
) -> NewJob:
    """A NewJob with a fresh ULID, as the task layer would build it."""
    return NewJob(
        str(ULID()),
        kind,
        payload,
        priority=priority,
        delay=delay,
        eta=eta,
        dedup_key=dedup_key,
        merge=merge,
        fair_key=fair_key,
        expires_in=expires_in,
        expires_at=expires_at,
    )


def running(backend: Backend, claim_all: ClaimAll, count: int = 1) -> list[Claim]:
    """``count`` fresh jobs, enqueued and claimed: their claims."""
    backend.enqueue([new_job() for _ in range(count)])
    return [job.claim for job in claim_all()]


def stored_row(db: Any, job_id: str) -> dict[str, Any]:
    """The job's row as stored, read with plain SQL."""
    job: dict[str, Any] = db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (job_id,))
    return job
