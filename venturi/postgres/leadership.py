"""A leadership session: the advisory lock a role's holder keeps, and the name it goes by.

The lock is session state, so it lives on a connection of its own outside the
pools (ADR 0100); the session's ``application_name`` says which process holds
the role (ADR 0131).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable

import psycopg

from venturi.errors import BackendUnavailable
from venturi.postgres.queries import Queries
from venturi.postgres.sessions import SESSIONS_LOGGER, Connection
from venturi.postgres.watchdog import ReplyWatchdog

__all__ = [
    "LEADER_SESSION",
    "MAX_APPLICATION_NAME",
    "PostgresLeadership",
    "leader_of_session",
    "leader_session_name",
]

logger = logging.getLogger(SESSIONS_LOGGER)

#: How a leadership session names itself: this text, the role, a space, then its holder.
LEADER_SESSION = "venturi "
#: PostgreSQL keeps the first 63 bytes of an application_name (NAMEDATALEN - 1).
MAX_APPLICATION_NAME = 63


def leader_session_name(role: str) -> str:
    """The ``application_name`` of a leadership session of this process: ``venturi
    <role> <host>:<pid>``, the ``host:pid`` a worker's claims carry (ADR 19), cut to
    what the server keeps (a long host name loses its end, never the pid)."""
    host, pid = socket.gethostname(), str(os.getpid())
    room = MAX_APPLICATION_NAME - len(f"{LEADER_SESSION}{role} :{pid}".encode())
    host = host.encode()[: max(room, 0)].decode(errors="ignore")
    return f"{LEADER_SESSION}{role} {host}:{pid}"


def leader_of_session(role: str, application_name: str | None) -> str | None:
    """The holder a leadership session's name gives (``leader_session_name``), if any."""
    marker = f"{LEADER_SESSION}{role} "
    if not application_name or not application_name.startswith(marker):
        return None
    return application_name[len(marker) :] or None


class PostgresLeadership:
    """An advisory lock held by a connection of its own, for as long as it lives.

    Two shapes (ADR 0123): a session lock on a direct connection, given up by
    ``advisory_unlock``; or, behind a transaction-mode pooler without a direct
    URL, a transaction lock in a transaction kept open, which pins one server
    session to this connection until the rollback that gives it up. Its
    ``is_held`` ping waits at most ``reply_timeout`` for the reply.
    """

    def __init__(
        self,
        conn: Connection,
        queries: Queries,
        give_up: Callable[[Connection], object],
        watchdog: ReplyWatchdog,
    ) -> None:
        self._conn = conn
        self._queries = queries
        self._give_up = give_up
        self._watchdog = watchdog

    def is_held(self) -> bool:
        try:
            with self._watchdog.bounded(self._conn):
                self._queries.ping.one(self._conn)
        except (psycopg.Error, BackendUnavailable):
            return False
        return True

    def release(self) -> None:
        try:
            if not self._conn.closed:
                self._give_up(self._conn)
        except psycopg.Error:
            logger.debug("could not give the role up; closing the connection does")
        finally:
            self._conn.close()
