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

import pytest
from fault_tools import InvariantChecker


@pytest.fixture(autouse=True)
def invariants(database_url: str, prefix: str) -> Iterator[InvariantChecker]:
    """Checks the invariants after the test (and after the fixtures it requested)."""
    checker = InvariantChecker(database_url, [prefix])
    yield checker
    checker.check()
