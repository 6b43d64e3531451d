"""venturi's figures: enqueue, drain, pickup latency, a drain beside a big table, worker RSS.

Each figure runs on a fresh migrated prefix that is dropped afterwards.
Drains are timed from the database: jobs over the span between the first and
the last ``completed`` journal entry (``recorded_at``), so worker start-up and
the benchmark's own polling are not counted.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from worker_app import build_app
from workload import (
    NOOP_KIND,
    connect,
    drop_prefix,
    fresh_name,
    memory_kib,
    noop_payload,
    percentile,
    stopwatch,
    wait_until,
)

BENCH_DIR = Path(__file__).resolve().parent

# Server-side background rows for the "big table" drain. Terminal rows finished
# two days ago with one journal entry each; future rows were created an hour
# ago (so they sort *ahead* of fresh work in claim order, the worst case for
# the claim index) and become visible tomorrow. Same kind as the drained jobs.
_TERMINAL_JOBS = """
INSERT INTO {p}_jobs (id, kind, payload, priority, status, created_at, visible_at,
                      finished_at, run_count)
SELECT 'T' || lpad(g::text, 25, '0'), %(kind)s, jsonb_build_object('n', g), 1, 'completed',
       t.at, t.at, t.at + interval '5 ms', 1
FROM generate_series(1, %(count)s) AS g
CROSS JOIN LATERAL (SELECT now() - interval '2 days' + g * interval '1 ms' AS at) AS t
"""
_TERMINAL_JOURNAL = """
INSERT INTO {p}_journal (job_id, kind, run_no, recorded_at, outcome)
SELECT id, kind, 1, finished_at, 'completed' FROM {p}_jobs WHERE status = 'completed'
"""
_FUTURE_JOBS = """
INSERT INTO {p}_jobs (id, kind, payload, priority, status, created_at, visible_at)
SELECT 'F' || lpad(g::text, 25, '0'), %(kind)s, jsonb_build_object('n', g), 1, 'pending',
       now() - interval '1 hour' + g * interval '1 us', now() + interval '1 day'
FROM generate_series(1, %(count)s) AS g
"""


class Prefix:
    """A fresh migrated venturi prefix with the benchmark App on it; ``close()`` drops it."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.value = fresh_name("v")
        self.app, self.noop, self.stamp, self.anoop = build_app(url, self.value)
        self.app.migrate()
        self.conn = connect(url)

    def sql(self, template: str) -> str:
        return template.replace("{p}", self.value)

    def scalar(self, template: str, params: Any = None) -> Any:
        row = self.conn.execute(self.sql(template), params).fetchone()
        return row[0] if row else None

    def last_journal_id(self) -> int:
        return int(self.scalar("SELECT coalesce(max(id), 0) FROM {p}_journal"))

    def completed(self, *, after_id: int = 0) -> int:
        """Completed journal entries with id > ``after_id`` (a primary-key range, cheap to poll)."""
        return int(
            self.scalar(
                "SELECT count(*) FROM {p}_journal WHERE id > %s AND outcome = 'completed'",
                (after_id,),
            )
        )

    def completed_span(self, *, after_id: int = 0) -> tuple[int, float]:
        """(completed entries, seconds from the first to the last) with id > ``after_id``."""
        row = self.conn.execute(
            self.sql(
                "SELECT count(*), extract(epoch FROM max(recorded_at) - min(recorded_at)) "
                "FROM {p}_journal WHERE id > %s AND outcome = 'completed'"
            ),
            (after_id,),
        ).fetchone()
        assert row is not None
        return int(row[0]), float(row[1] or 0.0)

    def enqueue_noop(
        self, count: int, *, start: int = 0, batch_size: int = 5_000, is_async: bool = False
    ) -> None:
        (self.anoop if is_async else self.noop).delay_many(
            [noop_payload(n) for n in range(start, start + count)], batch_size=batch_size
        )

    def close(self) -> None:
        self.app.close()
        try:
            drop_prefix(self.conn, self.value)
        finally:
            self.conn.close()


@contextmanager
def fresh_prefix(url: str) -> Iterator[Prefix]:
    prefix = Prefix(url)
    try:
        yield prefix
    finally:
        prefix.close()


class WorkerProcess:
    """``worker_app.py`` in a subprocess; ``stop()`` sends SIGTERM (a graceful stop)."""

    def __init__(
        self,
        prefix: Prefix,
        concurrency: int,
        log_dir: Path,
        env: dict[str, str] | None = None,
        options: Sequence[str] = (),
        tag: str = "",
    ) -> None:
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = log_dir / f"worker-{prefix.value}-c{concurrency}{tag}.log"
        self._log = self.log_path.open("wb")
        self.process = subprocess.Popen(
            [
                sys.executable,
                str(BENCH_DIR / "worker_app.py"),
                "--database-url",
                prefix.url,
                "--prefix",
                prefix.value,
                "--concurrency",
                str(concurrency),
                *options,
            ],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env if env is not None else {**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.pid = self.process.pid

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"worker exited with {self.process.returncode}; see {self.log_path}")

    def memory(self) -> dict[str, int]:
        return memory_kib(self.pid)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._log.close()


@contextmanager
def worker(
    prefix: Prefix,
    concurrency: int,
    log_dir: Path,
    env: dict[str, str] | None = None,
    options: Sequence[str] = (),
) -> Iterator[WorkerProcess]:
    """``env``: the worker's environment (default: this one's), e.g. another ``PYTHONPATH``;
    ``options``: more ``worker_app.py`` options."""
    process = WorkerProcess(prefix, concurrency, log_dir, env, options)
    try:
        yield process
    finally:
        process.stop()


def wait_for_completed(
    prefix: Prefix, process: WorkerProcess, target: int, *, after_id: int = 0
) -> None:
    """Poll until ``target`` jobs completed; fail if the worker dies or stops progressing.

    Polling costs the server one short primary-key range count every half
    second; the figures are read from journal timestamps, not from this loop.
    """
    started = last_change = time.monotonic()
    last = -1
    while True:
        done = prefix.completed(after_id=after_id)
        if done >= target:
            return
        process.check_alive()
        if time.monotonic() - started > 600 + target / 100:
            raise RuntimeError(f"gave up at {done}/{target} completed; see {process.log_path}")
        if done != last:
            last, last_change = done, time.monotonic()
        elif time.monotonic() - last_change > 60:
            raise RuntimeError(
                f"no progress for 60 s at {done}/{target} completed; see {process.log_path}"
            )
        time.sleep(0.5)


# -- figures ---------------------------------------------------------------------------


def drain(
    url: str,
    count: int,
    concurrency: int,
    log_dir: Path,
    *,
    profile: Path | None = None,
    is_async: bool = False,
) -> dict[str, Any]:
    """Enqueue ``count`` no-op jobs on a fresh prefix, then one worker process drains them.

    ``jobs_per_s`` is jobs over the span of their ``completed`` journal entries.
    ``is_async``: the jobs are of the ``async def`` no-op, run on the worker's
    event loop (its default ``async_concurrency``) instead of its threads.
    """
    with fresh_prefix(url) as prefix:
        return _drain_once(prefix, count, concurrency, log_dir, profile=profile, is_async=is_async)


def _drain_once(
    prefix: Prefix,
    count: int,
    concurrency: int,
    log_dir: Path,
    *,
    profile: Path | None = None,
    is_async: bool = False,
    options: Sequence[str] = (),
) -> dict[str, Any]:
    after_id = prefix.last_journal_id()
    prefix.enqueue_noop(count, is_async=is_async)
    prefix.conn.execute(prefix.sql("ANALYZE {p}_jobs"))
    with worker(prefix, concurrency, log_dir, options=options) as process:
        spy = _start_profiler(process.pid, profile) if profile else None
        try:
            wait_for_completed(prefix, process, count, after_id=after_id)
        finally:
            if spy is not None:
                _stop_profiler(spy)
    done, span = prefix.completed_span(after_id=after_id)
    return {"jobs_per_s": done / span, "jobs": done, "span_s": round(span, 3)}


def drain_processes(
    url: str, count: int, concurrency: int, processes: int, log_dir: Path
) -> dict[str, Any]:
    """``drain`` by ``processes`` worker processes (each at ``concurrency``) on one prefix:
    the figure set beside the raw multi-connection loop (``baseline.drain_threads``).

    The workers start first, idle; once every one is registered the jobs arrive in one
    transaction (one COPY, one wake-up), so no worker drains alone while another boots.
    """
    with fresh_prefix(url) as prefix:
        workers = [
            WorkerProcess(prefix, concurrency, log_dir, tag=f"-of{processes}-{n}")
            for n in range(processes)
        ]
        try:
            registered = wait_until(
                lambda: prefix.scalar("SELECT count(*) FROM {p}_workers") >= processes,
                timeout=60,
            )
            if not registered:
                raise RuntimeError(f"{processes} workers did not register within 60 s")
            prefix.enqueue_noop(count, batch_size=count)
            deadline = time.monotonic() + 600
            while prefix.completed() < count:
                for process in workers:
                    process.check_alive()
                if time.monotonic() > deadline:
                    raise RuntimeError(f"{processes} workers did not drain {count} in 600 s")
                time.sleep(0.25)
        finally:
            for process in workers:
                process.stop()
        done, span = prefix.completed_span()
    return {"jobs_per_s": done / span, "jobs": done, "span_s": round(span, 3)}


def big_table_drains(
    url: str,
    count: int,
    concurrency: int,
    rounds: int,
    log_dir: Path,
    *,
    terminal_rows: int,
    future_rows: int,
    profile: Path | None = None,
) -> dict[str, Any]:
    """``rounds`` drains of ``count`` jobs on a prefix holding a long-lived queue's rows.

    The table first gets ``terminal_rows`` completed rows (with journals) and
    ``future_rows`` pending rows that are not visible yet, built server-side
    and VACUUM ANALYZEd once; each round then enqueues and drains like ``drain``.
    """
    with fresh_prefix(url) as prefix:
        with stopwatch() as elapsed:
            _fill_background(prefix, terminal_rows, future_rows)
        fill = round(elapsed(), 1)
        samples = [
            _drain_once(prefix, count, concurrency, log_dir, profile=profile if n == 0 else None)
            for n in range(rounds)
        ]
    return {"samples": samples, "background_fill_s": fill}


def _fill_background(prefix: Prefix, terminal_rows: int, future_rows: int) -> None:
    params = {"kind": NOOP_KIND}
    if terminal_rows:
        prefix.conn.execute(prefix.sql(_TERMINAL_JOBS), {**params, "count": terminal_rows})
        prefix.conn.execute(prefix.sql(_TERMINAL_JOURNAL))
    if future_rows:
        prefix.conn.execute(prefix.sql(_FUTURE_JOBS), {**params, "count": future_rows})
    prefix.conn.execute(prefix.sql("VACUUM ANALYZE {p}_jobs"))
    prefix.conn.execute(prefix.sql("VACUUM ANALYZE {p}_journal"))


def _start_profiler(pid: int, output: Path) -> subprocess.Popen[bytes]:
    """``py-spy record`` on the worker (needs py-spy installed and ptrace rights)."""
    output.parent.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen(
        [
            str(Path(sys.executable).with_name("py-spy")),
            "record",
            "--pid",
            str(pid),
            "--threads",
            "--format",
            "speedscope",
            "--output",
            str(output),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _stop_profiler(spy: subprocess.Popen[bytes]) -> None:
    spy.send_signal(signal.SIGINT)
    try:
        spy.wait(timeout=30)
    except subprocess.TimeoutExpired:
        spy.kill()


def pickup_latency(
    url: str, probes: int, gap: float, log_dir: Path, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """``.delay()`` to handler start with an idle worker (c=8), ``probes`` jobs ``gap`` s apart.

    The enqueue time is ``time.time()`` just before ``.delay()`` in this
    process; the start time is the handler's ``time.time()``, returned as
    its journal note. Same host, so the same clock. ``parts_ms``: the median
    of each probe's time to the start of its claim (``to_claim``), split into
    the time to the claim loop's wake-up (``to_wake``: the enqueue's commit and
    its notification) and from the wake-up to the claim (``wake_to_claim``),
    then the claim itself (``worker_app.py --claim-timings``) and from the
    claim's end to the handler's start. ``env``: the worker's environment
    (another ``PYTHONPATH``, for trees measured in turn).
    """
    stamp = time.time_ns()
    timings = log_dir / f"pickup-claims-{stamp}.json"
    wakes = log_dir / f"pickup-wakes-{stamp}.json"
    options = ["--claim-timings", str(timings), "--wake-timings", str(wakes)]
    with fresh_prefix(url) as prefix:
        prefix.stamp.delay(-1)  # opens the pool; the worker is not running yet
        with worker(prefix, 8, log_dir, env, options) as process:
            wait_until(lambda: prefix.completed() == 1, timeout=60)
            process.check_alive()
            time.sleep(1.0)  # let the worker settle into its idle wait
            enqueued: dict[str, float] = {}
            for n in range(probes):
                before = time.time()
                ref = prefix.stamp.delay(n)
                enqueued[ref.id] = before
                time.sleep(gap)
            wait_for_completed(prefix, process, probes + 1)
        rows = prefix.conn.execute(
            prefix.sql("SELECT job_id, note FROM {p}_journal WHERE outcome = 'completed'")
        ).fetchall()
    latencies = [
        (float(note) - enqueued[job_id]) * 1000 for job_id, note in rows if job_id in enqueued
    ]
    return {
        "p50_ms": percentile(latencies, 50),
        "p95_ms": percentile(latencies, 95),
        "p99_ms": percentile(latencies, 99),
        "max_ms": max(latencies),
        "probes": len(latencies),
        "parts_ms": _pickup_parts(rows, enqueued, timings, wakes),
    }


#: ``_pickup_parts``' names, in the order of a probe's path.
PICKUP_PARTS = ("to_claim", "to_wake", "wake_to_claim", "claim", "claim_to_handler")


def _pickup_parts(
    rows: list[Any], enqueued: dict[str, float], timings: Path, wakes: Path
) -> dict[str, float] | str:
    """Median of each of ``PICKUP_PARTS`` over the probes, from the claims and wake-ups
    the worker timed: each probe's claim is the last one with jobs that ended before its
    handler began, its wake-up the last one before that claim began. A probe claimed
    without a wake-up since its enqueue (the loop was still busy) is left out."""
    try:
        claims = sorted(json.loads(timings.read_text()))
        woken = sorted(json.loads(wakes.read_text()))
    except (OSError, ValueError) as exc:
        return f"no claim or wake timings: {exc}"
    parts: list[tuple[float, ...]] = []
    for job_id, note in rows:
        if job_id not in enqueued:
            continue
        started, at = float(note), enqueued[job_id]
        ended = [c for c in claims if c[0] <= started and c[2] > 0]
        if not ended:
            continue
        end, seconds, _ = ended[-1]
        claimed = end - seconds
        wake = next((w for w in reversed(woken) if at <= w <= claimed), None)
        if wake is None:
            continue
        parts.append((claimed - at, wake - at, claimed - wake, seconds, started - end))
    if not parts:
        return "no probe matched a claim after a wake-up"
    return {
        name: round(percentile([p[i] * 1000 for p in parts], 50), 3)
        for i, name in enumerate(PICKUP_PARTS)
    }


def worker_rss(url: str, first: int, second: int | None, log_dir: Path) -> dict[str, Any]:
    """Worker (c=8) memory after draining ``first`` jobs, then after ``second`` in total.

    Each enqueue is followed by ANALYZE, standing in for autovacuum's (see ``analyze``).
    """
    result: dict[str, Any] = {}
    with fresh_prefix(url) as prefix, worker(prefix, 8, log_dir) as process:
        prefix.enqueue_noop(first)
        prefix.conn.execute(prefix.sql("ANALYZE {p}_jobs"))
        wait_for_completed(prefix, process, first)
        result["after_first"] = {"jobs": first, **process.memory()}
        if second is not None:
            prefix.enqueue_noop(second - first, start=first)
            prefix.conn.execute(prefix.sql("ANALYZE {p}_jobs"))
            wait_for_completed(prefix, process, second)
            result["after_second"] = {"jobs": second, **process.memory()}
    return result
