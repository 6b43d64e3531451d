"""Why ``.delay()`` measured 0.85 of an INSERT in lockstep and 0.38 sequentially (issue 34).

Each writer makes single-row enqueues, one autocommit transaction each, on
tables of its own made fresh for the run:

- ``seed``: plain psycopg ``INSERT`` on the seed's own tables (V1-V3 only,
  ``baseline.SeedPrefix``), ids made before the clock: the baseline;
- ``seed+notify``: the same INSERT with ``pg_notify`` in the statement, as
  ``enqueue_job`` has it (the commit then also queues the notification);
- ``all migrations``: the same INSERT on a table with every migration (V1-V11);
- ``venturi SQL``: ``enqueue_job``'s own text and parameters on V1-V11, with
  plain psycopg (venturi's statement without venturi's Python);
- ``.delay()``: the task call on a fresh App.

Two forms: ``lockstep`` (one call per writer per step, the order rotating)
and ``sequential`` (``--block`` calls of one writer in a row, then the next's;
``--block`` equal to ``--count`` is the independent bench's form: each
writer's calls all one after another). Each form runs on a fresh set of
tables (``fresh``) and then again on the same tables (``warm``). Per writer:
calls/s (wall) and this process's CPU per call (``time.process_time``, the
Python side only: the server's share is not in it), and the ratio to ``seed``.

    python bench/delay_forms.py [--count 3000] [--block 500] [--forms lockstep,sequential]

The WAL flush's share: run it again with ``--database-url
'postgresql://postgres@127.0.0.1:5432/test?options=-csynchronous_commit%3Doff'``
(every session of the run, venturi's pool too, then commits without waiting
for the flush).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from baseline import VenturiSchemaTable, _payload
from venturi_bench import BENCH_DIR, Prefix, WorkerProcess
from workload import NOOP_KIND, connect, database_url

#: ``enqueue_job`` (queries.sql) as text, ``{p}`` for the prefix.
_VENTURI_SQL = """
INSERT INTO {p}_jobs (id, kind, payload, priority, status, created_at, visible_at, dedup_key,
                      fair_key, expires_at)
SELECT %(id)s, %(kind)s, %(payload)s::jsonb, %(priority)s, 'pending', enqueued_at,
       coalesce(%(eta)s::timestamptz, enqueued_at + %(delay)s::interval), %(dedup_key)s,
       %(fair_key)s,
       coalesce(%(expires_at)s::timestamptz, enqueued_at + %(expires_in)s::interval)
FROM (SELECT clock_timestamp() AS enqueued_at, pg_notify(%(channel)s, '')) AS wake
"""
_SEED_NOTIFY = """
INSERT INTO {p}_jobs (id, kind, payload, priority, status, created_at, visible_at)
SELECT %s, %s, %s, 1, 'pending', enqueued_at, enqueued_at
FROM (SELECT clock_timestamp() AS enqueued_at, pg_notify(%s, '')) AS wake
"""

Op = Callable[[int], None]
RESULTS = BENCH_DIR / "results"


class Writers:
    """The five writers on fresh tables; ``close()`` drops them all."""

    def __init__(
        self, url: str, count: int, *, listen: bool = False, worker: Path | None = None
    ) -> None:
        ids = 2 * count + 100
        self.seed = VenturiSchemaTable(url, ids, seed=True)
        self.seed_notify = VenturiSchemaTable(url, ids, seed=True)
        self.full = VenturiSchemaTable(url, ids)
        self.full_sql = VenturiSchemaTable(url, ids)
        self.venturi = Prefix(url)
        notify_sql = self.seed_notify.prefix.sql(_SEED_NOTIFY)
        venturi_sql = self.full_sql.prefix.sql(_VENTURI_SQL)
        channel = f"{self.full_sql.prefix.value}_wakeup"

        def seed_notify(n: int) -> None:
            self.seed_notify.prefix.conn.execute(
                notify_sql, (self.seed_notify.ids[n], NOOP_KIND, _payload(n), channel)
            )

        def venturi_sql_op(n: int) -> None:
            self.full_sql.prefix.conn.execute(
                venturi_sql,
                {
                    "id": self.full_sql.ids[n],
                    "kind": NOOP_KIND,
                    "payload": _payload(n),
                    "priority": 1,
                    "delay": timedelta(0),
                    "eta": None,
                    "dedup_key": None,
                    "fair_key": None,
                    "expires_in": None,
                    "expires_at": None,
                    "channel": channel,
                },
            )

        #: An idle session LISTENing on both channels, never reading (``--listen``).
        self.listener = connect(url) if listen else None
        if self.listener is not None:
            self.listener.execute(f'LISTEN "{channel}"')
            self.listener.execute(f'LISTEN "{self.venturi.value}_wakeup"')
        #: A c=8 worker process draining ``.delay()``'s jobs as they come (``--worker``).
        self.worker = WorkerProcess(self.venturi, 8, worker) if worker is not None else None
        if self.worker is not None:
            time.sleep(2.0)  # started and listening
        self.ops: dict[str, Op] = {
            "seed": self.seed.insert_one,
            "seed+notify": seed_notify,
            "all migrations": self.full.insert_one,
            "venturi SQL": venturi_sql_op,
            ".delay()": self.venturi.noop.delay,
        }

    def close(self) -> None:
        if self.worker is not None:
            self.worker.stop()
        if self.listener is not None:
            self.listener.close()
        for table in (self.seed, self.seed_notify, self.full, self.full_sql):
            table.close()
        self.venturi.close()


def _run(ops: dict[str, Op], steps: list[int], block: int) -> dict[str, tuple[float, float]]:
    """(wall s, cpu s) per op; ``block`` calls of one op in a row, the order rotating."""
    spent = {name: [0.0, 0.0] for name in ops}
    names = list(ops)
    for index, start in enumerate(range(0, len(steps), block)):
        chunk = steps[start : start + block]
        turn = index % len(names)
        for name in names[turn:] + names[:turn]:
            op = ops[name]
            wall, cpu = time.perf_counter(), time.process_time()
            for n in chunk:
                op(n)
            spent[name][0] += time.perf_counter() - wall
            spent[name][1] += time.process_time() - cpu
    return {name: (w, c) for name, (w, c) in spent.items()}


def measure(
    url: str,
    count: int,
    block: int,
    forms: list[str],
    *,
    listen: bool = False,
    worker: Path | None = None,
) -> dict[str, dict[str, object]]:
    result: dict[str, dict[str, object]] = {}
    for form in forms:
        size = 1 if form == "lockstep" else block
        writers = Writers(url, count, listen=listen, worker=worker)
        try:
            _run(writers.ops, list(range(2 * count, 2 * count + 20)), 1)  # warm-up: connections
            for phase, steps in (("fresh", range(count)), ("warm", range(count, 2 * count))):
                spent = _run(writers.ops, list(steps), size)
                base = count / spent["seed"][0]
                result[f"{form}/{phase}"] = {
                    name: {
                        "per_s": round(count / wall),
                        "ratio": round(count / wall / base, 3),
                        "cpu_us": round(cpu / count * 1e6, 1),
                    }
                    for name, (wall, cpu) in spent.items()
                }
        finally:
            writers.close()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--count", type=int, default=3_000)
    parser.add_argument("--block", type=int, default=500)
    parser.add_argument("--forms", default="lockstep,sequential")
    parser.add_argument(
        "--listen", action="store_true", help="an idle session LISTENs on the channels"
    )
    parser.add_argument(
        "--worker", action="store_true", help="a c=8 worker drains .delay()'s jobs meanwhile"
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    result = measure(
        database_url(args.database_url),
        args.count,
        args.block,
        args.forms.split(","),
        listen=args.listen,
        worker=RESULTS / "delay_forms" if args.worker else None,
    )
    if args.json:
        print(json.dumps(result))
        return
    for key, writers in result.items():
        print(f"{key} ({args.count} calls each)")
        print(f"  {'writer':<16} {'calls/s':>8} {'/ seed':>7} {'client CPU us/call':>19}")
        for name, figures in writers.items():
            print(
                f"  {name:<16} {figures['per_s']:>8,} {figures['ratio']:>7.3f}"
                f" {figures['cpu_us']:>19.1f}"
            )


if __name__ == "__main__":
    main()
