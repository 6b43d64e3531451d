"""The claim loop's idle wait (ADR 20, 0132): on the listener itself, ended by an
enqueue's NOTIFY or by ``wake()`` from another thread, and on the wake-up alone
while the listener cannot connect."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator

import pytest
from support import TcpProxy

import venturi
from venturi.postgres import PostgresBackend
from venturi.runtime.waiting import Waiter


@pytest.fixture
def backend(database_url: str, prefix: str) -> Iterator[PostgresBackend]:
    backend = PostgresBackend(database_url, prefix=prefix)
    yield backend
    backend.close()


def listening(backend: PostgresBackend) -> Waiter:
    """A waiter subscribed: its first wait connects, LISTENs and returns at once."""
    waiter = Waiter(backend, poll_interval=30)
    waiter.arm()
    assert waiter.wait(10) is True  # new: the wake-ups sent before it were missed
    return waiter


def after(seconds: float, action: Callable[[], object]) -> None:
    threading.Timer(seconds, action).start()


def timed_wait(waiter: Waiter, timeout: float) -> tuple[bool, float]:
    started = time.monotonic()
    woken = waiter.wait(timeout)
    return woken, time.monotonic() - started


def assert_ended_by(waiter: Waiter, action: Callable[[], object]) -> None:
    """``action`` 0.2 s into a 10 s wait ends it then, as a wake-up."""
    try:
        waiter.arm()
        after(0.2, action)
        woken, waited = timed_wait(waiter, 10)
    finally:
        waiter.close()
    assert woken is True
    assert 0.15 < waited < 2


def test_a_wake_from_another_thread_ends_a_wait_on_the_listener_at_once(
    backend: PostgresBackend,
) -> None:
    waiter = listening(backend)
    assert_ended_by(waiter, waiter.wake)


def test_an_enqueue_notification_ends_the_wait(
    backend: PostgresBackend, database_url: str, prefix: str
) -> None:
    app = venturi.App(database_url, prefix=prefix, set_as_current=False)

    @app.task(kind="waiter.probe")
    def probe() -> None: ...

    try:
        assert_ended_by(listening(backend), probe.delay)
    finally:
        app.close()


def test_a_wake_between_arm_and_wait_ends_the_wait_at_once(backend: PostgresBackend) -> None:
    waiter = listening(backend)
    try:
        waiter.arm()
        waiter.wake()
        woken, waited = timed_wait(waiter, 10)
    finally:
        waiter.close()
    assert woken is True
    assert waited < 1


def test_a_wait_that_nothing_ends_lasts_its_timeout_and_says_so(backend: PostgresBackend) -> None:
    waiter = listening(backend)
    try:
        waiter.wake()  # woken before the arm: cleared by it, so it does not count
        waiter.arm()
        woken, waited = timed_wait(waiter, 0.3)
    finally:
        waiter.close()
    assert woken is False
    assert waited >= 0.3


def test_an_interrupt_before_a_listener_wait_ends_that_wait(backend: PostgresBackend) -> None:
    listener = backend.listen()
    try:
        listener.wait(0)
        listener.interrupt()
        started = time.monotonic()
        assert listener.wait(10) is False
        assert time.monotonic() - started < 1
        assert listener.wait(0.2) is False  # the interrupt was used up
    finally:
        listener.close()


def test_without_its_listener_the_wait_is_on_the_wake_up_and_listens_again_once_it_can(
    database_url: str, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Notifications sent while the listener was away are lost: the wait that
    subscribes again returns at once, so the claim loop claims once more. The
    outage is said once as a warning, the return once (as a ServiceThread says them)."""
    caplog.set_level(logging.DEBUG, logger="venturi.runtime.waiting")
    proxy = TcpProxy.in_front_of(database_url)
    proxy.cut()
    backend = PostgresBackend(
        database_url,
        prefix=prefix,
        direct_url=proxy.url(database_url),
        transaction_pooling=False,
        connect_timeout=1,
    )
    waiter = Waiter(backend, poll_interval=30)
    try:
        waiter.arm()
        after(0.3, waiter.wake)
        woken, waited = timed_wait(waiter, 10)  # the subscription fails; the wake ends it
        assert woken is True
        assert waited < 3
        waiter.arm()
        assert timed_wait(waiter, 0.2)[0] is False  # still away (backoff), no wake
        proxy.restore()
        time.sleep(1.0)  # past the backoff
        waiter.arm()
        woken, waited = timed_wait(waiter, 10)
        assert woken is True  # subscribed again
        assert waited < 2
        said = [(r.levelno, r.getMessage()) for r in caplog.records]
        warned = [m for level, m in said if level == logging.WARNING]
        assert len(warned) == 1 and "database unreachable" in warned[0], said
        assert (logging.INFO, "listener: database reachable again") in said, said
    finally:
        waiter.close()
        backend.close()
        proxy.stop()
