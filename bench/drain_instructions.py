"""The c=8 drain per job, counted: the worker's instructions and the server's work.

Wall time on a shared 2-core machine spreads a drain by more than 5%
(journal, section 20); counts do not. For each code tree named by ``--trees``
(``name=directory``, the venturi package found there by ``PYTHONPATH``), each
``--variants`` task and each of ``--repeats`` rounds, trees alternating, this
measures a drain of ``--jobs`` and of ``--jobs + --extra`` no-op jobs, each in
processes of its own; every figure is the difference of the two over
``--extra``, so start-up, imports, the migrations and the first and last
claims cancel out. A child (``--child prepare``) migrates a fresh prefix and
enqueues the jobs first; the drain's child builds the bench App on it
(``worker_app.build_app``, kind ``bench.noop``) and counts its backend's
calls by method (``calls.*``, per job).

- **worker**: ``Worker(app, concurrency=8)`` started (the real loop: claimer,
  prefetch, handler threads, committer) and stopped gracefully once
  ``backend.finish`` has recorded every job, under ``valgrind
  --tool=callgrind`` (its total over all threads). Under valgrind the claims'
  sizes follow the machine's timing, so the count per job rises with the
  transactions per job of that run; the table also gives each tree's count at
  the transactions per job of the unobserved drain (**server**), with the
  slope fitted over every sample of every tree (the same per transaction;
  two repeats or more).
- **loop**: ``Worker.run_once()`` until it finds nothing, under callgrind:
  the same claim, executor and ``finish`` with no threads, each claim of 8
  (one lease sweep, one claim, one finish per 8 jobs), so every run makes the
  same calls: the deterministic form of the worker's count.
- **server**: the worker's drain without valgrind, in a database of the
  script's own (``CREATE DATABASE``); from ``pg_stat_database`` of that
  database, read after every session of the drain has ended, the
  transactions committed (``xact_commit``), the shared-buffer hits and reads
  (``blks_hit``, ``blks_read``), the rows updated (``tup_updated``), and from
  the cluster the WAL (``pg_current_wal_lsn()``, ``pg_stat_wal``'s records
  and full-page images). The WAL is the cluster's: exact on the private
  cluster the script starts by default (the tests' ``PrivateServer``,
  autovacuum off, no checkpoint during a run), everyone's when
  ``--database-url`` names a shared server.
- **delay**: ``bench/instructions.py``'s client count per ``.delay()`` under
  each tree (its writer ``after``: the tree's own code).

Variants other than ``plain`` use a third-wave feature (the cost when used):
``keyed`` (``concurrency_key`` over 100 keys, ``key_concurrency=1``),
``shared`` (``limits=`` a shared limit that never binds), ``step`` (one
``ctx.step`` a job); they need the third wave's code.

    python bench/drain_instructions.py --trees before=/path/to/c141a06,after=. \\
        [--variants plain,keyed,step,shared] [--parts worker,loop,server,delay] \\
        [--jobs 500] [--extra 2000] [--repeats 3] [--concurrency 8] \\
        [--database-url URL] [--keep-outputs DIR] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from workload import NOOP_KIND, connect, drop_prefix, fresh_name

BENCH_DIR = Path(__file__).resolve().parent
HERE = Path(__file__).resolve()

#: Appended to the private cluster's configuration: nothing runs beside the drain
#: (no autovacuum, no timed checkpoint, so no full-page image mid-run).
CLUSTER_SETTINGS = """
autovacuum = off
checkpoint_timeout = 1h
max_wal_size = 8GB
"""
#: Hang guard for one child, not a speed check.
CHILD_TIMEOUT = 1800.0
#: The counters of ``pg_stat_database`` read for the server figures.
DATABASE_COUNTERS = ("xact_commit", "xact_rollback", "blks_hit", "blks_read", "tup_updated")


# -- the children ---------------------------------------------------------------------------


#: What the children can drain: the bench App's plain no-op (``worker_app.py``) and,
#: under the third wave's code only, the same no-op using one feature (its cost when used).
VARIANTS = ("plain", "keyed", "step", "shared")


def _step_work(n: int) -> int:
    """A durable step's function: nothing, so only the step's bookkeeping is counted."""
    return n


def _bench_app(url: str, prefix: str, variant: str) -> tuple[Any, Any]:
    """The App on ``prefix`` and the ``bench.noop`` task of ``variant``."""
    from worker_app import build_app

    if variant == "plain":
        app, noop, *_ = build_app(url, prefix)
        return app, noop
    import venturi

    app = venturi.App(url, prefix=prefix, set_as_current=False)
    if variant == "keyed":  # limits per key (ADR 0138): 100 keys, one job of each at once
        task = app.task(kind=NOOP_KIND, concurrency_key=lambda n: f"t{n % 100}", key_concurrency=1)
        return app, task(_noop)
    if variant == "shared":  # a shared limit (ADR 0138) that never binds
        app.limit("bench", concurrency=1_000_000)
        return app, app.task(kind=NOOP_KIND, limits=["bench"])(_noop)
    if variant == "step":  # one durable step a job (ADR 0137)

        def stepped(ctx: venturi.Context, n: int) -> int:
            return int(ctx.step("s", _step_work, n))

        return app, app.task(kind=NOOP_KIND)(stepped)
    raise ValueError(f"unknown variant {variant!r}")


def _noop(n: int) -> None:
    """The plain no-op, for the variants' own Apps."""


def _prepare_child(url: str, prefix: str, jobs: int, variant: str) -> None:
    """Migrate ``prefix`` with the tree on the path and enqueue ``jobs`` no-op jobs."""
    app, noop = _bench_app(url, prefix, variant)
    try:
        app.migrate()
        noop.delay_many([{"n": n} for n in range(jobs)], batch_size=5_000)
    finally:
        app.close()
    with connect(url) as conn:
        conn.execute(f"VACUUM ANALYZE {prefix}_jobs")


def _count_calls(backend: Any) -> dict[str, int]:
    """Count the calls of every public method of ``backend`` (what the worker asked the
    database for: claims, finishes, control reads, heartbeats); the same wrapper in every
    tree, so its own cost is the same per call."""
    calls: dict[str, int] = {}
    for name in dir(type(backend)):
        method = getattr(backend, name, None)
        if name.startswith("_") or not callable(method):
            continue

        def counted(*args: Any, __name: str = name, __method: Any = method, **kwargs: Any) -> Any:
            calls[__name] = calls.get(__name, 0) + 1
            return __method(*args, **kwargs)

        setattr(backend, name, counted)
    return calls


def _drain_child(
    url: str, prefix: str, jobs: int, concurrency: int, mode: str, variant: str, calls_to: str
) -> None:
    """Drain ``jobs`` jobs: ``worker``, a started ``Worker`` stopped once every outcome is
    recorded; ``loop``, ``Worker.run_once()`` (claims of ``concurrency``, no threads)
    until it finds nothing. Writes the backend's calls to ``calls_to`` (JSON)."""
    from worker_app import FinishCounter

    from venturi.worker import Worker

    app, _ = _bench_app(url, prefix, variant)
    calls = _count_calls(app.backend)
    finishes = FinishCounter(app.backend, jobs)
    worker = Worker(app, concurrency=concurrency, grace=5.0)
    try:
        if mode == "loop":
            while worker.run_once():
                pass
        else:
            worker.start()
            if not finishes.done.wait(CHILD_TIMEOUT):
                raise RuntimeError(f"only {finishes.recorded} of {jobs} jobs recorded")
    finally:
        worker.stop()
        app.close()
    Path(calls_to).write_text(json.dumps(calls))


# -- the parent -----------------------------------------------------------------------------


def _child_env(tree: Path) -> dict[str, str]:
    return {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tree), str(BENCH_DIR)]),
        "PYTHONHASHSEED": "0",
    }


def _run_child(tree: Path, args: list[str], *, callgrind: Path | None = None) -> None:
    command = [sys.executable, str(HERE), "--child", *args]
    if callgrind is not None:
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={callgrind}", *command]
    done = subprocess.run(
        command,
        env=_child_env(tree),
        capture_output=True,
        text=True,
        timeout=CHILD_TIMEOUT,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"child {args[0]} failed ({done.returncode}):\n{done.stderr[-3000:]}")


def _summary(out: Path) -> int:
    found = re.search(r"^summary:\s+(\d+)", out.read_text(), re.MULTILINE)
    if found is None:
        raise RuntimeError(f"no summary line in {out}")
    return int(found.group(1))


class Server:
    """The database the drains run in (one of the script's own) and its counters."""

    def __init__(self, admin_url: str) -> None:
        self.admin_url = admin_url
        self.name = fresh_name("di")
        with connect(admin_url) as conn:
            conn.execute(f"CREATE DATABASE {self.name}")
        self.url = urlunsplit(urlsplit(admin_url)._replace(path=f"/{self.name}"))

    def counters(self) -> dict[str, int]:
        """The database's counters and the cluster's WAL, once its sessions have all ended."""
        with connect(self.admin_url) as conn:
            deadline = time.monotonic() + 30
            while conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", [self.name]
            ).fetchone()[0]:  # type: ignore[index]
                if time.monotonic() > deadline:
                    raise RuntimeError(f"sessions still open in {self.name}")
                time.sleep(0.05)
            conn.execute("SELECT pg_stat_clear_snapshot()")
            row = conn.execute(
                f"SELECT {', '.join(DATABASE_COUNTERS)} FROM pg_stat_database WHERE datname = %s",
                [self.name],
            ).fetchone()
            assert row is not None
            wal = conn.execute(
                "SELECT pg_current_wal_lsn() - '0/0'::pg_lsn, wal_records, wal_fpi FROM pg_stat_wal"
            ).fetchone()
            assert wal is not None
        values = dict(zip(DATABASE_COUNTERS, (int(v) for v in row), strict=True))
        values.update(wal_bytes=int(wal[0]), wal_records=int(wal[1]), wal_fpi=int(wal[2]))
        return values

    def drop(self) -> None:
        with connect(self.admin_url) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")


@contextmanager
def _server(database_url: str | None) -> Iterator[Server]:
    private: Any = None
    if database_url is None:
        sys.path.insert(0, str(BENCH_DIR.parent / "tests"))
        from private_server import PrivateServer

        private = PrivateServer()
        with (private.data / "postgresql.conf").open("a") as conf:
            conf.write(CLUSTER_SETTINGS)
        private.start()
        database_url = private.url
    server = Server(database_url)
    try:
        yield server
    finally:
        try:
            server.drop()
        finally:
            if private is not None:
                private.close()


def drain_once(
    server: Server,
    tree: Path,
    jobs: int,
    concurrency: int,
    part: str,
    variant: str,
    callgrind: Path | None,
) -> dict[str, float]:
    """One drain of ``jobs`` jobs by ``tree``'s worker (``part``: ``worker``, ``loop`` or
    ``server``, the worker unobserved): the server's counters over the drain, the
    backend's calls (``calls.<method>``) and with ``callgrind`` the worker's instructions."""
    prefix = fresh_name("d")
    mode = "loop" if part == "loop" else "worker"
    try:
        _run_child(tree, ["prepare", server.url, prefix, str(jobs), variant])
        before = server.counters()
        with tempfile.TemporaryDirectory() as scratch:
            calls_to = Path(scratch) / "calls.json"
            _run_child(
                tree,
                [
                    "drain",
                    server.url,
                    prefix,
                    str(jobs),
                    str(concurrency),
                    mode,
                    variant,
                    str(calls_to),
                ],
                callgrind=callgrind,
            )
            calls = json.loads(calls_to.read_text())
        after = server.counters()
        with connect(server.url) as conn:
            left = conn.execute(
                f"SELECT count(*) FROM {prefix}_jobs WHERE status <> 'completed'"
            ).fetchone()
            assert left is not None
            if left[0]:
                raise RuntimeError(f"{left[0]} jobs not completed in {prefix}")
    finally:
        with connect(server.url) as conn:
            drop_prefix(conn, prefix)
    figures: dict[str, float] = {name: after[name] - before[name] for name in after}
    figures.update({f"calls.{name}": count for name, count in calls.items()})
    if callgrind is not None:
        figures["instructions"] = _summary(callgrind)
    return figures


def per_job(
    server: Server, tree: Path, args: argparse.Namespace, part: str, variant: str, tag: str
) -> dict[str, float]:
    """(figures at ``--jobs + --extra`` minus figures at ``--jobs``) / ``--extra``."""
    counted = part in ("worker", "loop")
    with tempfile.TemporaryDirectory() as scratch:
        outs = [Path(scratch) / f"{part}-{tag}-low.out", Path(scratch) / f"{part}-{tag}-high.out"]
        low, high = (
            drain_once(
                server, tree, jobs, args.concurrency, part, variant, out if counted else None
            )
            for jobs, out in ((args.jobs, outs[0]), (args.jobs + args.extra, outs[1]))
        )
        if args.keep_outputs is not None and counted:
            args.keep_outputs.mkdir(parents=True, exist_ok=True)
            for out in outs:
                shutil.copy(out, args.keep_outputs / out.name)
    names = set(low) | set(high)
    return {name: (high.get(name, 0) - low.get(name, 0)) / args.extra for name in sorted(names)}


def delay_per_call(url: str, tree: Path, calls: int, extra: int) -> float:
    """``instructions.py``'s count per ``.delay()`` (writer ``after``) under ``tree``."""
    import instructions

    env = _child_env(tree)
    low = instructions._instructions(url, "after", calls, env=env)
    high = instructions._instructions(url, "after", calls + extra, env=env)
    return (high - low) / extra


def _number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _table(results: dict[str, list[dict[str, float]]], figure: str, unit: str) -> None:
    names = [name for name, samples in results.items() if samples]
    if not names:
        return
    print(f"\n{figure}, per {unit}")
    print(f"{'code':<18} {'samples':<60} {'median':>10} {'ratio':>7}")
    base = statistics.median(s.get(figure, 0.0) for s in results[names[0]])
    for name in names:
        values = [s.get(figure, 0.0) for s in results[name]]
        middle = statistics.median(values)
        shown = ", ".join(_number(v) for v in values)
        ratio = f"{middle / base:.4f}" if base else "-"
        print(f"{name:<18} {shown:<60} {_number(middle):>10} {ratio:>7}")


def _adjusted(
    worker: dict[str, list[dict[str, float]]], server: dict[str, list[dict[str, float]]]
) -> None:
    """The worker's instructions per job at the unobserved drain's transactions per job:
    one least-squares slope over every code's samples (each centred on its own mean)."""
    names = [name for name, samples in worker.items() if samples]
    centred = []
    for name in names:
        xs = [s["xact_commit"] for s in worker[name]]
        ys = [s["instructions"] for s in worker[name]]
        mx, my = statistics.mean(xs), statistics.mean(ys)
        centred += [(x - mx, y - my) for x, y in zip(xs, ys, strict=True)]
    spread = sum(x * x for x, _ in centred)
    if not spread:
        return
    slope = sum(x * y for x, y in centred) / spread
    print("\ninstructions per job at the unobserved drain's transactions per job")
    print(f"(slope {slope:,.0f} instructions per transaction per job)")
    print(f"{'code':<18} {'transactions/job':>17} {'instructions':>13} {'ratio':>7}")
    base = None
    for name in names:
        samples = worker[name]
        at = statistics.median(s["xact_commit"] for s in server.get(name) or samples)
        mx = statistics.mean(s["xact_commit"] for s in samples)
        value = statistics.mean(s["instructions"] for s in samples) + slope * (at - mx)
        base = value if base is None else base
        print(f"{name:<18} {at:>17.4f} {_number(value):>13} {value / base:>7.4f}")


#: The figures of each part printed as tables (every sample is in ``--json``).
FIGURES = {
    "worker": (
        "instructions",
        "xact_commit",
        "calls.claim",
        "calls.claim_limited",
        "calls.finish",
        "calls.kind_controls",
    ),
    "loop": ("instructions", "xact_commit", "wal_bytes", "blks_hit", "calls.kind_controls"),
    "server": (
        "xact_commit",
        "wal_bytes",
        "wal_records",
        "wal_fpi",
        "blks_hit",
        "blks_read",
        "tup_updated",
        "calls.claim",
        "calls.claim_limited",
        "calls.finish",
    ),
    "delay": ("instructions",),
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument("--trees", default=f"this={BENCH_DIR.parent}")
    parser.add_argument("--variants", default="plain", help=f"of {', '.join(VARIANTS)}")
    parser.add_argument("--database-url", default=None, help="a server (default: a private one)")
    parser.add_argument("--jobs", type=int, default=500)
    parser.add_argument("--extra", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--parts", default="worker,loop,server,delay")
    parser.add_argument("--delay-calls", type=int, default=200)
    parser.add_argument("--delay-extra", type=int, default=1000)
    parser.add_argument("--keep-outputs", type=Path, help="keep callgrind's files here")
    parser.add_argument("--json", type=Path, help="write every sample here")
    parser.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, url, prefix, jobs, *rest = args.child
        if kind == "prepare":
            _prepare_child(url, prefix, int(jobs), rest[0])
        else:
            _drain_child(url, prefix, int(jobs), int(rest[0]), rest[1], rest[2], rest[3])
        return
    trees = {
        name: Path(path).resolve()
        for name, path in (item.split("=", 1) for item in args.trees.split(","))
    }
    codes = [(tree, variant) for tree in trees for variant in args.variants.split(",")]
    parts = args.parts.split(",")
    results: dict[str, dict[str, list[dict[str, float]]]] = {
        part: {f"{tree}/{variant}": [] for tree, variant in codes} for part in parts
    }
    with _server(args.database_url) as server:
        for repeat in range(args.repeats):
            for tree, variant in codes if repeat % 2 == 0 else codes[::-1]:
                code = f"{tree}/{variant}"
                for part in parts:
                    if part == "delay":
                        if variant != "plain":
                            continue
                        sample = {
                            "instructions": delay_per_call(
                                server.url, trees[tree], args.delay_calls, args.delay_extra
                            )
                        }
                    else:
                        sample = per_job(
                            server, trees[tree], args, part, variant, f"{tree}-{variant}-{repeat}"
                        )
                    results[part][code].append(sample)
                    print(
                        f"{part} {code} {repeat}: {json.dumps(sample)}", file=sys.stderr, flush=True
                    )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=2))
    for part in parts:
        print(f"\n== {part} ==")
        for figure in FIGURES[part]:
            _table(results[part], figure, "call" if part == "delay" else "job")
        if part == "worker":
            _adjusted(results["worker"], results.get("server", {}))


if __name__ == "__main__":
    main()
