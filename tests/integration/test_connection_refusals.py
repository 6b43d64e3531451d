"""A refused login is told apart from an outage, and an outage says where (ADR 0118).

These build the adapter on *other* servers or databases than the test one
(one that does not exist, a role that does not exist, a port nobody listens
on, a listener that never answers), so they run on the direct adapter only:
the conformance suite's pooled case routes the test server's database
through its PgBouncer.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
import socket
import threading
from collections.abc import Callable, Iterator

import pytest
from psycopg.conninfo import make_conninfo
from psycopg_pool import ConnectionPool
from support import wait_until

from venturi.errors import BackendUnavailable, DatabaseRefused
from venturi.postgres import PostgresBackend

REFUSED = "postgresql://postgres@127.0.0.1:1/x"
#: Hang guards, not speed assertions: far below the connect timeout the calls are
#: given, so that a call that waits that timeout out fails, and far above the
#: time an answer takes on a loaded machine.
LONG_CONNECT_TIMEOUT = 60.0
AT_ONCE_BOUND = 20.0


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A local port that accepts connections and never says a word on them."""
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.1)
    held: list[socket.socket] = []
    open_ = threading.Event()
    open_.set()

    def accept() -> None:
        while open_.is_set():
            with contextlib.suppress(TimeoutError):
                held.append(server.accept()[0])

    thread = threading.Thread(target=accept, name="silent-listener", daemon=True)
    thread.start()
    yield server.getsockname()[1]
    open_.clear()
    thread.join(5)
    for sock in [*held, server]:
        sock.close()


def raised_within(call: Callable[[], object], bound: float) -> BaseException:
    """The exception ``call`` raised, run in a thread that must end within ``bound`` s."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            call()
        except BaseException as exc:  # handed to the test thread
            raised.append(exc)

    thread = threading.Thread(target=run, name="bounded-call", daemon=True)
    thread.start()
    thread.join(bound)
    assert not thread.is_alive(), f"the call was still waiting after {bound}s"
    assert raised, "the call did not raise"
    return raised[0]


def test_a_database_that_does_not_exist_is_refused_not_an_outage(
    database_url: str, prefix: str
) -> None:
    missing = f"venturi_no_such_db_{secrets.token_hex(3)}"
    backend = PostgresBackend(make_conninfo(database_url, dbname=missing), prefix=prefix)
    try:
        with pytest.raises(DatabaseRefused, match=f'database "{missing}" does not exist'):
            backend.check_schema()
        with pytest.raises(DatabaseRefused):
            backend.stats()  # through the pool too, not only the direct session
    finally:
        backend.close()


def test_a_role_that_does_not_exist_is_refused(database_url: str, prefix: str) -> None:
    url = make_conninfo(database_url, user=f"venturi_nobody_{secrets.token_hex(3)}")
    backend = PostgresBackend(url, prefix=prefix)
    try:
        with pytest.raises(DatabaseRefused, match="does not exist"):
            backend.check_schema()
    finally:
        backend.close()


def test_a_server_that_does_not_answer_is_an_outage_not_a_refusal(prefix: str) -> None:
    backend = PostgresBackend("postgresql://postgres@127.0.0.1:1/x", prefix=prefix)
    try:
        with pytest.raises(BackendUnavailable) as raised:
            backend.check_schema()
        assert not isinstance(raised.value, DatabaseRefused)
    finally:
        backend.close()


def test_an_outage_at_connect_names_the_host_and_port_and_the_reason_in_one_line(
    prefix: str,
) -> None:
    backend = PostgresBackend(REFUSED, prefix=prefix)
    try:
        with pytest.raises(BackendUnavailable) as raised:
            backend.check_schema()
        assert str(raised.value) == (
            "database unavailable: cannot reach 127.0.0.1:1 (connection refused)"
        )
    finally:
        backend.close()


def test_the_first_pooled_call_to_a_refused_port_says_why_without_waiting_the_pool_timeout(
    prefix: str,
) -> None:
    backend = PostgresBackend(REFUSED, prefix=prefix, connect_timeout=LONG_CONNECT_TIMEOUT)
    try:
        for call in (backend.stats, backend.stats):  # the second too: the pool never served
            error = raised_within(call, AT_ONCE_BOUND)
            assert isinstance(error, BackendUnavailable), repr(error)
            assert not isinstance(error, DatabaseRefused)
            assert "cannot reach 127.0.0.1:1 (connection refused)" in str(error)
    finally:
        backend.close()


@pytest.mark.slow
def test_a_pooled_call_to_a_host_that_never_answers_fails_within_one_connect_timeout(
    prefix: str, silent_port: int
) -> None:
    # The pool's wait and a direct attempt after it used to take a timeout each.
    connect_timeout = 8.0
    url = f"postgresql://postgres@127.0.0.1:{silent_port}/x"
    backend = PostgresBackend(url, prefix=prefix, connect_timeout=connect_timeout)
    try:
        error = raised_within(backend.stats, 2 * connect_timeout - 2)
        assert isinstance(error, BackendUnavailable), repr(error)
        assert f"cannot reach 127.0.0.1:{silent_port} (no answer within 8 s)" in str(error)
    finally:
        backend.close()


def test_the_pools_reconnect_attempts_are_no_warnings_but_other_programs_pools_still_warn(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="psycopg.pool")
    backend = PostgresBackend(REFUSED, prefix=prefix)
    other = ConnectionPool(REFUSED, min_size=1, open=False, name="someone-elses-pool")
    try:
        with pytest.raises(BackendUnavailable):
            backend.stats()
        other.open(wait=False)

        def attempts(pool_name: str, level: int) -> list[logging.LogRecord]:
            return [
                record
                for record in caplog.records
                if record.name == "psycopg.pool"
                and record.levelno == level
                and "error connecting in" in record.getMessage()
                and repr(pool_name) in record.getMessage()
            ]

        own = f"venturi-{prefix}"
        # The pool goes on retrying in the background: seen at DEBUG, the logger's level.
        wait_until(lambda: len(attempts(own, logging.DEBUG)) >= 2, timeout=30)
        wait_until(lambda: attempts("someone-elses-pool", logging.WARNING), timeout=30)
        assert [
            record.getMessage()
            for record in caplog.records
            if record.name == "psycopg.pool"
            and record.levelno >= logging.WARNING
            and "venturi-" in record.getMessage()
        ] == []
    finally:
        other.close()
        backend.close()


def test_without_debug_on_the_driver_logger_the_pools_attempts_are_not_logged_at_all(
    prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="psycopg.pool")
    other = ConnectionPool(REFUSED, min_size=1, open=False, name="someone-elses-pool")
    backend = PostgresBackend(REFUSED, prefix=prefix)
    try:
        with pytest.raises(BackendUnavailable):
            backend.stats()
        other.open(wait=False)
        # venturi's pool failed its first attempt before the other pool opened.
        wait_until(
            lambda: sum("someone-elses-pool" in r.getMessage() for r in caplog.records) >= 2,
            timeout=30,
        )
        assert [r.getMessage() for r in caplog.records if "venturi-" in r.getMessage()] == []
    finally:
        other.close()
        backend.close()
