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

import pytest
from fault_tools import InvariantChecker, WorkerFleet, wait_for_sessions_to_end
from private_server import PrivateServer

import venturi


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


@pytest.fixture
def private_server() -> Iterator[PrivateServer]:
    """A cluster of the test's own: the shared server is never restarted."""
    server = PrivateServer()
    try:
        server.start()
        yield server
    finally:
        server.close()

