"""The adapter's sessions in one import, for the backend: each part lives in a module of its own.

Pooled sessions run in autocommit and session state (LISTEN, leadership
locks) lives on dedicated connections outside the pools: ADR 0100 gives the
reasons. Behind a transaction-mode pooler (PgBouncer) pooled sessions are
not sessions at all, so they prepare nothing and set nothing, and the
dedicated connections go to the direct URL (ADR 0123). Every session carries
TCP keepalives, and worker statements wait a bounded time for their reply,
so a silent network partition ends in ``BackendUnavailable`` rather than in
a hang (ADR 0123). Every psycopg error that means "the database is not there"
leaves the adapter as ``BackendUnavailable``, or as ``DatabaseRefused`` when
the server answered and said no for good (ADR 0118); nothing psycopg-specific
crosses the Backend boundary.

Where each part lives: ``sessions`` (opening a session, keepalives, the claim
session's settings), ``pools`` (``Pool``, ``AsyncPool``), ``listener``
(LISTEN/NOTIFY, or polling), ``leadership`` (the role's advisory lock and its
session name), ``watchdog`` (bounded replies), ``driver_errors`` (the
translation).
"""

from __future__ import annotations

from venturi.postgres.driver_errors import reraise_translated, translated_errors
from venturi.postgres.leadership import (
    PostgresLeadership,
    leader_of_session,
    leader_session_name,
)
from venturi.postgres.listener import PollingListener, PostgresListener
from venturi.postgres.pools import AsyncPool, Pool
from venturi.postgres.sessions import (
    DEFAULT_CONNECT_TIMEOUT,
    AsyncConnection,
    Connection,
    configure_claim_session,
    connect,
    with_keepalives,
)
from venturi.postgres.watchdog import DEFAULT_REPLY_TIMEOUT, ReplyWatchdog

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_REPLY_TIMEOUT",
    "AsyncConnection",
    "AsyncPool",
    "Connection",
    "PollingListener",
    "Pool",
    "PostgresLeadership",
    "PostgresListener",
    "ReplyWatchdog",
    "configure_claim_session",
    "connect",
    "leader_of_session",
    "leader_session_name",
    "reraise_translated",
    "translated_errors",
    "with_keepalives",
]
