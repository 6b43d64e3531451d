"""How a worker hears of new jobs: LISTEN on a dedicated session, or polling without one.

LISTEN is session state, so it lives on a connection of its own outside the
pools (ADR 0100); behind a transaction-mode pooler without a direct URL
there is no session to listen on, and the poll interval is the latency of a
new job (ADR 0123).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading

import psycopg

from venturi.errors import BackendUnavailable
from venturi.postgres.driver_errors import translated_errors
from venturi.postgres.sessions import SESSIONS_LOGGER, Connection, connect, ready

__all__ = ["PollingListener", "PostgresListener"]

logger = logging.getLogger(SESSIONS_LOGGER)


class PostgresListener:
    """LISTEN on the prefix's wake-up channel, on a dedicated connection.

    ``wait`` polls the session's socket and the read end of a socket pair of
    its own, so ``interrupt`` (a byte on the other end, from any thread) ends
    it at once: the claim loop waits here itself (ADR 0132).
    """

    def __init__(self, url: str, channel: str, connect_timeout: float) -> None:
        self._url = url
        self._channel = channel
        self._connect_timeout = connect_timeout
        self._conn: Connection | None = None
        self._interrupts: tuple[socket.socket, socket.socket] | None = None

    def _connection(self) -> Connection:
        if self._conn is None or self._conn.closed:
            conn = connect(self._url, self._connect_timeout)
            conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(self._channel)))
            self._conn = conn
        if self._interrupts is None:
            pair = socket.socketpair()
            for end in pair:
                end.setblocking(False)
            self._interrupts = pair
        return self._conn

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` s; False on timeout or ``interrupt``. Reconnects on
        the next call after a broken connection."""
        try:
            with translated_errors():
                conn = self._connection()
                assert self._interrupts is not None  # made with the connection
                interrupts = self._interrupts[0]
                ready_fds = ready([conn.fileno(), interrupts.fileno()], timeout)
                if interrupts.fileno() in ready_fds:
                    _drain(interrupts)
                if conn.fileno() not in ready_fds:
                    return False
                # Input on an idle LISTEN session: a notification, or the server's
                # goodbye, which notifies() raises as an error.
                return any(True for _ in conn.notifies(timeout=0, stop_after=1))
        except BackendUnavailable:
            self.close()
            raise

    def interrupt(self) -> None:
        pair = self._interrupts
        if pair is None:
            return
        # Full: an interrupt is pending anyway; closed meanwhile: nothing to end.
        with contextlib.suppress(OSError):
            pair[1].send(b"\0")

    def close(self) -> None:
        pair, self._interrupts = self._interrupts, None
        if pair is not None:
            for end in pair:
                end.close()
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                conn.close()
            except psycopg.Error:
                logger.debug("error closing listener connection", exc_info=True)


def _drain(interrupts: socket.socket) -> None:
    # Until nothing is left (BlockingIOError); closed meanwhile, nothing to read.
    with contextlib.suppress(OSError):
        while interrupts.recv(4096):
            pass


class PollingListener:
    """The listener behind a transaction-mode pooler without a direct URL: LISTEN
    needs a session, so there are no wake-ups and the worker's poll interval is
    the latency of a new job (ADR 0123)."""

    def __init__(self) -> None:
        self._interrupted = threading.Event()
        self._is_closed = False

    def wait(self, timeout: float) -> bool:
        if not self._is_closed:
            self._interrupted.wait(max(0.0, timeout))
            self._interrupted.clear()
        return False

    def interrupt(self) -> None:
        self._interrupted.set()

    def close(self) -> None:
        self._is_closed = True
        self._interrupted.set()
