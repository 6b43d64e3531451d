"""The reply watchdog (ADR 0123): a statement whose reply does not come within
``reply_timeout`` has its session abandoned, however the watching thread slept."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest

from venturi.errors import BackendUnavailable
from venturi.postgres.sessions import connect
from venturi.postgres.watchdog import ReplyWatchdog

TIMEOUT = 0.5


def test_a_statement_without_a_reply_is_abandoned_after_the_timeout(database_url: str) -> None:
    watchdog = ReplyWatchdog(TIMEOUT, name="test-watchdog")
    try:
        with connect(database_url, 5) as conn:
            started = time.monotonic()
            with (
                pytest.raises(BackendUnavailable, match="no reply within"),
                watchdog.bounded(conn),
            ):
                conn.execute("SELECT pg_sleep(10)")
            assert time.monotonic() - started < 5
    finally:
        watchdog.stop()


@pytest.mark.parametrize("gap", [TIMEOUT / 2, TIMEOUT * 2], ids=["asleep-for-it", "idle"])
def test_a_hang_after_a_quick_statement_is_caught(database_url: str, gap: float) -> None:
    """A quick statement sets the thread's next look. A hang ``gap`` later has a later
    deadline: while the thread still sleeps for the first (asleep-for-it) it is not woken
    (ADR 0132) and must move on to the second; once it waits with nothing to watch
    (idle), the new watch must wake it."""
    watchdog = ReplyWatchdog(TIMEOUT, name="test-watchdog")
    try:
        with connect(database_url, 5) as quick, connect(database_url, 5) as slow:
            with watchdog.bounded(quick):
                quick.execute("SELECT 1")
            time.sleep(gap)
            started = time.monotonic()
            with (
                pytest.raises(BackendUnavailable, match="no reply within"),
                watchdog.bounded(slow),
            ):
                slow.execute("SELECT pg_sleep(10)")
            assert time.monotonic() - started < 5
    finally:
        watchdog.stop()


def test_statements_that_get_their_replies_are_left_alone(database_url: str) -> None:
    watchdog = ReplyWatchdog(TIMEOUT, name="test-watchdog")
    errors: list[BaseException] = []

    def statements() -> None:
        try:
            with connect(database_url, 5) as conn:
                for _ in range(50):
                    with watchdog.bounded(conn):
                        conn.execute("SELECT pg_sleep(0.02)")
        except (psycopg.Error, BackendUnavailable) as exc:
            errors.append(exc)

    threads = [threading.Thread(target=statements) for _ in range(3)]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=30)
    finally:
        watchdog.stop()
    assert errors == []
