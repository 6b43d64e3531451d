"""FastAPI with a venturi worker in the same process, and async enqueue in the request.

    VENTURI_DATABASE_URL=postgresql://localhost/mydb \\
        uvicorn examples.fastapi_app:api --port 8000
    curl -X POST 'http://127.0.0.1:8000/orders?item=book'
    curl 'http://127.0.0.1:8000/jobs/<job_id>'

``POST /orders`` inserts an order (a table of the application's own) and
enqueues its confirmation with ``await confirm_order.aapply_async(...,
connection=conn)`` on the request's ``psycopg.AsyncConnection``, in one
transaction: the job exists exactly when the order does. ``POST /naps`` enqueues
a job that sleeps (to watch a graceful stop release it).

The worker's threads start with the server and stop with it:
``venturi.contrib.asgi.worker_lifespan`` wraps this app's own lifespan
(``prepare``: migrations and the orders table, done before the worker claims).
On SIGTERM uvicorn finishes its requests, then the lifespan stops the worker:
running jobs get ``GRACE`` seconds, the others go back to ``pending``
(``released``) for the next worker. The database is $VENTURI_DATABASE_URL,
else the embedded server (``venturi[embedded]``); the application's own
connections go to the one the App resolved, ``app.database_url``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import psycopg
from fastapi import FastAPI, HTTPException

import venturi
from venturi.contrib.asgi import worker_lifespan
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


def prepare() -> None:
    app.migrate()
    with psycopg.connect(app.database_url, autocommit=True) as conn:
        conn.execute(ORDERS_TABLE)


@asynccontextmanager
async def setup(api: FastAPI) -> AsyncIterator[None]:
    await asyncio.to_thread(prepare)
    yield


api = FastAPI(lifespan=worker_lifespan(app, lifespan=setup, grace=GRACE, concurrency=4))


@api.get("/health")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@api.post("/orders", status_code=201)
async def create_order(item: str = "something") -> dict[str, Any]:
    async with await psycopg.AsyncConnection.connect(app.database_url) as conn:
        cursor = await conn.execute(
            "INSERT INTO example_orders (item) VALUES (%s) RETURNING id", (item,)
        )
        row = await cursor.fetchone()
        assert row is not None
        ref = await confirm_order.aapply_async(args=(row[0],), connection=conn)
        # Leaving the block commits: the order and its job become visible together.
    return {"order_id": row[0], "job_id": ref.id}


@api.post("/naps", status_code=201)
async def create_nap(seconds: float = 60.0) -> dict[str, Any]:
    ref = await nap.adelay(seconds)
    return {"job_id": ref.id}


@api.get("/jobs/{job_id}")
async def show_job(job_id: str) -> dict[str, Any]:
    try:
        detail = await asyncio.to_thread(app.job, job_id)
    except JobNotFound:
        raise HTTPException(status_code=404, detail="no such job") from None
    return {
        "status": detail.job.status.value,
        "journal": [entry.outcome.value for entry in detail.journal],
    }
