"""The adapter's pool: pooled sessions are reused, even on descriptors above 1023."""

from __future__ import annotations

import logging
import os
import resource
from collections.abc import Iterator
from typing import Any

import pytest

import venturi


@pytest.fixture
def many_descriptors() -> Iterator[None]:
    """Hold open descriptors up to 1100, so the next connection's socket is above 1023."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 1200:
        pytest.skip(f"the open-files limit ({soft}) is too low to go past descriptor 1023")
    held: list[int] = []
    while not held or held[-1] < 1100:
        held.append(os.open(os.devnull, os.O_RDONLY))
    try:
        yield
    finally:
        for fd in held:
            os.close(fd)


def test_a_pooled_session_on_a_high_descriptor_is_reused_not_replaced(
    many_descriptors: None, database_url: str, prefix: str, db: Any, caplog: Any
) -> None:
    app = venturi.App(database_url, prefix=prefix, set_as_current=False)
    caplog.set_level(logging.DEBUG, logger="venturi.postgres.connections")
    try:
        backend: Any = app.backend
        pids = [backend._run(lambda conn: (conn.fileno(), conn.info.backend_pid)) for _ in range(5)]
        # The pool may open a second session in the background when the first checkout
        # comes before its first one is ready (a loaded machine): then the two alternate.
        sessions = {pid for _, pid in pids}
        assert len(sessions) <= 2, pids
        # Every session handed out is still open on the server: none was discarded.
        live = db.all("SELECT pid FROM pg_stat_activity WHERE pid = ANY(%s)", (list(sessions),))
        assert {row["pid"] for row in live} == sessions, pids
    finally:
        app.close()
    assert all(fd > 1023 for fd, _ in pids), pids
    discarded = [r for r in caplog.records if "discarding a pooled connection" in r.getMessage()]
    assert discarded == [], pids
