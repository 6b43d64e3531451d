"""A worker inside a web server: jobs enqueued in the request's own transaction.

    python examples/in_web_server.py               # serve on http://127.0.0.1:8000
    curl -X POST 'http://127.0.0.1:8000/orders?item=book'
    python examples/in_web_server.py --self-test   # serve one request in-process, check, exit

``POST /orders`` inserts an order (a table of the application's own) and
enqueues its confirmation with ``connection=``, in one transaction: the job
exists exactly when the order does, never one without the other. The worker
runs as threads of this process, started with the server and stopped with it
(``Worker.start()`` / ``Worker.stop(grace)``); in production it is usually
its own process (``venturi worker --app examples.in_web_server:app``).

Only the standard library's ``wsgiref`` serves HTTP here; any WSGI or ASGI
server does the same in its startup and shutdown hooks. The database is
$VENTURI_DATABASE_URL, else the embedded server (``venturi[embedded]``); the
application's own connections go to the one the App resolved,
``app.database_url``.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
import urllib.request
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, make_server

import psycopg

import venturi

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


StartResponse = Callable[[str, list[tuple[str, str]]], Any]


def application(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
    """The WSGI app: ``POST /orders?item=...`` creates an order and its confirmation job."""
    if environ["REQUEST_METHOD"] != "POST" or environ["PATH_INFO"] != "/orders":
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"try POST /orders?item=book\n"]
    item = parse_qs(environ.get("QUERY_STRING", "")).get("item", ["something"])[0]
    with psycopg.connect(app.database_url) as conn, conn.transaction():
        row = conn.execute(
            "INSERT INTO example_orders (item) VALUES (%s) RETURNING id", (item,)
        ).fetchone()
        assert row is not None
        order_id = row[0]
        ref = confirm_order.apply_async(args=(order_id,), connection=conn)
    body = json.dumps({"order_id": order_id, "job_id": ref.id}).encode()
    start_response("201 Created", [("Content-Type", "application/json")])
    return [body]


def prepare() -> None:
    app.migrate()
    with psycopg.connect(app.database_url, autocommit=True) as conn:
        conn.execute(ORDERS_TABLE)


def serve(port: int) -> None:
    worker = venturi.Worker(app, concurrency=4)
    worker.start()
    try:
        with make_server("127.0.0.1", port, application) as server:
            print(f"serving on http://127.0.0.1:{port}; Ctrl-C to stop")
            server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        worker.stop(grace=10)


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def self_test() -> int:
    """Serve one request on a free port, wait for its job, check the order was confirmed."""
    worker = venturi.Worker(app, concurrency=2, poll_interval=1)
    worker.start()
    try:
        with make_server("127.0.0.1", 0, application, handler_class=_QuietHandler) as server:
            serving = threading.Thread(target=server.handle_request, daemon=True)
            serving.start()
            request = urllib.request.Request(
                f"http://127.0.0.1:{server.server_port}/orders?item=book", method="POST"
            )
            with urllib.request.urlopen(request, timeout=10) as response:
                created = json.load(response)
            serving.join(10)
        deadline = time.monotonic() + 20
        while not app.job(created["job_id"]).job.status.is_terminal:
            if time.monotonic() > deadline:
                print("the confirmation job did not finish within 20 s")
                return 1
            threading.Event().wait(0.05)
    finally:
        worker.stop(grace=5)
    detail = app.job(created["job_id"])
    with psycopg.connect(app.database_url) as conn:
        row = conn.execute(
            "SELECT confirmed_at IS NOT NULL FROM example_orders WHERE id = %s",
            (created["order_id"],),
        ).fetchone()
    confirmed = row is not None and row[0]
    print(f"order {created['order_id']}: job {detail.job.status.value}, confirmed={confirmed}")
    return 0 if detail.job.status is venturi.Status.COMPLETED and confirmed else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--self-test", action="store_true", help="one request, then exit")
    options = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(name)s %(levelname)s %(message)s")
    prepare()
    try:
        if options.self_test:
            return self_test()
        serve(options.port)
        return 0
    finally:
        app.close()


if __name__ == "__main__":
    raise SystemExit(main())
