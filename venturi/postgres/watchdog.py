"""Worker statements wait a bounded time for their reply: the reply watchdog.

A silent network partition, or a peer that acknowledges bytes and never
answers, ends in ``BackendUnavailable`` rather than in a hang (ADR 0123).
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import psycopg

from venturi.errors import BackendUnavailable
from venturi.postgres.sessions import SESSIONS_LOGGER, Connection

__all__ = ["DEFAULT_REPLY_TIMEOUT", "ReplyWatchdog"]

logger = logging.getLogger(SESSIONS_LOGGER)

#: How long a worker statement waits for its reply before its session is abandoned
#: (``BackendUnavailable``): a peer that acknowledges bytes and never answers
#: (a hung middlebox, a frozen pooler) is invisible to TCP (ADR 0123).
DEFAULT_REPLY_TIMEOUT = 30.0


@dataclass
class _Watch:
    conn: Connection
    deadline: float
    is_abandoned: bool = False


class ReplyWatchdog:
    """Abandons a session whose statement gets no reply within ``reply_timeout``.

    TCP keepalives only probe idle sockets, and a peer that acknowledges the
    bytes but never answers (a proxy or pooler that stopped forwarding) passes
    every probe: without this, a worker's renewal or claim would wait forever
    and never rejoin. One thread per backend, started on first use, watches the
    sessions inside ``bounded`` blocks; an overdue one has its socket shut down,
    which wakes the blocked statement with an error, and the block raises
    ``BackendUnavailable`` saying so. The pool then drops the session and
    connects anew. Registering costs a lock and a dict entry, no round trip,
    and wakes the thread only when the new deadline comes before the one it
    sleeps until: every block has the same timeout, so that is only when it
    sleeps with nothing to watch (waking it for every statement would cost a
    thread switch each: ADR 0132).
    """

    def __init__(self, reply_timeout: float, *, name: str) -> None:
        self.reply_timeout = reply_timeout
        self._name = name
        self._changed = threading.Condition()
        self._watches: dict[int, _Watch] = {}
        self._thread: threading.Thread | None = None
        self._is_stopping = False
        #: When the watching thread looks next (infinity: it waits for a first watch).
        self._looks_at = math.inf

    @contextmanager
    def bounded(self, conn: Connection) -> Iterator[None]:
        watch = _Watch(conn, time.monotonic() + self.reply_timeout)
        key = id(watch)
        with self._changed:
            self._watches[key] = watch
            if self._thread is None and not self._is_stopping:
                self._thread = threading.Thread(target=self._watch, name=self._name, daemon=True)
                self._thread.start()
            if watch.deadline < self._looks_at:
                self._looks_at = watch.deadline
                self._changed.notify()
        try:
            yield
        except psycopg.OperationalError as exc:
            if watch.is_abandoned:
                raise BackendUnavailable(
                    f"database unavailable: no reply within {self.reply_timeout}s; "
                    "the session was abandoned"
                ) from exc
            raise
        finally:
            with self._changed:
                del self._watches[key]

    def _watch(self) -> None:
        with self._changed:
            while not self._is_stopping:
                now = time.monotonic()
                overdue = [
                    w for w in self._watches.values() if w.deadline <= now and not w.is_abandoned
                ]
                for watch in overdue:
                    watch.is_abandoned = True
                    logger.warning(
                        "no reply from the database within %.1fs; abandoning the session",
                        self.reply_timeout,
                    )
                    _shut_down(watch.conn)
                pending = [w.deadline for w in self._watches.values() if not w.is_abandoned]
                self._looks_at = min(pending, default=math.inf)
                self._changed.wait(self._looks_at - now if pending else None)

    def stop(self) -> None:
        """End the watching thread; idempotent. Blocks entered later go unwatched."""
        with self._changed:
            self._is_stopping = True
            thread, self._thread = self._thread, None
            self._changed.notify()
        if thread is not None:
            thread.join(timeout=1.0)


def _shut_down(conn: Connection) -> None:
    """Shut the session's socket down under the thread blocked on it: closing the
    descriptor would not wake that thread, a shutdown does (it reads end of file)."""
    try:
        sock = socket.socket(fileno=os.dup(conn.fileno()))
    except (OSError, psycopg.Error):
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        logger.debug("shutting an abandoned session's socket down failed", exc_info=True)
    finally:
        sock.close()
