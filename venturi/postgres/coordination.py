"""The Coordination role on PostgreSQL: the clock, wake-ups, the next due job, leadership.

Wake-ups are LISTEN/NOTIFY on a session of their own (a polling stand-in
behind a pooler without a direct URL); leadership is an advisory lock held by
a session (or a transaction, behind such a pooler; ADR 0123, 0131).
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta

import psycopg

from venturi.backend import Listener
from venturi.errors import BackendUnavailable
from venturi.postgres.driver_errors import translated_errors
from venturi.postgres.leadership import PostgresLeadership, leader_of_session, leader_session_name
from venturi.postgres.listener import PollingListener, PostgresListener
from venturi.postgres.sessions import Connection, connect
from venturi.postgres.store import Store
from venturi.types import Leader

__all__ = ["CoordinationVerbs"]


class CoordinationVerbs(Store):
    """``Coordination``'s verbs (venturi/backend/)."""

    def time_until_visible(self, kinds: Collection[str]) -> timedelta | None:
        if not kinds:
            return None
        row = self._run_bounded(
            lambda conn: self._queries.time_until_visible.one(conn, kinds=list(kinds))
        )
        return row["wait"] if row is not None else None

    def now(self) -> datetime:
        row = self._run(self._queries.database_now.one)
        assert row is not None
        now: datetime = row["now"]
        return now

    def listen(self) -> Listener:
        url = self._session_url
        if url is None:
            return PollingListener()
        return PostgresListener(url, self._channel, self._connect_timeout)

    def try_lead(self, role: str) -> PostgresLeadership | None:
        lock_name = self._prefix.lock_name(f"lead:{role}")
        url = self._session_url
        # The session names its holder, for ``leader`` to read (ADR 0131).
        holder = leader_session_name(role)
        with translated_errors():
            if url is None:
                # No session to hold a session lock: a transaction held open pins one
                # server session behind the pooler for as long as the role (ADR 0123).
                conn = connect(self._url, self._connect_timeout, application_name=holder)
                conn.autocommit = False
                try_lock = self._queries.try_advisory_xact_lock
            else:
                conn = connect(url, self._connect_timeout, application_name=holder)
                try_lock = self._queries.try_advisory_lock
            try:
                with self._watchdog.bounded(conn):
                    row = try_lock.one(conn, lock_name=lock_name)
            except (psycopg.Error, BackendUnavailable):
                conn.close()
                raise
        if row is None or not row["acquired"]:
            conn.close()
            return None
        if url is None:
            return PostgresLeadership(conn, self._queries, _rollback, self._watchdog)
        return PostgresLeadership(
            conn,
            self._queries,
            lambda held: self._queries.advisory_unlock.exec(held, lock_name=lock_name),
            self._watchdog,
        )

    def leader(self, role: str) -> Leader | None:
        lock_name = self._prefix.lock_name(f"lead:{role}")
        row = self._run(lambda conn: self._queries.leader.one(conn, lock_name=lock_name))
        if row is None:
            return None
        return Leader(
            role=role,
            holder=leader_of_session(role, row["application_name"]),
            since=row["since"],
            session_pid=row["session_pid"],
        )


def _rollback(conn: Connection) -> None:
    conn.rollback()


