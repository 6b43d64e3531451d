"""``App.database_url``: the URL the App connects to, for the application's own connections.

Each App here connects with a URL of its own ``application_name``, so the server's
list of sessions shows which URL the App's backend really used.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from psycopg.conninfo import make_conninfo
from support import Database

import venturi
from venturi.app import DATABASE_URL_ENV
from venturi.errors import ConfigurationError


def tagged(url: str) -> str:
    """``url`` with an ``application_name`` no other session has."""
    return make_conninfo(url, application_name=f"venturi-url-{secrets.token_hex(4)}")


def connects_with(app: venturi.App, db: Database, url: str) -> bool:
    """Whether ``app``'s backend holds a session opened with ``url`` (after one call)."""
    app.stats()
    name = url.rpartition("application_name=")[2]
    return bool(db.all("SELECT 1 FROM pg_stat_activity WHERE application_name = %s", (name,)))


@pytest.fixture
def url(database_url: str) -> str:
    return tagged(database_url)


MakeApp = Callable[..., venturi.App]


@pytest.fixture
def make_app(prefix: str) -> Iterator[MakeApp]:
    """Apps on this module's prefix, closed after the test."""
    apps: list[venturi.App] = []

    def make(database_url: str | None = None, **options: Any) -> venturi.App:
        app = venturi.App(database_url, prefix=prefix, set_as_current=False, **options)
        apps.append(app)
        return app

    yield make
    for app in apps:
        app.close()


def test_the_url_given_is_the_one_the_backend_connects_with(
    make_app: MakeApp, url: str, db: Database
) -> None:
    app = make_app(url)
    assert app.database_url == url
    assert connects_with(app, db, url)
    assert app.database_url == url


def test_without_a_url_it_is_the_environments(
    make_app: MakeApp, url: str, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATABASE_URL_ENV, url)
    app = make_app()
    assert app.database_url == url
    assert connects_with(app, db, url)


def test_the_first_read_resolves_it_and_the_backend_uses_that_one(
    make_app: MakeApp, database_url: str, db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, later = tagged(database_url), tagged(database_url)
    monkeypatch.setenv(DATABASE_URL_ENV, first)
    app = make_app()
    assert app.database_url == first
    monkeypatch.setenv(DATABASE_URL_ENV, later)
    assert app.database_url == first
    assert connects_with(app, db, first)
    assert not connects_with(app, db, later)


def test_override_changes_it_until_the_backend_exists(
    make_app: MakeApp, database_url: str, db: Database
) -> None:
    before, after = tagged(database_url), tagged(database_url)
    app = make_app(before)
    app.override(database_url=after)
    assert app.database_url == after
    assert connects_with(app, db, after)
    with pytest.raises(ConfigurationError):
        app.override(database_url=before)
    assert app.database_url == after


def test_it_is_read_only(make_app: MakeApp, url: str) -> None:
    app = make_app(url)
    with pytest.raises(AttributeError):
        app.database_url = "postgresql://elsewhere/db"  # type: ignore[misc]
    assert app.database_url == url


def test_an_app_built_on_a_backend_without_a_url_has_none(
    make_app: MakeApp, url: str
) -> None:
    backend = make_app(url).backend
    app = make_app(backend=backend)
    with pytest.raises(ConfigurationError, match="no URL"):
        _ = app.database_url
