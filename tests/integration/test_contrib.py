"""venturi.contrib: the ASGI lifespan and the Flask extension, in-process (the real
servers run in tests/acceptance/test_web_examples.py). Contrib modules import only
venturi's public API."""

from __future__ import annotations

import ast
import secrets
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import flask
import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient
from support import wait_until

import venturi
from venturi.contrib import flask as venturi_flask
from venturi.contrib.asgi import worker_lifespan
from venturi.errors import ConfigurationError

CONTRIB = Path(__file__).resolve().parents[2] / "venturi" / "contrib"
#: The public modules (STYLE); ``venturi.logs`` for its formatters and show_in_server,
#: ``venturi.health`` for the liveness and readiness checks (ADR 0136).
PUBLIC = {
    "venturi",
    "venturi.errors",
    "venturi.testing",
    "venturi.events",
    "venturi.logs",
    "venturi.health",
}


def test_contrib_modules_import_only_the_public_api() -> None:
    imported = {}
    for path in CONTRIB.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module:
                names = {node.module}
            elif isinstance(node, ast.Import):
                names = {alias.name for alias in node.names}
            else:
                continue
            internal = {
                n
                for n in names
                if n.split(".")[0] == "venturi"
                and n not in PUBLIC
                and not n.startswith("venturi.contrib")
            }
            if internal:
                imported[path.name] = sorted(internal)
    assert imported == {}


# -- ASGI ----------------------------------------------------------------------------


def test_the_lifespan_runs_a_worker_inside_the_apps_own_lifespan(app: venturi.App, db: Any) -> None:
    @app.task(kind="asgi.job")
    def job(n: int) -> int:
        return n

    events: list[str] = []

    @asynccontextmanager
    async def own(asgi_app: Starlette) -> AsyncIterator[dict[str, Any]]:
        events.append("own up")
        yield {"greeting": "hello"}
        events.append("own down")

    lifespan = worker_lifespan(app, lifespan=own, grace=5, close_app=False, poll_interval=1)

    async def enqueue(request: Request) -> JSONResponse:
        events.append(f"worker running: {lifespan.worker is not None}")
        ref = await job.adelay(int(request.query_params["n"]))
        return JSONResponse({"job_id": ref.id, "greeting": request.state.greeting})

    web = Starlette(routes=[Route("/jobs", enqueue, methods=["POST"])], lifespan=lifespan)
    with TestClient(web) as client:
        body = client.post("/jobs", params={"n": 7}).json()
        wait_until(lambda: app.job(body["job_id"]).job.status is venturi.Status.COMPLETED)

    assert body["greeting"] == "hello"
    assert events == ["own up", "worker running: True", "own down"]
    assert lifespan.worker is None
    assert app.job(body["job_id"]).journal[-1].note == "7"


def test_the_lifespan_closes_the_app_after_the_worker_stopped(
    database_url: str, prefix: str, app: venturi.App
) -> None:
    name = f"venturi_{secrets.token_hex(4)}"
    owned = venturi.App(
        make_conninfo(database_url, application_name=name), prefix=prefix, set_as_current=False
    )

    def sessions() -> int:
        with psycopg.connect(database_url) as conn:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (name,)
            ).fetchone()
        return int(row[0]) if row else 0

    with TestClient(Starlette(lifespan=worker_lifespan(owned, grace=1, poll_interval=1))):
        owned.stats()
        assert sessions() > 0

    wait_until(lambda: sessions() == 0)


# -- Flask ---------------------------------------------------------------------------


def flask_app(app: venturi.App, database_url: str) -> flask.Flask:
    web = flask.Flask(__name__)

    def request_db() -> psycopg.Connection[Any]:
        if "db" not in flask.g:
            flask.g.db = psycopg.connect(database_url)
        conn: psycopg.Connection[Any] = flask.g.db
        return conn

    venturi_flask.init_app(web, app, connection=request_db, start_worker=False)

    @app.task(kind="flask.job")
    def job(n: int) -> None: ...

    @web.post("/jobs")
    def enqueue() -> dict[str, Any]:
        n = int(flask.request.args["n"])
        ref = venturi_flask.delay(job, n)
        refs = venturi_flask.delay_many(job, [{"n": n + 1}])
        if flask.request.args.get("commit") == "yes":
            request_db().commit()
        request_db().close()
        return {"job_ids": [ref.id, *(r.id for r in refs)]}

    return web


@pytest.mark.parametrize("commit", ["yes", "no"])
def test_flask_enqueues_inside_the_requests_transaction(
    app: venturi.App, database_url: str, db: Any, commit: str
) -> None:
    client = flask_app(app, database_url).test_client()

    ids = client.post("/jobs", query_string={"n": 1, "commit": commit}).get_json()["job_ids"]

    assert len(ids) == 2
    assert {row["id"] for row in db.jobs()} == (set(ids) if commit == "yes" else set())


def test_flask_enqueue_without_a_connection_getter_says_how_to_configure_it(
    app: venturi.App,
) -> None:
    web = flask.Flask(__name__)
    venturi_flask.init_app(web, app, start_worker=False)

    @app.task(kind="flask.job")
    def job() -> None: ...

    with web.test_request_context(), pytest.raises(ConfigurationError, match="connection="):
        venturi_flask.delay(job)


def test_flask_starts_the_worker_at_the_first_request_and_stop_ends_it(
    app: venturi.App, database_url: str
) -> None:
    web = flask.Flask(__name__)
    sigterm = signal.getsignal(signal.SIGTERM)
    try:
        extension = venturi_flask.init_app(web, app, grace=1, poll_interval=1)
        assert signal.getsignal(signal.SIGTERM) is not sigterm  # stops the worker first

        @web.get("/")
        def index() -> str:
            return "ok"

        assert extension.worker is None
        client = web.test_client()
        client.get("/")
        worker = extension.worker
        assert worker is not None
        client.get("/")
        assert extension.worker is worker  # once per process
        extension.stop()
        assert extension.worker is None
    finally:
        signal.signal(signal.SIGTERM, sigterm)
