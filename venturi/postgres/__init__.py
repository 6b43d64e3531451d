"""The PostgreSQL adapter: the only package that imports psycopg.

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

The backend itself is composed of one mixin per storage role (``store`` holds
what they share; ``enqueue``, ``claims``, ``leases``, ``coordination``,
``operations``, ``workers``, ``results``, ``workflows``), over the named
statements of ``queries.sql`` (``queries``).
"""

from venturi.postgres.backend import PostgresBackend

__all__ = ["PostgresBackend"]
