"""The adapter's pool: pooled sessions are reused, even on descriptors above 1023."""

from __future__ import annotations

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
    many_descriptors: None, database_url: str, prefix: str, db: Any
) -> None:
    app = venturi.App(database_url, prefix=prefix, set_as_current=False)
    try:
        backend: Any = app.backend
        pids = [backend._run(lambda conn: (conn.fileno(), conn.info.backend_pid)) for _ in range(3)]
    finally:
        app.close()
    assert all(fd > 1023 for fd, _ in pids), pids
    assert len({pid for _, pid in pids}) == 1, pids
