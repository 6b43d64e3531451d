"""The health checks as routes of the in-server integrations: ``contrib.asgi.health_app``
mounted in Starlette, ``contrib.flask.health_blueprint`` registered on Flask (ADR 0136).

Both answer as ``venturi worker --health-port`` does: ``/healthz`` 200 naming
the running loops (a worker started in the test process), ``/readyz`` 200 on a
migrated prefix and 503 with the start check's one line on an unmigrated one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import flask
import pytest
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

import venturi
from venturi.contrib.asgi import health_app
from venturi.contrib.flask import health_blueprint
from venturi.worker import Worker

Get = Callable[[str], tuple[int, str]]


def asgi_client(app: venturi.App) -> Get:
    client = TestClient(Starlette(routes=[Mount("/venturi", health_app(app))]))

    def get(path: str) -> tuple[int, str]:
        response = client.get(path)
        return response.status_code, response.text

    return get


def flask_client(app: venturi.App) -> Get:
    web = flask.Flask(__name__)
    web.register_blueprint(health_blueprint(app), url_prefix="/venturi")
    client = web.test_client()

    def get(path: str) -> tuple[int, str]:
        response = client.get(path)
        return response.status_code, response.get_data(as_text=True)

    return get


CLIENTS = [pytest.param(asgi_client, id="asgi"), pytest.param(flask_client, id="flask")]


@pytest.fixture
def running_worker(
    app: venturi.App, start_worker: Callable[..., Worker]
) -> Iterator[Worker]:
    @app.task(kind="health.job")
    def job() -> None: ...

    yield start_worker(concurrency=1)


@pytest.mark.parametrize("client", CLIENTS)
def test_the_routes_answer_like_the_health_port(
    app: venturi.App, running_worker: Worker, client: Callable[[venturi.App], Get]
) -> None:
    get = client(app)

    status, body = get("/venturi/healthz")
    assert status == 200 and "claim" in body, body
    status, body = get("/venturi/readyz")
    assert status == 200 and body.startswith("ok: database "), body
    assert get("/venturi/other")[0] == 404


@pytest.mark.parametrize("client", CLIENTS)
def test_readyz_is_503_with_one_line_on_an_unmigrated_prefix(
    database_url: str, client: Callable[[venturi.App], Get]
) -> None:
    unmigrated = venturi.App(database_url, prefix="h_routes_unmigrated", set_as_current=False)
    try:
        status, body = client(unmigrated)("/venturi/readyz")
    finally:
        unmigrated.close()
    assert status == 503, body
    assert body.startswith("unavailable: ") and body.count("\n") == 1, body
    assert "venturi migrate" in body


def test_the_asgi_app_refuses_other_methods(app: venturi.App) -> None:
    client = TestClient(health_app(app))
    assert client.post("/healthz").status_code == 405
    assert client.head("/healthz").status_code == 200
