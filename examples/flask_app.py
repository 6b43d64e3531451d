"""Flask with a venturi worker in the same process, and enqueue in the request's transaction.

    VENTURI_DATABASE_URL=postgresql://localhost/mydb \\
        flask --app examples.flask_app run --port 8000
    curl -X POST 'http://127.0.0.1:8000/orders?item=book'
    curl 'http://127.0.0.1:8000/jobs/<job_id>'

Each request that needs the database opens one psycopg connection (``g.db``),
committed after the view succeeds and rolled back otherwise. ``POST /orders``
inserts an order and enqueues its confirmation with
``venturi_flask.delay(confirm_order, order_id)``, which passes ``g.db`` as
``connection=``: the job exists exactly when the order does. ``POST /naps``
enqueues a job that sleeps (to watch a graceful stop release it).

``venturi_flask.init_app`` runs the worker's threads in the server process
(started at its first request) and stops them at exit and on SIGTERM: running
jobs get ``GRACE`` seconds, the others go back to ``pending`` (``released``).
The database is $VENTURI_DATABASE_URL, else the embedded server
(``venturi[embedded]``); the application's own connections go to the one the
App resolved, ``app.database_url``.
"""

from __future__ import annotations

import threading
from typing import Any

import psycopg
from flask import Flask, Response, g, request

import venturi
from venturi.contrib import flask as venturi_flask
from venturi.errors import JobNotFound

#: Seconds running jobs get to finish at shutdown (short, for the demo and its test).
GRACE = 3.0

app = venturi.App()

ORDERS_TABLE = """
CREATE TABLE IF NOT EXISTS example_orders (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    item text NOT NULL,
    confirmed_at timestamptz
)
"""


@app.task(kind="orders.confirm")
def confirm_order(order_id: int) -> str:
    with psycopg.connect(app.database_url, autocommit=True) as conn:
        conn.execute("UPDATE example_orders SET confirmed_at = now() WHERE id = %s", (order_id,))
    return f"order {order_id} confirmed"


@app.task(kind="example.nap")
def nap(seconds: float) -> str:
    threading.Event().wait(seconds)
    return f"slept {seconds}s"


def request_db() -> psycopg.Connection[Any]:
    """The request's connection, opened on first use; one transaction per request."""
    if "db" not in g:
        g.db = psycopg.connect(app.database_url)
    conn: psycopg.Connection[Any] = g.db
    return conn


def create_app() -> Flask:
    app.migrate()
    with psycopg.connect(app.database_url, autocommit=True) as conn:
        conn.execute(ORDERS_TABLE)
    web = Flask(__name__)
    venturi_flask.init_app(web, app, connection=request_db, grace=GRACE, concurrency=4)

    @web.after_request
    def commit(response: Response) -> Response:
        if "db" in g and response.status_code < 400:
            g.db.commit()
        return response

    @web.teardown_request
    def close_db(error: BaseException | None) -> None:
        conn = g.pop("db", None)
        if conn is not None:
            conn.close()  # rolls back whatever was not committed

    @web.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok"}

    @web.post("/orders")
    def create_order() -> tuple[dict[str, Any], int]:
        item = request.args.get("item", "something")
        row = (
            request_db()
            .execute("INSERT INTO example_orders (item) VALUES (%s) RETURNING id", (item,))
            .fetchone()
        )
        assert row is not None
        ref = venturi_flask.delay(confirm_order, row[0])
        return {"order_id": row[0], "job_id": ref.id}, 201

    @web.post("/naps")
    def create_nap() -> tuple[dict[str, Any], int]:
        ref = nap.delay(float(request.args.get("seconds", "60")))
        return {"job_id": ref.id}, 201

    @web.get("/jobs/<job_id>")
    def show_job(job_id: str) -> tuple[dict[str, Any], int]:
        try:
            detail = app.job(job_id)
        except JobNotFound:
            return {"error": "no such job"}, 404
        journal = [entry.outcome.value for entry in detail.journal]
        return {"status": detail.job.status.value, "journal": journal}, 200

    return web
