"""The reliability suite's invariant checker, run after every test of the suite.

Whatever a test did to the queue (killed workers, cut connections, fed it
garbage, wrote poison rows by hand), the tables must still describe a
coherent queue afterwards. Each invariant is one SQL query that returns the
rows breaking it; the check runs when the test ends (after its own fixtures,
such as worker processes, were torn down) on the module's prefix, and on any
other prefix the test registered with ``invariants.watch(prefix)``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from fault_tools import WorkerFleet, wait_for_sessions_to_end
from psycopg.rows import dict_row

import venturi

#: Invariant -> the query returning the rows that break it.
INVARIANTS = {
    "a claimed row has claimed_by and claim_expires_at, and no other row has either": """
        SELECT id, status, claimed_by, claim_expires_at FROM {{prefix}}_jobs
        WHERE (status = 'claimed') <> (claimed_by IS NOT NULL)
           OR (status = 'claimed') <> (claim_expires_at IS NOT NULL)
    """,
    "finished_at is set exactly on completed and dead rows": """
        SELECT id, status, finished_at FROM {{prefix}}_jobs
        WHERE (status IN ('completed', 'dead')) <> (finished_at IS NOT NULL)
    """,
    # A completed job can never leave `completed`, so a job that is not completed
    # must not have a completed entry either (that would be a completion lost or undone).
    "a completed job has exactly one completed journal entry, and no other job has one": """
        SELECT j.id, j.status, count(e.id) AS completions
        FROM {{prefix}}_jobs AS j
        LEFT JOIN {{prefix}}_journal AS e ON e.job_id = j.id AND e.outcome = 'completed'
        GROUP BY j.id, j.status
        HAVING count(e.id) <> (j.status = 'completed')::int
    """,
    "a journal entry's run_no never exceeds its job's run_count": """
        SELECT e.id, e.job_id, e.run_no, j.run_count
        FROM {{prefix}}_journal AS e JOIN {{prefix}}_jobs AS j ON j.id = e.job_id
        WHERE e.run_no > j.run_count
    """,
    "no journal entry outlives its job": """
        SELECT e.id, e.job_id FROM {{prefix}}_journal AS e
        WHERE NOT EXISTS (SELECT 1 FROM {{prefix}}_jobs AS j WHERE j.id = e.job_id)
    """,
}


class InvariantChecker:
    """Checks INVARIANTS on a set of prefixes; ``check()`` raises on the first broken one."""

    def __init__(self, database_url: str, prefixes: list[str]) -> None:
        self._database_url = database_url
        self._prefixes = list(prefixes)
        self.checked: list[str] = []

    def watch(self, prefix: str) -> None:
        """Check this prefix too when the test ends (it must still exist then)."""
        self._prefixes.append(prefix)

    def check(self) -> None:
        for prefix in self._prefixes:
            self.check_prefix(prefix)

    def check_prefix(self, prefix: str) -> None:
        with psycopg.connect(self._database_url, autocommit=True, row_factory=dict_row) as conn:
            for invariant, query in INVARIANTS.items():
                broken = conn.execute(query.replace("{{prefix}}", prefix)).fetchmany(5)
                assert not broken, f"invariant broken on prefix {prefix}: {invariant}: {broken}"
        self.checked.append(prefix)


@pytest.fixture(autouse=True)
def invariants(database_url: str, prefix: str) -> Iterator[InvariantChecker]:
    """Checks the invariants after the test (and after the fixtures it requested)."""
    checker = InvariantChecker(database_url, [prefix])
    yield checker
    checker.check()


@pytest.fixture
def fleet(
    app: venturi.App, db: Any, database_url: str, prefix: str, tmp_path: Path
) -> Iterator[WorkerFleet]:
    """``venturi worker`` processes on the test's prefix; all killed, their sessions gone, after.

    Their ``PGAPPNAME`` names the prefix, so a test finds (and terminates) their sessions only.
    """
    started = WorkerFleet(
        database_url, prefix, tmp_path, application_name=f"venturi-fleet-{prefix}"
    )
    yield started
    started.kill_all()
    wait_for_sessions_to_end(db, started.application_name)
