"""Peers, when installed: procrastinate and pgqueuer on the same no-op workload.

Each library runs in a subprocess of its own (its imports, event loop and
environment stay out of the benchmark process), inside a fresh PostgreSQL
schema that is dropped afterwards. Only public APIs are used:

- procrastinate: ``task.defer()`` (sync app, one job per call),
  ``task.batch_defer()`` in batches, ``app.run_worker(concurrency=8,
  wait=False)``; the handler is ``async def`` (its native kind). Drain time
  is read from ``procrastinate_events`` (``succeeded``).
- pgqueuer: ``Queries.enqueue()`` one job per call and with lists,
  ``QueueManager.run(mode=drain)`` at its default ``batch_size`` (10) with an
  ``async def`` entrypoint; drain time from its log table (``successful``).

A library that is missing or fails is reported with the reason, never
given a figure. Run as a script it prints one JSON object::

    python bench/peers.py procrastinate --database-url URL --single 5000 ...
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psycopg
from workload import NOOP_KIND, connect, fresh_name, noop_payload, stopwatch

LIBRARIES = ("procrastinate", "pgqueuer")


def measure(library: str, url: str, *, single: int, bulk: int, batch: int, drain: int) -> Any:
    """Run one peer in a subprocess; its figures, or a string saying why there are none."""
    try:
        version = importlib.metadata.version(library)
    except importlib.metadata.PackageNotFoundError:
        return f"skipped: {library} is not installed (pip install {library})"
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        library,
        "--database-url",
        url,
        "--single",
        str(single),
        "--bulk",
        str(bulk),
        "--batch",
        str(batch),
        "--drain",
        str(drain),
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    except subprocess.TimeoutExpired:
        return f"skipped: {library} {version} did not finish within 15 minutes"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return f"skipped: {library} {version} failed: {tail}"
    result: dict[str, Any] = json.loads(lines[-1])
    result["version"] = version
    return result


class Schema:
    """A fresh schema for one peer, dropped with everything in it by ``close()``."""

    def __init__(self, url: str, kind: str) -> None:
        self.url = url
        self.name = fresh_name(kind)
        self.conn = connect(url)
        self.conn.execute(f"CREATE SCHEMA {self.name}")

    def scalar(self, sql: str) -> Any:
        row = self.conn.execute(sql.replace("{s}", self.name)).fetchone()
        return row[0] if row else None

    def span(self, sql: str) -> tuple[int, float]:
        row = self.conn.execute(sql.replace("{s}", self.name)).fetchone()
        assert row is not None
        return int(row[0]), float(row[1] or 0.0)

    def close(self) -> None:
        try:
            self.conn.execute(f"DROP SCHEMA IF EXISTS {self.name} CASCADE")
        finally:
            self.conn.close()


# -- procrastinate -----------------------------------------------------------------------


def run_procrastinate(url: str, single: int, bulk: int, batch: int, drain: int) -> dict[str, Any]:
    import procrastinate

    schema = Schema(url, "procr")
    try:
        connector = procrastinate.PsycopgConnector(
            conninfo=url, kwargs={"options": f"-c search_path={schema.name}"}
        )
        app = procrastinate.App(connector=connector)

        @app.task(name=NOOP_KIND)
        async def noop(n: int) -> None:
            return None

        result: dict[str, Any] = {}
        with app.open():
            app.schema_manager.apply_schema()
            noop.defer(n=-1)
            with stopwatch() as elapsed:
                for n in range(single):
                    noop.defer(n=n)
            result["enqueue_single"] = single / elapsed()
            with stopwatch() as elapsed:
                for start in range(0, bulk, batch):
                    noop.batch_defer(
                        *(noop_payload(n) for n in range(start, min(bulk, start + batch)))
                    )
            result["enqueue_bulk"] = bulk / elapsed()
            schema.conn.execute(f"TRUNCATE {schema.name}.procrastinate_jobs CASCADE")
            for start in range(0, drain, batch):
                noop.batch_defer(
                    *(noop_payload(n) for n in range(start, min(drain, start + batch)))
                )
        schema.conn.execute(f"ANALYZE {schema.name}.procrastinate_jobs")
        started = time.perf_counter()
        app.run_worker(concurrency=8, wait=False, install_signal_handlers=False)
        wall = time.perf_counter() - started
        done, span = schema.span(
            "SELECT count(*), extract(epoch FROM max(at) - min(at)) "
            "FROM {s}.procrastinate_events WHERE type = 'succeeded'"
        )
        if done != drain:
            raise RuntimeError(f"procrastinate completed {done} of {drain} jobs")
        result["drain_c8"] = done / span
        result["drain_c8_wall_s"] = round(wall, 3)
        result["drain_settings"] = "run_worker(concurrency=8, wait=False), async def handler"
        return result
    finally:
        schema.close()


# -- pgqueuer ----------------------------------------------------------------------------


def run_pgqueuer(url: str, single: int, bulk: int, batch: int, drain: int) -> dict[str, Any]:
    schema = Schema(url, "pgq")
    # pgqueuer reads its object names from the environment; the prefix also
    # namespaces its NOTIFY channel, which is database-wide.
    os.environ["PGQUEUER_SCHEMA"] = schema.name
    os.environ["PGQUEUER_PREFIX"] = f"{schema.name}_"
    try:
        return asyncio.run(_pgqueuer(url, schema, single, bulk, batch, drain))
    finally:
        schema.close()


async def _pgqueuer(
    url: str, schema: Schema, single: int, bulk: int, batch: int, drain: int
) -> dict[str, Any]:
    from datetime import timedelta

    from pgqueuer import PsycopgDriver, Queries, QueueManager
    from pgqueuer.domain.types import QueueExecutionMode

    result: dict[str, Any] = {}
    payload = lambda n: json.dumps(noop_payload(n)).encode()  # noqa: E731
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        queries = Queries(PsycopgDriver(conn))
        await queries.install(create_schema=False)
        await queries.enqueue(NOOP_KIND, payload(-1))
        with stopwatch() as elapsed:
            for n in range(single):
                await queries.enqueue(NOOP_KIND, payload(n))
        result["enqueue_single"] = single / elapsed()
        with stopwatch() as elapsed:
            for start in range(0, bulk, batch):
                count = min(bulk, start + batch) - start
                await queries.enqueue(
                    [NOOP_KIND] * count,
                    [payload(n) for n in range(start, start + count)],
                    [0] * count,
                )
        result["enqueue_bulk"] = bulk / elapsed()
        await queries.clear_queue()
        await queries.clear_queue_log()
        for start in range(0, drain, batch):
            count = min(drain, start + batch) - start
            await queries.enqueue(
                [NOOP_KIND] * count, [payload(n) for n in range(start, start + count)], [0] * count
            )

    schema.conn.execute(f"ANALYZE {schema.name}.{schema.name}_pgqueuer")
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        manager = QueueManager(Queries(PsycopgDriver(conn)))

        @manager.entrypoint(NOOP_KIND)
        async def noop(job: Any) -> None:
            return None

        started = time.perf_counter()
        await manager.run(mode=QueueExecutionMode.drain, log_aggregation_interval=timedelta(0))
        wall = time.perf_counter() - started
    done, span = schema.span(
        "SELECT count(*), extract(epoch FROM max(created) - min(created)) "
        f"FROM {{s}}.{schema.name}_pgqueuer_log WHERE status = 'successful'"
    )
    if done != drain:
        raise RuntimeError(f"pgqueuer logged {done} of {drain} jobs as successful")
    result["drain_c8"] = done / span
    result["drain_c8_wall_s"] = round(wall, 3)
    result["drain_settings"] = "QueueManager.run(mode=drain), batch_size=10 (default), async def"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("library", choices=LIBRARIES)
    parser.add_argument("--database-url", required=True)
    parser.add_argument("--single", type=int, required=True)
    parser.add_argument("--bulk", type=int, required=True)
    parser.add_argument("--batch", type=int, required=True)
    parser.add_argument("--drain", type=int, required=True)
    args = parser.parse_args()
    run = run_procrastinate if args.library == "procrastinate" else run_pgqueuer
    result = run(args.database_url, args.single, args.bulk, args.batch, args.drain)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
