"""The sections of ``run.py``: each measures one group of figures and turns it into table rows.

A ``Section`` has a ``measure`` (runs against the server, returns its samples,
which go to the results JSON as they are) and a ``figures`` (builds the table
rows from every section's samples, so a figure may use another section's
result as its baseline, e.g. the big-table drain beside the c=8 drain). A
section that was not run leaves no samples; figures that need them say so.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import baseline
import enqueue
import fair_bench
import limits
import offered_load
import peers
import pgbouncer_bench
import raw_pickup
import venturi_bench
import workflow_bench
from workload import Figure, Sizes

#: Enqueues per lockstep turn of the async figures, and the N of the gather figure.
ASYNC_CHUNK = 50
#: Calls per turn of the sequential form of ``.delay()`` (journal, section 15): enough
#: in a row for the caches to stay warm, few enough that the writers still alternate
#: ten times in a --quick run, so the machine's drift is shared.
SEQUENTIAL_BLOCK = 100


@dataclass
class Run:
    """What every section gets: where, how big, how many rounds, and the samples so far."""

    url: str
    sizes: Sizes
    rounds: int
    quick: bool
    run_dir: Path
    profile_dir: Path | None
    offered_minutes: float
    xmin_phase: float
    samples: dict[str, Any] = field(default_factory=dict)

    def get(self, section: str, key: str) -> Any:
        """One sample of another section (``None`` when that section did not run)."""
        found = self.samples.get(section)
        return found.get(key) if isinstance(found, dict) else None


@dataclass(frozen=True)
class Section:
    """One part of the suite; ``quick``/``full``: whether it runs by default in that mode."""

    name: str
    about: str
    measure: Callable[[Run], Any]
    figures: Callable[[Run], list[Figure]]
    quick: bool = True
    full: bool = True


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def attempt(name: str, run: Callable[[], Any]) -> Any:
    """Run one measurement; a failure becomes its message so the rest of the suite goes on."""
    log(f"  {name} ...")
    started = time.perf_counter()
    try:
        value = run()
    except Exception as exc:
        value = f"failed: {type(exc).__name__}: {exc}"
    log(f"    {_short(value)}  ({time.perf_counter() - started:.1f}s)")
    return value


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:,.0f}"
    if isinstance(value, dict):
        return ", ".join(f"{k}={_short(v)}" for k, v in value.items())
    if isinstance(value, list):
        return "[" + "; ".join(_short(v) for v in value) + "]"
    return str(value)


def _pick(result: Any, key: str) -> Any:
    """One writer's figure from a lockstep result, or the failure message."""
    return result[key] if isinstance(result, dict) else result


def paired(
    venturi: list[Any] | None, baseline: list[Any] | None
) -> tuple[float | None, float | None]:
    """(venturi, baseline) of the round whose ratio is the median of the rounds': the
    enqueue writers are timed against each other within a round, so a round's pair
    belongs together, while the best of each alone may come from different rounds."""
    rounds = [
        (v / b, v, b)
        for v, b in zip(venturi or [], baseline or [], strict=False)
        if not isinstance(v, str) and not isinstance(b, str) and b
    ]
    if not rounds:
        return best(venturi), best(baseline)
    _, v, b = sorted(rounds)[(len(rounds) - 1) // 2]
    return v, b


def best(samples: list[Any] | None, key: Callable[[Any], float] = lambda v: v) -> float | None:
    """The best (highest) of the samples that are figures; None when every one failed."""
    values = [key(s) for s in samples or [] if not isinstance(s, str)]
    return max(values) if values else None


def rate(sample: dict[str, Any]) -> float:
    return float(sample["jobs_per_s"])


def ratio(figure: Figure, *, at_least: float | None = None, at_most: float | None = None) -> Figure:
    """Fill ``figure.ratio`` (venturi / baseline) and ``met`` against the bound given."""
    if figure.venturi is None or not figure.baseline:
        return figure
    figure.ratio = figure.venturi / figure.baseline
    if at_least is not None:
        figure.met = figure.ratio >= at_least
    if at_most is not None:
        figure.met = figure.ratio <= at_most
    return figure


def absolute(figure: Figure, *, at_most: float) -> Figure:
    """``met`` for a figure with an absolute bound (no baseline)."""
    if figure.venturi is not None:
        figure.met = figure.venturi <= at_most
    return figure


def peer_figures(run: Run, key: str) -> dict[str, float | str]:
    found: dict[str, float | str] = {}
    for library, result in (run.samples.get("peers") or {}).items():
        if isinstance(result, dict):
            value = result.get(key)
            found[library] = value if value is not None else "n/a"
        else:
            found[library] = str(result)
    return found


def failure_row(key: str, label: str, sample: Any) -> list[Figure]:
    """The row of a section whose measurement failed: its message as the note."""
    return [Figure(key, label, "", notes=str(sample))]


# -- enqueue -------------------------------------------------------------------------------


def measure_enqueue(run: Run) -> dict[str, list[Any]]:
    sizes = run.sizes
    found: dict[str, list[Any]] = {}

    def keep(key: str, value: Any) -> None:
        found.setdefault(key, []).append(value)

    writers = (
        ("insert", "raw"),
        ("insert_seed", "seed"),
        ("insert_schema", "venturi_schema"),
        ("delay", "venturi"),
    )
    for n in range(run.rounds):
        log(f"enqueue, round {n + 1}/{run.rounds}")
        for form, block in (("", 1), ("_sequential", SEQUENTIAL_BLOCK)):
            paired = attempt(
                "single: raw INSERT | INSERT into the seed's tables | into venturi's | .delay() "
                + ("(lockstep)" if block == 1 else f"({block} in a row per turn)"),
                lambda block=block: enqueue.single(run.url, sizes.single_inserts, block),
            )
            for key, writer in writers:
                keep(key + form, _pick(paired, writer))
        paired = attempt(
            "bulk: raw COPY | COPY into the seed's tables | into venturi's | delay_many (lockstep)",
            lambda: enqueue.bulk(run.url, sizes.bulk, sizes.bulk_batch),
        )
        for key, writer in (
            ("copy", "raw"),
            ("copy_seed", "seed"),
            ("copy_schema", "venturi_schema"),
            ("delay_many", "venturi"),
        ):
            keep(key, _pick(paired, writer))
        paired = attempt(
            f".delay() | await .adelay() | gather of {ASYNC_CHUNK} .adelay() (lockstep)",
            lambda: enqueue.asynchronous(run.url, sizes.single_inserts, ASYNC_CHUNK),
        )
        for key in ("delay_chunked", "adelay", "adelay_gather", "seed_sync", "seed_async"):
            keep(key, _pick(paired, key.removesuffix("_chunked")))
    return found


def _delay_rows(run: Run, count: int, form: str) -> list[Figure]:
    """``.delay()`` in one form beside the seed's INSERT (the target), and as info beside
    the minimal table and venturi's own (every migration)."""
    s = run.samples["enqueue"]
    key = "" if form == "lockstep" else "_sequential"
    single, seed = paired(s.get("delay" + key), s.get("insert_seed" + key))
    label = (
        "lockstep, one call per writer per turn"
        if form == "lockstep"
        else f"sequential, {SEQUENTIAL_BLOCK} calls per writer in a row"
    )
    return [
        ratio(
            Figure(
                f"enqueue_single{key}",
                f"enqueue: single .delay() ({count:,}; {label})",
                "jobs/s",
                venturi=single,
                baseline=seed,
                baseline_label="raw single-row INSERT, autocommit, on the seed's own tables "
                f"(V1-V3 only), {form}",
                target=">= 0.9",
                peers=peer_figures(run, "enqueue_single") if form == "lockstep" else {},
            ),
            at_least=0.9,
        ),
        ratio(
            Figure(
                f"enqueue_single{key}_minimal",
                "  the same .delay(), vs INSERT into a minimal table",
                "jobs/s",
                venturi=best(s.get("delay" + key)),
                baseline=best(s.get("insert" + key)),
                baseline_label=f"raw single-row INSERT, autocommit, minimal table, {form}",
                target="(info)",
            )
        ),
        ratio(
            Figure(
                f"enqueue_single{key}_venturi_schema",
                "  the same .delay(), vs INSERT into venturi's own table (V1-V11)",
                "jobs/s",
                venturi=best(s.get("delay" + key)),
                baseline=best(s.get("insert_schema" + key)),
                baseline_label=f"raw single-row INSERT into a table with every migration, {form}",
                target="(info)",
            )
        ),
    ]


def enqueue_figures(run: Run) -> list[Figure]:
    s, sizes = run.samples["enqueue"], run.sizes
    bulk, copy_seed = paired(s["delay_many"], s.get("copy_seed"))
    adelay, chunked_delay = paired(s["adelay"], s["delay_chunked"])
    awaited_insert, plain_insert = paired(s.get("seed_async"), s.get("seed_sync"))
    adelay_beside_awaited, awaited_beside_adelay = paired(s["adelay"], s.get("seed_async"))
    chunked = f"venturi .delay() in a loop, same lockstep ({ASYNC_CHUNK} per turn)"
    return [
        *_delay_rows(run, sizes.single_inserts, "lockstep"),
        *_delay_rows(run, sizes.single_inserts, "sequential"),
        ratio(
            Figure(
                "enqueue_bulk",
                f"enqueue: delay_many ({sizes.bulk:,}, batches of {sizes.bulk_batch:,})",
                "jobs/s",
                venturi=bulk,
                baseline=copy_seed,
                baseline_label=f"raw COPY into the seed's own tables (V1-V3 only), "
                f"{sizes.bulk_batch:,} rows per transaction",
                target=">= 0.8",
                peers=peer_figures(run, "enqueue_bulk"),
            ),
            at_least=0.8,
        ),
        ratio(
            Figure(
                "enqueue_bulk_minimal",
                "  the same delay_many, vs COPY into a minimal table",
                "jobs/s",
                venturi=best(s["delay_many"]),
                baseline=best(s["copy"]),
                baseline_label=f"raw COPY, {sizes.bulk_batch:,} rows per transaction, "
                "minimal table",
                target="(info)",
            )
        ),
        ratio(
            Figure(
                "enqueue_bulk_venturi_schema",
                "  the same delay_many, vs COPY into venturi's own table (V1-V11)",
                "jobs/s",
                venturi=best(s["delay_many"]),
                baseline=best(s["copy_schema"]),
                baseline_label="raw COPY into a table with every migration",
                target="(info)",
            )
        ),
        ratio(
            Figure(
                "enqueue_adelay",
                f"enqueue: await .adelay() in a loop ({sizes.single_inserts:,})",
                "jobs/s",
                venturi=adelay,
                baseline=chunked_delay,
                baseline_label=chunked,
                target=">= 0.9 (within 10%)",
            ),
            at_least=0.9,
        ),
        ratio(
            Figure(
                "enqueue_adelay_seed",
                "  the same adelay, vs the seed INSERT awaited with plain psycopg",
                "jobs/s",
                venturi=adelay_beside_awaited,
                baseline=awaited_beside_adelay,
                baseline_label="the seed INSERT on a psycopg AsyncConnection of the same "
                f"loop, same lockstep ({ASYNC_CHUNK} per turn)",
                target="(info)",
            )
        ),
        ratio(
            Figure(
                "enqueue_driver_await",
                "  the driver's own: the seed INSERT awaited, vs the same INSERT not",
                "jobs/s",
                venturi=awaited_insert,
                baseline=plain_insert,
                baseline_label="the same INSERT on a psycopg Connection, same lockstep "
                f"({ASYNC_CHUNK} per turn)",
                target="(info)",
            )
        ),
        ratio(
            Figure(
                "enqueue_adelay_gather",
                f"enqueue: asyncio.gather of {ASYNC_CHUNK} .adelay() ({sizes.single_inserts:,})",
                "jobs/s",
                venturi=best(s["adelay_gather"]),
                baseline=best(s["delay_chunked"]),
                baseline_label=chunked,
                target="(info)",
            )
        ),
    ]


# -- drains --------------------------------------------------------------------------------


def measure_drain(run: Run) -> dict[str, list[Any]]:
    url, count, run_dir = run.url, run.sizes.drain, run.run_dir
    found: dict[str, list[Any]] = {}

    def keep(key: str, name: str, measure: Callable[[], Any]) -> None:
        found.setdefault(key, []).append(attempt(name, measure))

    def raw() -> baseline.RawQueue:
        return baseline.RawQueue(url)

    def seed() -> baseline.VenturiSchemaTable:
        return baseline.VenturiSchemaTable(url, count, seed=True)

    for n in range(run.rounds):
        log(f"drain, round {n + 1}/{run.rounds}")
        profile = (
            run.profile_dir / "drain_c8.speedscope.json" if run.profile_dir and n == 0 else None
        )
        keep("limit_1", "raw claim loop LIMIT 1", lambda: baseline.drain(raw(), count, 1))
        keep("c1", "venturi drain c=1", lambda: venturi_bench.drain(url, count, 1, run_dir))
        keep("limit_50", "raw claim loop LIMIT 50", lambda: baseline.drain(raw(), count, 50))
        keep(
            "seed_limit_50",
            "raw claim loop LIMIT 50 on the seed's tables",
            lambda: baseline.drain(seed(), count, 50),
        )
        keep("limit_8", "raw claim loop LIMIT 8", lambda: baseline.drain(raw(), count, 8))
        keep(
            "c8",
            "venturi drain c=8",
            lambda profile=profile: venturi_bench.drain(url, count, 8, run_dir, profile=profile),
        )
        keep(
            "threads_8",
            "raw claim loop LIMIT 50, 8 threads (one connection each)",
            lambda: baseline.drain_threads(raw(), count, 50, 8),
        )
        keep(
            "seed_threads_8",
            "raw claim loop LIMIT 50, 8 threads, on the seed's tables",
            lambda: baseline.drain_threads(seed(), count, 50, 8),
        )
        keep(
            "processes_2",
            "venturi drain, 2 worker processes at c=8",
            lambda: venturi_bench.drain_processes(url, count, 8, 2, run_dir),
        )
        keep(
            "async",
            "venturi drain, async def no-op, c=8 + async_concurrency 100",
            lambda: venturi_bench.drain(url, count, 8, run_dir, is_async=True),
        )
    return found


def _beside_the_seed_loop(
    key: str,
    label: str,
    venturi: float | None,
    seed: float | None,
    minimal: float | None,
    connections: str,
) -> list[Figure]:
    """A drain beside the raw loop on the seed's own tables (the target, issue 34), and
    that loop beside the same loop on the minimal table: the schema's share (info)."""
    return [
        ratio(
            Figure(
                key,
                label,
                "jobs/s",
                venturi=venturi,
                baseline=seed,
                baseline_label="raw LIMIT 50 loop on the seed's own tables (V1-V3 only: lease, "
                f"fence, journal entry), {connections}",
                target=">= 0.9",
            ),
            at_least=0.9,
        ),
        ratio(
            Figure(
                f"{key}_seed_ceiling",
                "  ceiling: that raw loop on the seed's tables, vs the minimal table",
                "jobs/s",
                venturi=seed,
                baseline=minimal,
                baseline_label=f"the raw loop on the minimal table, {connections}",
                target="(info: the schema's share)",
            )
        ),
    ]


def drain_c8(run: Run) -> float | None:
    return best(run.get("drain", "c8"), rate)


def drain_figures(run: Run) -> list[Figure]:
    s, count = run.samples["drain"], run.sizes.drain
    c8 = drain_c8(run)
    peer_drains = [v for v in peer_figures(run, "drain_c8").values() if isinstance(v, float)]
    return [
        ratio(
            Figure(
                "drain_c1",
                f"drain {count:,} no-op jobs, concurrency 1",
                "jobs/s",
                venturi=best(s["c1"], rate),
                baseline=best(s["limit_1"]),
                baseline_label="raw claim+complete loop, LIMIT 1, minimal table",
                target="(info)",
            )
        ),
        *_beside_the_seed_loop(
            "drain_c8",
            f"drain {count:,} no-op jobs, concurrency 8 (journal written)",
            c8,
            best(s.get("seed_limit_50")),
            best(s["limit_50"]),
            "one connection",
        ),
        ratio(
            Figure(
                "drain_c8_minimal",
                "  the same c=8 drain, vs the raw loop on a minimal table",
                "jobs/s",
                venturi=c8,
                baseline=best(s["limit_50"]),
                baseline_label="raw claim+complete loop, LIMIT 50, one connection, minimal "
                "table, no journal",
                target="(info)",
                peers=peer_figures(run, "drain_c8"),
            )
        ),
        ratio(
            Figure(
                "drain_c8_vs_limit_8",
                "  the same c=8 drain, vs a raw loop claiming 8 at a time",
                "jobs/s",
                venturi=c8,
                baseline=best(s["limit_8"]),
                baseline_label="raw claim+complete loop, LIMIT 8, minimal table",
                target="(info)",
            )
        ),
        ratio(
            Figure(
                "drain_c8_vs_best_peer",
                "  the same c=8 drain, vs the best Python peer",
                "jobs/s",
                venturi=c8,
                baseline=max(peer_drains) if peer_drains else None,
                baseline_label="the fastest peer drain of this run (peers section)",
                target=">= 3",
                notes="" if peer_drains else "no peer figure in this run (peers skipped or failed)",
            ),
            at_least=3.0,
        ),
        *_beside_the_seed_loop(
            "drain_2_processes",
            f"drain {count:,} no-op jobs, 2 worker processes at c=8",
            best(s["processes_2"], rate),
            best(s.get("seed_threads_8")),
            best(s["threads_8"]),
            "8 threads x 1 connection",
        ),
        ratio(
            Figure(
                "drain_2_processes_minimal",
                "  the same 2-process drain, vs the raw 8-thread loop on a minimal table",
                "jobs/s",
                venturi=best(s["processes_2"], rate),
                baseline=best(s["threads_8"]),
                baseline_label="raw claim+complete loop, LIMIT 50, 8 threads x 1 connection, "
                "minimal table",
                target="(info)",
            )
        ),
        ratio(
            Figure(
                "drain_async",
                f"drain {count:,} async def no-op jobs (async_concurrency 100)",
                "jobs/s",
                venturi=best(s["async"], rate),
                baseline=c8,
                baseline_label="the sync no-op drain, concurrency 8, same run (above)",
                target="(info)",
            )
        ),
    ]


# -- pickup latency ------------------------------------------------------------------------


#: Pickup runs in rounds, the raw loops and venturi in turn (the order rotating), and each
#: figure is the median of the rounds': a spell of slow WAL flushes on a shared machine
#: then falls on every writer, not on whichever ran in it (journal, section 21).
PICKUP_ROUNDS = 3
#: The raw loops measured beside venturi: the seed's own tables (every target's baseline,
#: issue 34) and the minimal table (the schema's share, information).
PICKUP_BASELINES = {"raw_seed": "seed", "raw": "minimal"}


def measure_pickup(run: Run) -> dict[str, list[Any]]:
    sizes = run.sizes
    probes, gap = sizes.latency_probes, sizes.latency_gap
    writers: dict[str, Callable[[], Any]] = {
        name: lambda schema=schema: raw_pickup.measure(run.url, probes, gap, schema)
        for name, schema in PICKUP_BASELINES.items()
    }
    writers["venturi"] = lambda: venturi_bench.pickup_latency(run.url, probes, gap, run.run_dir)
    names = list(writers)
    samples: dict[str, list[Any]] = {name: [] for name in names}
    for turn in range(max(PICKUP_ROUNDS, run.rounds)):
        for name in names[turn % len(names) :] + names[: turn % len(names)]:
            samples[name].append(attempt(f"pickup round {turn + 1}: {name}", writers[name]))
    return samples


def _median_pickup(results: list[Any]) -> dict[str, Any] | str:
    """The median of the rounds' figures, or the first failure when no round succeeded."""
    measured = [r for r in results if isinstance(r, dict)]
    if not measured:
        return str(results[0]) if results else "not measured"
    return {
        "probes": sum(r["probes"] for r in measured),
        **{k: statistics.median(r[k] for r in measured) for k in ("p50_ms", "p95_ms", "p99_ms")},
    }


def pickup_figures(run: Run) -> list[Figure]:
    samples = run.samples["pickup"]
    ven = _median_pickup(samples["venturi"])
    if not isinstance(ven, dict):
        return failure_row("pickup", "pickup latency", ven)
    seed, minimal = _median_pickup(samples["raw_seed"]), _median_pickup(samples["raw"])
    rounds = len(samples["venturi"])
    figures = []
    for key, bound in (("p50_ms", 1.3), ("p95_ms", None), ("p99_ms", 2.0)):
        figures.append(
            ratio(
                Figure(
                    f"pickup_{key}",
                    f"pickup latency {key[:3]}, idle worker ({ven['probes']} probes, "
                    f"median of {rounds} rounds)",
                    "ms",
                    venturi=ven[key],
                    baseline=seed[key] if isinstance(seed, dict) else None,
                    baseline_label="raw LISTEN/NOTIFY loop on the seed's own tables (V1-V3), "
                    "its own process, measured the same way, rounds alternating",
                    target=f"<= {bound:g}x" if bound else "(info)",
                    notes="" if isinstance(seed, dict) else f"raw baseline: {seed}",
                ),
                at_most=bound,
            )
        )
        figures.append(
            ratio(
                Figure(
                    f"pickup_{key}_vs_minimal",
                    "  the same, vs the raw loop on a minimal table",
                    "ms",
                    venturi=ven[key],
                    baseline=minimal[key] if isinstance(minimal, dict) else None,
                    baseline_label="raw LISTEN/NOTIFY loop, minimal table",
                    target="(info)",
                    notes="" if isinstance(minimal, dict) else f"raw baseline: {minimal}",
                )
            )
        )
    return figures


# -- the big table, RSS, peers ------------------------------------------------------------


def measure_big_table(run: Run) -> Any:
    sizes = run.sizes
    return attempt(
        f"venturi drain c=8 beside {sizes.terminal_rows:,} terminal + "
        f"{sizes.future_rows:,} future rows",
        lambda: venturi_bench.big_table_drains(
            run.url,
            sizes.drain,
            8,
            run.rounds,
            run.run_dir,
            terminal_rows=sizes.terminal_rows,
            future_rows=sizes.future_rows,
            profile=run.profile_dir / "drain_big.speedscope.json" if run.profile_dir else None,
        ),
    )


def big_table_figures(run: Run) -> list[Figure]:
    big, sizes = run.samples["big_table"], run.sizes
    figure = Figure(
        "drain_c8_big_table",
        f"drain c=8 beside {sizes.terminal_rows:,} terminal + {sizes.future_rows:,} future rows",
        "jobs/s",
        baseline=drain_c8(run),
        baseline_label="the same drain on an empty table (drain section)",
        target=">= 0.8",
    )
    if not isinstance(big, dict):
        figure.notes = str(big)
        return [figure]
    figure.venturi = best(big["samples"], rate)
    figure.notes = f"background fill took {big['background_fill_s']} s (untimed)"
    return [ratio(figure, at_least=0.8)]


def measure_rss(run: Run) -> Any:
    sizes = run.sizes
    return attempt(
        "venturi worker RSS",
        lambda: venturi_bench.worker_rss(run.url, sizes.rss_first, sizes.rss_second, run.run_dir),
    )


def rss_figures(run: Run) -> list[Figure]:
    rss, sizes = run.samples["rss"], run.sizes
    figure = Figure(
        "worker_rss",
        "worker peak RSS (VmHWM), concurrency 8",
        "MiB",
        baseline_label=f"after {sizes.rss_first:,} jobs",
        target="<= 1.10 (within 10%)",
    )
    if not isinstance(rss, dict):
        figure.notes = str(rss)
        return [figure]
    figure.baseline = rss["after_first"]["VmHWM"] / 1024
    if "after_second" not in rss:
        figure.notes = "second reading skipped (--quick)"
        return [figure]
    figure.label += f" after {rss['after_second']['jobs']:,} jobs"
    figure.venturi = rss["after_second"]["VmHWM"] / 1024
    return [ratio(figure, at_most=1.10)]


def measure_peers(run: Run) -> dict[str, Any]:
    sizes = run.sizes
    return {
        library: attempt(
            library,
            lambda library=library: peers.measure(
                library,
                run.url,
                single=sizes.single_inserts,
                bulk=sizes.bulk,
                batch=sizes.bulk_batch,
                drain=sizes.drain,
            ),
        )
        for library in peers.LIBRARIES
    }


def no_figures(run: Run) -> list[Figure]:
    """Peers have no rows of their own: their figures are columns of the others'."""
    return []


# -- pgbouncer, limits ---------------------------------------------------------------------


def measure_pgbouncer(run: Run) -> Any:
    jobs = run.sizes.drain
    log_path = run.run_dir / "pgbouncer.log"
    run.run_dir.mkdir(parents=True, exist_ok=True)
    return attempt(
        "through pgbouncer beside direct (1 and 8 worker processes)",
        lambda: pgbouncer_bench.measure(run.url, jobs, run.rounds, log_path),
    )


def pgbouncer_figures(run: Run) -> list[Figure]:
    s = run.samples["pgbouncer"]
    if not isinstance(s, dict):
        return failure_row("pgbouncer", "through pgbouncer", s)
    figures = []
    for processes in (1, 8):
        direct = s.get(f"drain c=8 x {processes} process(es) direct", [])
        bounced = s.get(f"drain c=8 x {processes} process(es) through pgbouncer", [])
        sessions = (
            f"peak server sessions: through pgbouncer "
            f"{max((r['peak_sessions'] for r in bounced), default='-')}, direct "
            f"{max((r['peak_sessions'] for r in direct), default='-')}"
        )
        figure = Figure(
            f"pgbouncer_x{processes}",
            f"drain c=8 x {processes} worker process(es) through pgbouncer (transaction mode)",
            "jobs/s",
            venturi=best(bounced, rate),
            baseline=best(direct, rate),
            baseline_label="the same processes, direct to the server",
            target="(info)",
            notes=sessions,
        )
        figures.append(ratio(figure))
    return figures


def measure_limits(run: Run) -> Any:
    claims, jobs = (300, 2_000) if run.quick else (2_000, 5_000)
    return attempt(
        "claims and drains with a global cap / rate limit declared, not binding",
        lambda: limits.measure(run.url, claims, jobs, max(1, run.rounds - 1)),
    )


def limits_figures(run: Run) -> list[Figure]:
    s = run.samples["limits"]
    if not isinstance(s, dict):
        return failure_row("limits", "limits across workers", s)
    none = s["none"]
    figures = []
    for name, label in (
        ("global_concurrency=10000", "global_concurrency=10000"),
        ("rate_limit=1000000/s", "rate_limit=1000000/s"),
    ):
        figure = Figure(
            f"limits_{name.split('=')[0]}",
            f"in-process drain c=8 with {label} declared, not binding (cost when used)",
            "jobs/s",
            venturi=s[name]["drain_jobs_per_s"],
            baseline=none["drain_jobs_per_s"],
            baseline_label="the same in-process drain, no limit declared",
            target="(info)",
            notes=f"claim of 8: {s[name]['ms_per_claim']:.3f} ms vs "
            f"{none['ms_per_claim']:.3f} ms without (median, lockstep)",
        )
        figures.append(ratio(figure))
    return figures


# -- offered load (private cluster) --------------------------------------------------------


def measure_offered_load(run: Run) -> Any:
    return attempt(
        f"steady 2,000 jobs/s for {run.offered_minutes:g} min on a private cluster",
        lambda: offered_load.steady(2000.0, run.offered_minutes, run.run_dir / "steady"),
    )


def offered_load_figures(run: Run) -> list[Figure]:
    s = run.samples["offered_load"]
    if not isinstance(s, dict):
        return failure_row("offered_load", "offered load", s)
    summary = s["summary"]
    minutes = f"{run.offered_minutes:g} min"
    return [
        Figure(
            "offered_completed",
            f"offered 2,000 jobs/s for {minutes} (private cluster, autovacuum on): completed/s",
            "ratio",
            venturi=summary["completed_over_offered"],
            target=">= 0.98",
            met=summary["completed_over_offered"] >= 0.98,
        ),
        absolute(
            Figure(
                "offered_lag_p99",
                "  lag p99, worst 10 s interval",
                "ms",
                venturi=summary["lag_p99_ms_worst_interval"],
                target="<= 50 ms",
                notes=f"median interval's p99 {summary['lag_p99_ms_median_interval']} ms; "
                f"intervals with p99 over 50 ms: {summary['intervals_over_50_ms']}",
            ),
            at_most=50.0,
        ),
        Figure(
            "offered_dead_tuples",
            "  dead tuples in the jobs table, max over the run",
            "rows",
            venturi=summary["dead_jobs_max"],
            target="(bounded)",
            notes=f"at the end {summary['dead_jobs_last']} (every interval in the JSON)",
        ),
        ratio(
            Figure(
                "offered_rss",
                "  worker RSS at the end",
                "MiB",
                venturi=summary["rss_last_mib"],
                baseline=summary["rss_first_mib"],
                baseline_label="worker RSS after the first interval",
                target="<= 1.10 (flat)",
            ),
            at_most=1.10,
        ),
    ]


def measure_xmin(run: Run) -> Any:
    return attempt(
        f"xmin horizon held: 800 jobs/s, c=16, {run.xmin_phase:g} s before / held / after",
        lambda: offered_load.xmin_hold(800.0, run.xmin_phase, run.run_dir / "xmin"),
    )


def xmin_figures(run: Run) -> list[Figure]:
    s = run.samples["xmin"]
    if not isinstance(s, dict):
        return failure_row("xmin", "xmin horizon hold", s)
    phases = s["phases"]
    figures = []
    for phase, target in (("before", "(info)"), ("hold", "<= 10 ms"), ("after", "<= 10 ms")):
        p = phases.get(phase, {})
        figure = Figure(
            f"xmin_claim_p95_{phase}",
            f"claim p95 at 800 jobs/s, c=16, {phase} a {run.xmin_phase:g} s xmin hold"
            if phase != "hold"
            else f"claim p95 at 800 jobs/s, c=16, during a {run.xmin_phase:g} s xmin hold",
            "ms",
            venturi=p.get("p95_ms"),
            target=target,
            notes=f"dead jobs rows {p.get('dead_jobs_first_last')}, "
            f"{p.get('claims')} claims, {p.get('jobs_per_claim')} jobs/claim",
        )
        figures.append(absolute(figure, at_most=10.0) if phase != "before" else figure)
    return figures


def write_plans(run: Run) -> None:
    """The xmin section's EXPLAIN output beside the results."""
    s = run.samples.get("xmin")
    if isinstance(s, dict):
        for name, plan in s.get("explain", {}).items():
            (run.run_dir / "xmin" / f"explain-{name}.txt").write_text(plan)


# -- workflows (ADR 0125) and fair claims (ADR 0129) -------------------------------------


def measure_workflows(run: Run) -> Any:
    members, jobs = (2_000, 5_000) if run.quick else (10_000, 20_000)
    return attempt(
        f"a {members:,}-member chord beside a plain drain; the c=8 drain before V9 and after",
        lambda: workflow_bench.workflow_figures(
            run.url, members=members, jobs=jobs, rounds=max(1, run.rounds - 1)
        ),
    )


def workflows_figures(run: Run) -> list[Figure]:
    s = run.samples["workflows"]
    if not isinstance(s, dict):
        return failure_row("workflows", "chords", s)
    chord, drain = s["chord_vs_plain"], s["drain_c8_no_workflow"]
    return [
        ratio(
            Figure(
                "chord_wall_time",
                f"{chord['members']:,}-member chord + callback, wall time, one c=8 worker",
                "ms",
                venturi=chord["chord_span_s"] * 1000,
                baseline=chord["plain_span_s"] * 1000,
                baseline_label=f"a plain drain of {chord['members']:,} jobs, same worker",
                target="(info)",
            )
        ),
        ratio(
            Figure(
                "drain_c8_no_workflow",
                "c=8 drain of plain jobs, this checkout (no workflow in it)",
                "jobs/s",
                venturi=drain["after_jobs_per_s"],
                baseline=drain["before_jobs_per_s"],
                baseline_label=f"the same drain at {drain['base_commit']} (before V9)",
                target=">= 0.95 (no slower than noise)",
            ),
            at_least=0.95,
        ),
    ]


def measure_fair(run: Run) -> Any:
    claims, jobs = (300, 2_000) if run.quick else (1_000, 5_000)
    return attempt(
        "claims and drains with fair_key declared (2 and 1,000 keys) beside none",
        lambda: fair_bench.measure(
            run.url, claims=claims, jobs=jobs, rounds=max(1, run.rounds - 1)
        ),
    )


def fair_figures(run: Run) -> list[Figure]:
    s = run.samples["fair"]
    if not isinstance(s, fair_bench.Figures):
        return failure_row("fair", "fair claims", s)
    plain_rate, plain_claim = s.drain_jobs_per_second["plain"], s.ms_per_claim["plain"]
    return [
        ratio(
            Figure(
                f"fair_{name.split(', ')[1].replace(',', '').replace(' ', '_')}",
                f"in-process drain c=8, fair_key over {name.split(', ')[1]} (cost when used)",
                "jobs/s",
                venturi=s.drain_jobs_per_second[name],
                baseline=plain_rate,
                baseline_label="the same drain, no fair_key declared",
                target="(info)",
                notes=f"claim of 8: {s.ms_per_claim[name]:.3f} ms vs {plain_claim:.3f} ms "
                "without (median, lockstep)",
            )
        )
        for name in s.drain_jobs_per_second
        if name != "plain"
    ]
