"""Real-PostgreSQL fixtures shared by every test.

The server is ``$VENTURI_TEST_DATABASE_URL``, else the local server on
127.0.0.1:5432 (database ``test``) when it answers, else the embedded server.
Each test module gets a fresh random prefix, migrated once; ``app`` empties
its tables before each test, so tests never see each other's rows.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import dict_row
from support import Database, empty_prefix, migrated_prefix

import venturi
from venturi.postgres.embedded import embedded_database_url
from venturi.worker import Worker

LOCAL_URL = "postgresql://postgres@127.0.0.1:5432/test"


def _answers(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2):
            return True
    except psycopg.OperationalError:
        return False


def pytest_report_header() -> str:
    """Which server the suite runs on, in pytest's header (never a password)."""
    url = os.environ.get("VENTURI_TEST_DATABASE_URL")
    if url:
        where = "$VENTURI_TEST_DATABASE_URL"
    elif _answers(LOCAL_URL):
        url, where = LOCAL_URL, "the local server"
    else:
        return "venturi tests database: the embedded server (nothing answers on 127.0.0.1:5432)"
    params = {k: v for k, v in conninfo_to_dict(url).items() if k != "password"}
    return f"venturi tests database: {make_conninfo(**params)} ({where})"


@pytest.fixture(scope="session")
def database_url() -> str:
    url = os.environ.get("VENTURI_TEST_DATABASE_URL")
    if url:
        return url
    if _answers(LOCAL_URL):
        return LOCAL_URL
    return embedded_database_url()


@pytest.fixture(scope="module")
def prefix(database_url: str) -> Iterator[str]:
    """A fresh, migrated prefix for this module; its tables are dropped afterwards."""
    with migrated_prefix(database_url) as value:
        yield value


@pytest.fixture
def app(database_url: str, prefix: str) -> Iterator[venturi.App]:
    """An App on this module's prefix with empty tables; the current App for ``@task``."""
    with psycopg.connect(database_url, autocommit=True) as conn:
        empty_prefix(conn, prefix)
    instance = venturi.App(database_url, prefix=prefix)
    yield instance
    instance.close()


@pytest.fixture
def db(database_url: str, prefix: str) -> Iterator[Database]:
    """Autocommit connection with ``{{prefix}}`` substituted in the SQL it runs."""
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        yield Database(conn, prefix)


@pytest.fixture
def start_worker(app: venturi.App) -> Iterator[Callable[..., Worker]]:
    """Starts Workers (on ``app`` unless another App is passed); each is stopped after the test.

    Defaults suited to tests: 4 handlers, a 1 s poll and 1 s recovery sweeps.
    """
    started: list[Worker] = []

    def start(target: venturi.App | None = None, **options: Any) -> Worker:
        options.setdefault("concurrency", 4)
        options.setdefault("poll_interval", 1.0)
        options.setdefault("recovery_interval", 1.0)
        worker = Worker(target or app, **options)
        worker.start()
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.stop(grace=5)
