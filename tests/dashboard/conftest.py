"""Fixtures of the dashboard tests: a real App on the module's prefix with tasks,
a client over the real dashboard, sign-in, and real servers in threads."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from dashboard_support import BASE, TOKEN, Served, sign_in
from starlette.testclient import TestClient

import venturi
from venturi.dashboard import create_app


@pytest.fixture
def tasks(app: venturi.App) -> dict[str, Any]:
    """Two tasks on the App (so their kinds are served) and one schedule."""

    @app.task(kind="mail.send")
    def send(to: str, subject: str = "hello") -> str:
        return to

    @app.task(kind="reports.nightly", schedule="0 3 * * *", timezone="Europe/Paris")
    def nightly() -> None:
        return None

    return {"send": send, "nightly": nightly}


@pytest.fixture
def client(app: venturi.App, tasks: dict[str, Any]) -> Iterator[TestClient]:
    """A dashboard whose reading is open (``public_read``): the page tests read without
    signing in, and sign in for changes. Reads behind the sign-in, the default with a
    token, are tested in test_dashboard_reading.py."""
    with TestClient(create_app(app, token=TOKEN, public_read=True), base_url=BASE) as test_client:
        yield test_client


@pytest.fixture
def signed_in(client: TestClient) -> str:
    return sign_in(client)


@pytest.fixture
def serve() -> Iterator[Callable[[Any], Served]]:
    started: list[Served] = []

    def start(asgi: Any) -> Served:
        served = Served(asgi)
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()
