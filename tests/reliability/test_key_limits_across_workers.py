"""Limits per key and shared limits hold across worker processes (ADR 0138).

Real ``venturi worker`` subprocesses (``key_limits_app.py``) on one prefix,
directly and through PgBouncer in transaction mode. Every run records its start
and end by the database clock; the per-key invariant (N = 1: no two runs of one
key overlap) and the shared cap (at most ``SHARED_CAP`` runs of its kinds at
once) are checked on those intervals, also across SIGKILLs of every worker
while they hold key slots: a killed run's slot comes back with its lease.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from contract.pgbouncer import PgBouncer, require_pgbouncer
from fault_tools import WorkerFleet, wait_for_sessions_to_end
from key_limits_app import RUNS_DDL, SHARED_CAP, build_app
from support import wait_until

import venturi

pytestmark = pytest.mark.slow

TENANTS = 6
PER_TENANT = 12
TIMEOUT = 120.0


@pytest.fixture
def runs(db: Any, prefix: str) -> Iterator[None]:
    db.execute(RUNS_DDL.format(prefix=prefix))
    yield
    db.execute(f"DROP TABLE {prefix}_key_runs")


def _completed(db: Any, kinds: tuple[str, ...]) -> int:
    return int(
        db.scalar(
            "SELECT count(*) FROM {{prefix}}_jobs WHERE status = 'completed' AND kind = ANY(%s)",
            [list(kinds)],
        )
    )


def _overlaps(db: Any, killed_at: Any) -> list[dict[str, Any]]:
    """Pairs of runs of one key whose intervals overlap; a run cut by the kill ended
    at the latest when its process was gone (``killed_at``)."""
    return db.all(
        """
        WITH r AS (
            SELECT id, job_id, key, started_at,
                   coalesce(ended_at, %(killed_at)s::timestamptz) AS ended_at
            FROM {{prefix}}_key_runs
        )
        SELECT a.job_id AS a, b.job_id AS b, a.key
        FROM r AS a JOIN r AS b ON a.key = b.key AND a.id < b.id
        WHERE a.started_at < b.ended_at AND b.started_at < a.ended_at
        """,
        {"killed_at": killed_at},
    )


def _max_at_once(db: Any) -> int:
    """The most runs in progress at one instant (at each start, the runs open then)."""
    return int(
        db.scalar(
            """
            SELECT coalesce(max(open), 0) FROM (
                SELECT (SELECT count(*) FROM {{prefix}}_key_runs AS o
                        WHERE o.started_at <= s.started_at
                          AND coalesce(o.ended_at, 'infinity') > s.started_at) AS open
                FROM {{prefix}}_key_runs AS s
            ) AS per_start
            """
        )
    )


def _per_key_under_kills(
    database_url: str, prefix: str, db: Any, tmp_path: Path, bouncer: PgBouncer | None = None
) -> None:
    """Three workers (through ``bouncer`` when given, LISTEN on the direct URL), all
    SIGKILLed during runs, three new ones; every job completes, no key overlaps."""
    worker_url = database_url if bouncer is None else bouncer.url
    env = {} if bouncer is None else {"VENTURI_DIRECT_DATABASE_URL": database_url}
    app, tasks = build_app(database_url, prefix)
    try:
        tasks["keys.one"].delay_many(
            [(f"t{t}", n) for n in range(PER_TENANT) for t in range(TENANTS)]
        )
    finally:
        app.close()
    fleet = WorkerFleet(
        worker_url,
        prefix,
        tmp_path,
        application_name=f"venturi-keys-{prefix}",
        app="key_limits_app:app",
        env=env,
    )
    try:
        fleet.start(3)
        # Kill every worker while its handlers are in runs (holding key slots).
        wait_until(
            lambda: (
                db.scalar("SELECT count(*) FROM {{prefix}}_key_runs WHERE ended_at IS NULL") >= 2
            ),
            timeout=TIMEOUT,
        )
        for slot in range(3):
            fleet.slots[slot].kill()
            fleet.slots[slot].wait(10)
        killed_at = db.scalar("SELECT clock_timestamp()")
        held = db.scalar("SELECT count(*) FROM {{prefix}}_jobs WHERE status = 'claimed'")
        for slot in range(3):
            fleet.kill_and_restart(slot)
        try:
            wait_until(
                lambda: _completed(db, ("keys.one",)) == TENANTS * PER_TENANT, timeout=TIMEOUT
            )
        except AssertionError:
            raise AssertionError(fleet.logs()) from None
        assert fleet.stop() == [0, 0, 0], fleet.logs()
    finally:
        fleet.kill_all()
        if bouncer is not None:
            assert "prepared statement" not in bouncer.log()
            bouncer.close()  # its server sessions end with it
    wait_for_sessions_to_end(db, fleet.application_name)

    assert held >= 1  # slots were held across the kill, and came back with the leases
    assert _overlaps(db, killed_at) == []
    runs_per_key = db.all(
        "SELECT key, count(DISTINCT job_id) AS jobs FROM {{prefix}}_key_runs GROUP BY key"
    )
    assert {r["key"]: r["jobs"] for r in runs_per_key} == {
        f"t{t}": PER_TENANT for t in range(TENANTS)
    }
    # Runs were cut by the kill (and their jobs run again, to completion).
    assert db.scalar("SELECT count(*) FROM {{prefix}}_key_runs WHERE ended_at IS NULL") >= 1


def test_one_run_per_key_at_a_time_across_three_workers_killed_while_holding_keys(
    app: venturi.App, database_url: str, prefix: str, db: Any, tmp_path: Path, runs: None
) -> None:
    _per_key_under_kills(database_url, prefix, db, tmp_path)


def test_one_run_per_key_at_a_time_through_pgbouncer_in_transaction_mode(
    app: venturi.App, database_url: str, prefix: str, db: Any, tmp_path: Path, runs: None
) -> None:
    require_pgbouncer()
    _per_key_under_kills(
        database_url, prefix, db, tmp_path, PgBouncer(database_url, pool_size=4).start()
    )


def test_kinds_sharing_a_limit_never_run_more_than_it_across_workers(
    app: venturi.App, database_url: str, prefix: str, db: Any, tmp_path: Path, runs: None
) -> None:
    enqueuing, tasks = build_app(database_url, prefix)
    try:
        tasks["shared.a"].delay_many([(n,) for n in range(30)])
        tasks["shared.b"].delay_many([(n,) for n in range(30)])
    finally:
        enqueuing.close()
    fleet = WorkerFleet(
        database_url,
        prefix,
        tmp_path,
        application_name=f"venturi-shared-{prefix}",
        app="key_limits_app:app",
    )
    try:
        fleet.start(3)
        try:
            wait_until(lambda: _completed(db, ("shared.a", "shared.b")) == 60, timeout=TIMEOUT)
        except AssertionError:
            raise AssertionError(fleet.logs()) from None
        assert fleet.stop() == [0, 0, 0], fleet.logs()
    finally:
        fleet.kill_all()
    wait_for_sessions_to_end(db, fleet.application_name)

    assert _max_at_once(db) == SHARED_CAP  # reached, never passed
    assert db.scalar("SELECT count(DISTINCT kind) FROM {{prefix}}_jobs") == 2
