"""Enqueue figures, measured in lockstep with their baselines.

On a shared machine the load changes from one second to the next, so timing
venturi for five seconds and then the baseline for five seconds compares two
different machines. Here the writers take turns, one operation (or one batch)
each, in a rotating order, and each one's clock only runs during its own
operations: whatever the machine does, all of them see the same of it.

- ``raw``: the minimal table (baseline.RawQueue);
- ``seed``: plain psycopg into the seed's own tables (V1-V3 only,
  ``baseline.SeedPrefix``): the baseline of the targets (issue 34);
- ``venturi_schema``: plain psycopg into a migrated venturi jobs table (every
  migration: the later ones' share, beside the seed's);
- ``venturi``: ``.delay()`` / ``delay_many`` on a fresh prefix of its own.

``single`` has two forms: ``block=1``, the lockstep proper, and ``block=N``,
sequential: N calls of one writer in a row before the next writer's N, the
order still rotating (the form of a bench that times 5,000 calls one after
another; journal, section 15). Neither runs with a worker on the queue.

``asynchronous`` compares the awaited enqueue with ``.delay()`` the same way,
in chunks (one chunk per turn, so entering the event loop is paid once per
chunk, as in a server whose loop is always running).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import psycopg
from baseline import RawQueue, VenturiSchemaTable
from venturi_bench import Prefix
from workload import noop_payload

#: Untimed operations per writer first: connections, prepared statements, caches.
WARM_UP = 20


def _lockstep(ops: dict[str, Callable[[int], None]], steps: list[int]) -> dict[str, float]:
    """Run every op once per step, rotating who goes first; seconds spent per op."""
    spent = dict.fromkeys(ops, 0.0)
    names = list(ops)
    for index, step in enumerate(steps):
        turn = index % len(names)
        for name in names[turn:] + names[:turn]:
            started = time.perf_counter()
            ops[name](step)
            spent[name] += time.perf_counter() - started
    return spent


def _in_blocks(op: Callable[[int], None], block: int, count: int) -> Callable[[int], None]:
    """``op`` for ``block`` consecutive steps from ``start`` (fewer at the end)."""

    def run(start: int) -> None:
        for n in range(start, min(count, start + block)):
            op(n)

    return run


def single(url: str, count: int, block: int = 1) -> dict[str, float]:
    """``count`` single-row enqueues per writer, ``block`` in a row per turn (1: the
    lockstep proper); jobs/s per writer."""
    raw = RawQueue(url)
    seed = VenturiSchemaTable(url, count + WARM_UP, seed=True)
    schema = VenturiSchemaTable(url, count + WARM_UP)
    venturi = Prefix(url)
    try:
        ops: dict[str, Callable[[int], None]] = {
            "raw": raw.insert_one,
            "seed": seed.insert_one,
            "venturi_schema": schema.insert_one,
            "venturi": venturi.noop.delay,
        }
        _lockstep(ops, list(range(count, count + WARM_UP)))
        blocks = {name: _in_blocks(op, block, count) for name, op in ops.items()}
        spent = _lockstep(blocks, list(range(0, count, block)))
        return {name: count / seconds for name, seconds in spent.items()}
    finally:
        raw.close()
        seed.close()
        schema.close()
        venturi.close()


def bulk(url: str, count: int, batch_size: int) -> dict[str, float]:
    """``count`` jobs per writer in batches of ``batch_size``, in lockstep; jobs/s per writer.

    raw, seed and venturi_schema COPY each batch in one transaction; venturi calls
    ``delay_many`` with the batch's argument dicts (built inside its clock,
    as the raw writers' payloads are).
    """
    raw = RawQueue(url)
    seed = VenturiSchemaTable(url, count, seed=True)
    schema = VenturiSchemaTable(url, count)
    venturi = Prefix(url)
    try:
        venturi.noop.delay(-1)  # opens the App's pool, untimed

        def enqueue_many(start: int) -> None:
            items = [noop_payload(n) for n in range(start, min(count, start + batch_size))]
            venturi.noop.delay_many(items, batch_size=batch_size)

        ops: dict[str, Callable[[int], None]] = {
            "raw": lambda start: raw.copy_batch(start, min(batch_size, count - start)),
            "seed": lambda start: seed.copy_batch(start, min(batch_size, count - start)),
            "venturi_schema": lambda start: schema.copy_batch(
                start, min(batch_size, count - start)
            ),
            "venturi": enqueue_many,
        }
        spent = _lockstep(ops, list(range(0, count, batch_size)))
        return {name: count / seconds for name, seconds in spent.items()}
    finally:
        raw.close()
        seed.close()
        schema.close()
        venturi.close()


def asynchronous(url: str, count: int, chunk: int) -> dict[str, float]:
    """``count`` enqueues per writer, ``chunk`` per turn, in lockstep; jobs/s per writer.

    ``delay``: ``.delay()`` in a loop; ``adelay``: ``await .adelay()`` in a loop on
    one event loop; ``adelay_gather``: ``chunk`` concurrent ``.adelay()`` calls under
    ``asyncio.gather`` (the async pool opens up to its ``pool_size`` sessions).
    All three write to one fresh prefix. ``seed_sync`` and ``seed_async``: the seed
    INSERT with plain psycopg, on a ``Connection`` and awaited on an
    ``AsyncConnection`` of the same loop: the driver's own price of awaiting.
    """
    venturi = Prefix(url)
    seed_sync = VenturiSchemaTable(url, count + chunk, seed=True)
    seed_async = VenturiSchemaTable(url, count + chunk, seed=True)
    loop = asyncio.new_event_loop()
    aconn = loop.run_until_complete(psycopg.AsyncConnection.connect(url, autocommit=True))
    try:
        noop = venturi.noop

        def delay(start: int) -> None:
            for n in range(start, start + chunk):
                noop.delay(n)

        async def await_each(start: int) -> None:
            for n in range(start, start + chunk):
                await noop.adelay(n)

        async def gather(start: int) -> None:
            await asyncio.gather(*(noop.adelay(n) for n in range(start, start + chunk)))

        def insert_each(start: int) -> None:
            for n in range(start, start + chunk):
                seed_sync.insert_one(n)

        async def ainsert_each(start: int) -> None:
            for n in range(start, start + chunk):
                await seed_async.ainsert_one(aconn, n)

        ops: dict[str, Callable[[int], None]] = {
            "delay": delay,
            "adelay": lambda start: loop.run_until_complete(await_each(start)),
            "adelay_gather": lambda start: loop.run_until_complete(gather(start)),
            "seed_sync": insert_each,
            "seed_async": lambda start: loop.run_until_complete(ainsert_each(start)),
        }
        _lockstep(ops, [-chunk])  # warm-up: pools open, statements prepared
        spent = _lockstep(ops, list(range(0, count, chunk)))
        return {name: count / seconds for name, seconds in spent.items()}
    finally:
        loop.run_until_complete(aconn.close())
        loop.run_until_complete(venturi.app.aclose())
        loop.close()
        seed_sync.close()
        seed_async.close()
        venturi.close()
