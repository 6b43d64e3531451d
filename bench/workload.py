"""What every benchmark shares: sizes, fresh names, timing, RSS and the result record.

Every section of the suite works on tables it creates under a fresh random
name and drops afterwards, so a run never depends on (or disturbs) whatever
else lives in the database, and two runs on one server never meet.
"""

from __future__ import annotations

import math
import os
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

import psycopg

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"

#: The no-op job's kind, the same everywhere (raw table, venturi, peers).
NOOP_KIND = "bench.noop"
#: The ``async def`` no-op: the async drain figure, run on the worker's event loop.
ASYNC_NOOP_KIND = "bench.anoop"
#: Pickup-latency probes: the handler returns its start time (time.time()).
STAMP_KIND = "bench.stamp"
#: Result-latency probes: the handler returns the time it returned at.
RESULT_KIND = "bench.result_probe"


def database_url(explicit: str | None) -> str:
    return explicit or os.environ.get("VENTURI_DATABASE_URL") or DEFAULT_URL


@dataclass(frozen=True)
class Sizes:
    """How many jobs each figure uses; ``--quick`` scales everything down."""

    single_inserts: int  # raw INSERT per transaction and venturi .delay()
    bulk: int  # raw COPY and venturi delay_many
    bulk_batch: int
    drain: int  # jobs drained per drain figure
    latency_probes: int
    latency_gap: float  # seconds between two probes
    terminal_rows: int  # background rows for the "big table" drain
    future_rows: int
    rss_first: int
    rss_second: int | None  # None: skip the second RSS reading

    @classmethod
    def full(cls) -> Sizes:
        return cls(
            single_inserts=5_000,
            bulk=50_000,
            bulk_batch=5_000,
            drain=20_000,
            latency_probes=200,
            latency_gap=0.020,
            terminal_rows=1_000_000,
            future_rows=200_000,
            rss_first=10_000,
            rss_second=100_000,
        )

    @classmethod
    def quick(cls) -> Sizes:
        return cls(
            single_inserts=1_000,
            bulk=10_000,
            bulk_batch=5_000,
            drain=4_000,
            latency_probes=50,
            latency_gap=0.020,
            terminal_rows=100_000,
            future_rows=20_000,
            rss_first=10_000,
            rss_second=None,
        )


def fresh_name(kind: str) -> str:
    """A new lowercase identifier stem, e.g. ``bench_v_1a2b3c``."""
    return f"bench_{kind}_{secrets.token_hex(3)}"


def connect(url: str, **kwargs: Any) -> psycopg.Connection[Any]:
    return psycopg.connect(url, autocommit=True, **kwargs)


def drop_prefix(conn: psycopg.Connection[Any], prefix: str) -> None:
    """Drop every table of ``prefix``, whichever migrations made them (read from the catalog)."""
    rows = conn.execute(
        "SELECT tablename FROM pg_tables WHERE tablename LIKE %s", [f"{prefix}\\_%"]
    ).fetchall()
    for (table,) in rows:
        conn.execute(f'DROP TABLE IF EXISTS "{table}" CASCADE')
    for function in ("enqueue_on_dead", "new_id"):  # V13's (ADR 0138)
        conn.execute(f'DROP FUNCTION IF EXISTS "{prefix}_{function}"()')


def noop_payload(n: int) -> dict[str, int]:
    """The payload of the n-th no-op job, identical for venturi, the baseline and the peers."""
    return {"n": n}


@contextmanager
def stopwatch() -> Iterator[Callable[[], float]]:
    """``with stopwatch() as elapsed: ...; elapsed()`` in seconds (monotonic clock)."""
    start = time.perf_counter()
    end: list[float] = []
    yield lambda: (end[0] if end else time.perf_counter()) - start
    end.append(time.perf_counter())


def wait_until(predicate: Callable[[], bool], *, timeout: float, interval: float = 0.05) -> bool:
    """Poll ``predicate`` until it holds or ``timeout`` seconds pass; returns the last answer."""
    deadline = time.monotonic() + timeout
    while True:
        if predicate():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


def memory_kib(pid: int) -> dict[str, int]:
    """VmHWM (peak resident) and VmRSS (current resident) of a process, in KiB."""
    found: dict[str, int] = {}
    with open(f"/proc/{pid}/status", encoding="ascii") as status:
        for line in status:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS"):
                found[key] = int(rest.split()[0])
    return found


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (q in 0..100) of a non-empty list."""
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


@dataclass
class Figure:
    """One row of the results table: a venturi figure, its baseline, the ratio and target.

    ``ratio`` is venturi/baseline for throughputs; for figures with an absolute
    target (latency) there is no baseline and ``target`` says the bound.
    ``peers`` holds the same figure for other libraries, or why it is missing.
    """

    key: str
    label: str
    unit: str
    venturi: float | None = None
    baseline: float | None = None
    baseline_label: str = ""
    ratio: float | None = None
    target: str = ""
    met: bool | None = None
    peers: dict[str, float | str] = field(default_factory=dict)
    notes: str = ""

    def as_json(self) -> dict[str, Any]:
        return asdict(self)
