"""A refused login is told apart from an outage (ADR 0118).

These build the adapter on *other* servers or databases than the test one
(one that does not exist, a role that does not exist, a port nobody listens
on), so they run on the direct adapter only: the conformance suite's
pooled case routes the test server's database through its PgBouncer.
"""

from __future__ import annotations

import secrets

import pytest
from psycopg.conninfo import make_conninfo

from venturi.errors import BackendUnavailable, DatabaseRefused
from venturi.postgres import PostgresBackend


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
