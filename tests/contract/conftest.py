"""The Backend conformance suite's fixtures: every test here runs once per implementation.

As River's driver test suite does, the behaviour of the Backend protocol
(venturi/backend/, one contract per member; one test module per role) is written
once and run against each entry of ``backends.CASES``. Rows are checked with plain SQL (``db``)
where the protocol has no reader for them, so an implementation under test
stores into the test database's tables of the module's prefix.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from datetime import timedelta

import psycopg
import pytest
from backends import CASES, LEASE, WORKER, BackendCase, ClaimAll

from venturi.backend import (
    Backend,
    Claims,
    Control,
    Coordination,
    Durable,
    Enqueue,
    Leases,
    Operator,
    Results,
    Schema,
    Workers,
    Workflows,
)
from venturi.postgres import PostgresBackend
from venturi.types import ClaimedJob

#: Static conformance, verified by mypy: tests/contract/test_backend_roles.py runs it here. The
#: adapter is a Backend, so each role is implied; each is checked on its own too, so a
#: mismatch is reported against the role that declares the member.
_backend_check: type[Backend] = PostgresBackend
_enqueue_check: type[Enqueue] = PostgresBackend
_claims_check: type[Claims] = PostgresBackend
_leases_check: type[Leases] = PostgresBackend
_coordination_check: type[Coordination] = PostgresBackend
_operator_check: type[Operator] = PostgresBackend
_workers_check: type[Workers] = PostgresBackend
_results_check: type[Results] = PostgresBackend
_workflows_check: type[Workflows] = PostgresBackend
_durable_check: type[Durable] = PostgresBackend
_control_check: type[Control] = PostgresBackend
_schema_check: type[Schema] = PostgresBackend


@pytest.fixture(params=CASES, ids=[case.name for case in CASES])
def backend_case(request: pytest.FixtureRequest) -> BackendCase:
    case: BackendCase = request.param
    return case


@pytest.fixture
def build_backend(
    backend_case: BackendCase, database_url: str, prefix: str
) -> Iterator[Callable[[], Backend]]:
    """Builds Backends of the case under test on this module's prefix; closed after the test."""
    built: list[Backend] = []

    def build() -> Backend:
        instance = backend_case.build(database_url, prefix)
        built.append(instance)
        return instance

    yield build
    for instance in built:
        instance.close()


@pytest.fixture
def backend(database_url: str, prefix: str, build_backend: Callable[[], Backend]) -> Backend:
    """The Backend under test, on this module's prefix with empty tables."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(
            f"TRUNCATE {prefix}_journal, {prefix}_jobs, {prefix}_claim_limits,"
            f" {prefix}_steps, {prefix}_edges, {prefix}_fair_cursors, {prefix}_checkpoints,"
            f" {prefix}_events, {prefix}_kind_controls, {prefix}_schedules, {prefix}_backfills,"
            f" {prefix}_audit"
        )
    return build_backend()


@pytest.fixture
def claim_all(backend: Backend) -> ClaimAll:
    """Claims the eligible jobs of ``kinds`` for ``WORKER``, in one claim."""

    def claim(
        kinds: Collection[str] = ("contract.kind",),
        *,
        limit: int = 100,
        lease: timedelta = LEASE,
        worker_id: str = WORKER,
    ) -> list[ClaimedJob]:
        return backend.claim(kinds=kinds, limit=limit, worker_id=worker_id, lease=lease)

    return claim
