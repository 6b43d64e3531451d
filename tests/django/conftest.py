"""Django for the tests in this folder: pytest-django on the test project's settings.

``django_settings`` (beside this file) is the project; pytest-django creates
its test database on the real server. ``queue`` migrates the project's
venturi prefix there once and empties its tables before each test.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_settings")

import django  # noqa: E402
from django.conf import settings  # noqa: E402

django.setup()


@pytest.fixture(scope="session")
def venturi_migrated(django_db_setup: None) -> Iterator[str]:
    """The prefix of the project's queue, migrated in the test database; the App's
    pool is closed before pytest-django drops that database."""
    from venturi.contrib.django import get_app, state

    app = get_app()
    app.migrate()
    yield app.prefix
    state.reset()


@pytest.fixture
def queue(venturi_migrated: str) -> Iterator[object]:
    """The project's App, its tables emptied."""
    from venturi.contrib.django import get_app

    app = get_app()
    app.backend  # noqa: B018 - built now, so that database_url is Django's
    url = app.database_url
    assert url is not None
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"TRUNCATE {venturi_migrated}_journal, {venturi_migrated}_jobs, "
            f"{venturi_migrated}_claim_limits, {venturi_migrated}_workers, "
            f"{venturi_migrated}_checkpoints, {venturi_migrated}_events"
        )
    yield app


@pytest.fixture
def worker_env(venturi_migrated: str) -> dict[str, str]:
    """Environment of a ``manage.py venturi`` process on the test's database and prefix."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "django_settings",
        "PYTHONPATH": os.pathsep.join([str(HERE), *sys.path]),
        "VENTURI_DJANGO_TEST_DB": settings.DATABASES["default"]["NAME"],
        "VENTURI_DJANGO_PREFIX": venturi_migrated,
    }
