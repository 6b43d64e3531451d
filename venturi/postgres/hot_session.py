"""The last session a pool got back, kept aside for the next checkout (ADR 0132).

psycopg_pool hands out its idle sessions first in, first out, so once a burst
has opened several, one-at-a-time statements rotate through all of them, each
server process cold, and the pool's own checkout costs about as much again as
the hot path (the figures: bench/README.md). The hot session goes back to the
pool when a checkout is waiting for one, and after ``HOT_FOR`` seconds out of
it, so the pool's lifetime and idle limits still apply to every session.

The hot session's statement cursor and a look at its socket are made once
(``WarmSession``), so that a one-statement call such as ``.delay()`` takes the
session, looks for unread input and executes without a new cursor, poller or
checkout step (ADR 0143).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Generic, NamedTuple, TypeVar

import psycopg

from venturi.postgres.sessions import AsyncConnection, Connection, input_poll

__all__ = ["HOT_FOR", "HotSession", "WarmSession"]

#: Longest a session stays hot, out of its pool, before it goes back (ADR 0132).
HOT_FOR = 1.0

#: An idle session's libpq status; read from ``pgconn`` directly, as ``conn.info`` makes
#: a new ``ConnectionInfo`` at each read (journal, section 16).
_IDLE = psycopg.pq.TransactionStatus.IDLE

C = TypeVar("C", Connection, AsyncConnection)


class WarmSession(NamedTuple, Generic[C]):
    """A session with its statement cursor and a zero-timeout look at its socket:
    ``poll(0)`` is truthy when the socket has unread input (``sessions.input_poll``)."""

    conn: C
    cursor: Any
    poll: Callable[[int], object]


class HotSession(Generic[C]):
    """The hot session and its ``WarmSession``. Bookkeeping only: the sync pool calls it
    under its lock, the async one from its loop."""

    def __init__(self) -> None:
        self.hot: C | None = None
        self._taken_at: dict[C, float] = {}
        self.waiting = 0
        #: The cursor and socket look of the last session ``cursor_of`` served.
        self._warm: WarmSession[C] | None = None

    def cursor_of(self, conn: C) -> Any:
        """A cursor of ``conn``, the caller's for as long as it holds ``conn``: the one
        made last time when ``conn`` is the session it was made on, else a new one
        (remembered instead). Safe without the lock: each session has one holder."""
        warm = self._warm
        if warm is not None and warm.conn is conn:
            return warm.cursor
        cursor = conn.cursor()
        self._warm = WarmSession(conn, cursor, input_poll(conn.fileno()))
        return cursor

    def take_warm(self) -> WarmSession[C] | None:
        """The hot session with its cursor and look at its socket, when ``cursor_of``
        made them for it; else None, and the hot session stays (the caller takes the
        general path). A hot session is open and idle: it was when given back
        (``keep``), and only its holder or ``clear`` could change that."""
        warm = self._warm
        if warm is None or warm.conn is not self.hot:
            return None
        self.hot = None
        return warm

    def take(self) -> C | None:
        """The hot session, or None, and then the caller is counted as waiting for the pool."""
        hot, self.hot = self.hot, None
        if hot is None:
            self.waiting += 1
        return hot

    def got(self, conn: C | None) -> None:
        """The pool's checkout ended (``conn``, or None when it failed)."""
        self.waiting -= 1
        if conn is not None:
            self._taken_at[conn] = time.monotonic()

    def keep(self, conn: C) -> bool:
        """Keep ``conn`` hot (True), or forget it: the caller returns it to the pool."""
        if (
            self.hot is None
            and not self.waiting
            and not conn.closed
            and conn.pgconn.transaction_status == _IDLE
            and time.monotonic() - self._taken_at.get(conn, 0.0) < HOT_FOR
        ):
            self.hot = conn
            return True
        self.forget(conn)
        return False

    def forget(self, conn: C) -> None:
        """``conn`` goes back to the pool (closed, when its session ended)."""
        self._taken_at.pop(conn, None)
        warm = self._warm
        if warm is not None and warm.conn is conn:
            self._warm = None

    def clear(self) -> C | None:
        """The hot session, forgotten: the caller returns it before closing the pool."""
        hot, self.hot = self.hot, None
        if hot is not None:
            self.forget(hot)
        return hot
