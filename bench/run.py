"""venturi's benchmark suite: every figure beside its baseline, in one run, on one server.

    python bench/run.py [--quick] [--database-url URL] [--rounds N] [--no-peers] [--profile]

The URL defaults to $VENTURI_DATABASE_URL, else
postgresql://postgres@127.0.0.1:5432/test. Every figure runs on tables the
suite creates under fresh names and drops afterwards. Throughput figures are
measured ``--rounds`` times (default 3, ``--quick`` 1), venturi and its raw
baseline interleaved within each round, and the best round of each is kept:
on a shared machine, interference only ever slows a round down.

Progress goes to stderr; stdout gets one table. The full results, every
sample included, are written to bench/results/<timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import baseline
import enqueue
import peers
import venturi_bench
from workload import Figure, Sizes, connect, database_url

RESULTS_DIR = Path(__file__).resolve().parent / "results"
#: Enqueues per lockstep turn of the async figures, and the N of the gather figure.
ASYNC_CHUNK = 50


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


def machine(url: str) -> dict[str, Any]:
    with connect(url) as conn:
        version = conn.execute("SHOW server_version").fetchone()
        settings = dict(
            conn.execute(
                "SELECT name, current_setting(name) FROM pg_settings WHERE name IN "
                "('shared_buffers', 'synchronous_commit', 'fsync', 'wal_level', 'max_connections', "
                "'autovacuum')"
            ).fetchall()
        )
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "postgresql": version[0] if version else "?",
        "server_settings": settings,
        "load_average_at_start": os.getloadavg(),
    }


def _pick(result: Any, key: str) -> Any:
    """One writer's figure from a lockstep result, or the failure message."""
    return result[key] if isinstance(result, dict) else result


def best(samples: list[Any], key: Callable[[Any], float] = lambda v: v) -> float | None:
    """The best (highest) of the samples that are figures; None when every one failed."""
    values = [key(s) for s in samples if not isinstance(s, str)]
    return max(values) if values else None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="smaller sizes, one round, no 100k RSS"
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--rounds", type=int, default=None, help="rounds per throughput figure")
    parser.add_argument("--no-peers", action="store_true", help="skip procrastinate and pgqueuer")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy record the worker during the first c=8 drains (speedscope files in results/)",
    )
    args = parser.parse_args()

    url = database_url(args.database_url)
    sizes = Sizes.quick() if args.quick else Sizes.full()
    rounds = args.rounds or (1 if args.quick else 3)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    run_dir = RESULTS_DIR / stamp
    profile_dir = run_dir if args.profile else None
    started = time.perf_counter()
    info = machine(url)
    log(f"venturi bench: {'quick' if args.quick else 'full'}, {rounds} round(s), {url}")

    raw: dict[str, list[Any]] = {
        k: []
        for k in (
            "insert",
            "insert_venturi_schema",
            "copy",
            "copy_venturi_schema",
            "limit_1",
            "limit_8",
            "limit_50",
        )
    }
    ven: dict[str, list[Any]] = {
        k: []
        for k in (
            "delay",
            "delay_many",
            "drain_c1",
            "drain_c8",
            "drain_async",
            "delay_chunked",
            "adelay",
            "adelay_gather",
        )
    }
    for n in range(rounds):
        log(f"round {n + 1}/{rounds}")
        paired = attempt(
            "enqueue, single: raw INSERT | INSERT into venturi's table | .delay() (lockstep)",
            lambda: enqueue.single(url, sizes.single_inserts),
        )
        raw["insert"].append(_pick(paired, "raw"))
        raw["insert_venturi_schema"].append(_pick(paired, "venturi_schema"))
        ven["delay"].append(_pick(paired, "venturi"))
        paired = attempt(
            "enqueue, bulk: raw COPY | COPY into venturi's table | delay_many (lockstep)",
            lambda: enqueue.bulk(url, sizes.bulk, sizes.bulk_batch),
        )
        raw["copy"].append(_pick(paired, "raw"))
        raw["copy_venturi_schema"].append(_pick(paired, "venturi_schema"))
        ven["delay_many"].append(_pick(paired, "venturi"))
        paired = attempt(
            f".delay() | await .adelay() | gather of {ASYNC_CHUNK} .adelay() (lockstep)",
            lambda: enqueue.asynchronous(url, sizes.single_inserts, ASYNC_CHUNK),
        )
        for key, writer in (
            ("delay_chunked", "delay"),
            ("adelay", "adelay"),
            ("adelay_gather", "adelay_gather"),
        ):
            ven[key].append(_pick(paired, writer))
        raw["limit_1"].append(
            attempt("raw claim loop LIMIT 1", lambda: baseline.drain(url, sizes.drain, 1))
        )
        ven["drain_c1"].append(
            attempt("venturi drain c=1", lambda: venturi_bench.drain(url, sizes.drain, 1, run_dir))
        )
        raw["limit_50"].append(
            attempt("raw claim loop LIMIT 50", lambda: baseline.drain(url, sizes.drain, 50))
        )
        raw["limit_8"].append(
            attempt("raw claim loop LIMIT 8", lambda: baseline.drain(url, sizes.drain, 8))
        )
        profile = profile_dir / "drain_c8.speedscope.json" if profile_dir and n == 0 else None
        ven["drain_c8"].append(
            attempt(
                "venturi drain c=8",
                lambda profile=profile: venturi_bench.drain(
                    url, sizes.drain, 8, run_dir, profile=profile
                ),
            )
        )
        ven["drain_async"].append(
            attempt(
                "venturi drain, async def no-op, c=8 + async_concurrency 100",
                lambda: venturi_bench.drain(url, sizes.drain, 8, run_dir, is_async=True),
            )
        )

    log("once")
    latency = attempt(
        "venturi pickup latency",
        lambda: venturi_bench.pickup_latency(url, sizes.latency_probes, sizes.latency_gap, run_dir),
    )
    big = attempt(
        f"venturi drain c=8 beside {sizes.terminal_rows:,} terminal + "
        f"{sizes.future_rows:,} future rows",
        lambda: venturi_bench.big_table_drains(
            url,
            sizes.drain,
            8,
            rounds,
            run_dir,
            terminal_rows=sizes.terminal_rows,
            future_rows=sizes.future_rows,
            profile=profile_dir / "drain_big.speedscope.json" if profile_dir else None,
        ),
    )
    rss = attempt(
        "venturi worker RSS",
        lambda: venturi_bench.worker_rss(url, sizes.rss_first, sizes.rss_second, run_dir),
    )
    peer_results: dict[str, Any] = {}
    for library in peers.LIBRARIES:
        if args.no_peers:
            peer_results[library] = "skipped: --no-peers"
            continue
        peer_results[library] = attempt(
            library,
            lambda library=library: peers.measure(
                library,
                url,
                single=sizes.single_inserts,
                bulk=sizes.bulk,
                batch=sizes.bulk_batch,
                drain=sizes.drain,
            ),
        )

    figures = build_figures(raw, ven, latency, big, rss, peer_results, sizes)
    elapsed = time.perf_counter() - started
    info["load_average_at_end"] = os.getloadavg()
    table = render(figures, peer_results, info, rounds, elapsed, args.quick)
    print(table)
    run_dir.mkdir(parents=True, exist_ok=True)
    output = RESULTS_DIR / f"{stamp}.json"
    output.write_text(
        json.dumps(
            {
                "started_utc": stamp,
                "mode": "quick" if args.quick else "full",
                "rounds": rounds,
                "elapsed_s": round(elapsed, 1),
                "machine": info,
                "sizes": sizes.__dict__,
                "figures": [f.as_json() for f in figures],
                "samples": {
                    "raw": raw,
                    "venturi": ven,
                    "pickup_latency": latency,
                    "big_table": big,
                    "worker_rss": rss,
                    "peers": peer_results,
                },
            },
            indent=2,
            default=str,
        )
    )
    log(f"results: {output} (worker logs under {run_dir})")


# -- the table ---------------------------------------------------------------------------


def _ratio(figure: Figure, *, at_least: float | None = None, at_most: float | None = None) -> None:
    if figure.venturi is None or not figure.baseline:
        return
    figure.ratio = figure.venturi / figure.baseline
    if at_least is not None:
        figure.met = figure.ratio >= at_least
    if at_most is not None:
        figure.met = figure.ratio <= at_most


def _peer(peer_results: dict[str, Any], key: str) -> dict[str, float | str]:
    found: dict[str, float | str] = {}
    for library, result in peer_results.items():
        if isinstance(result, dict):
            value = result.get(key)
            found[library] = value if value is not None else "n/a"
        else:
            found[library] = str(result)
    return found


def build_figures(
    raw: dict[str, list[Any]],
    ven: dict[str, list[Any]],
    latency: Any,
    big: Any,
    rss: Any,
    peer_results: dict[str, Any],
    sizes: Sizes,
) -> list[Figure]:
    rate = lambda sample: sample["jobs_per_s"]  # noqa: E731
    figures: list[Figure] = []

    single = Figure(
        "enqueue_single",
        f"enqueue: single .delay() ({sizes.single_inserts:,})",
        "jobs/s",
        venturi=best(ven["delay"]),
        baseline=best(raw["insert"]),
        baseline_label="raw single-row INSERT, autocommit",
        target=">= 0.8",
        peers=_peer(peer_results, "enqueue_single"),
    )
    _ratio(single, at_least=0.8)
    bulk = Figure(
        "enqueue_bulk",
        f"enqueue: delay_many ({sizes.bulk:,}, batches of {sizes.bulk_batch:,})",
        "jobs/s",
        venturi=best(ven["delay_many"]),
        baseline=best(raw["copy"]),
        baseline_label=f"raw COPY, {sizes.bulk_batch:,} rows per transaction",
        target=">= 0.6",
        peers=_peer(peer_results, "enqueue_bulk"),
    )
    _ratio(bulk, at_least=0.6)
    drain_c1 = Figure(
        "drain_c1",
        f"drain {sizes.drain:,} no-op jobs, concurrency 1",
        "jobs/s",
        venturi=best(ven["drain_c1"], rate),
        baseline=best(raw["limit_1"]),
        baseline_label="raw claim+complete loop, LIMIT 1",
        target="(info)",
    )
    _ratio(drain_c1)
    drain_c8 = Figure(
        "drain_c8",
        f"drain {sizes.drain:,} no-op jobs, concurrency 8",
        "jobs/s",
        venturi=best(ven["drain_c8"], rate),
        baseline=best(raw["limit_50"]),
        baseline_label="raw claim+complete loop, LIMIT 50",
        target=">= 0.5",
        peers=_peer(peer_results, "drain_c8"),
    )
    _ratio(drain_c8, at_least=0.5)
    single_schema = Figure(
        "enqueue_single_venturi_schema",
        "  the same .delay(), vs INSERT into venturi's own table",
        "jobs/s",
        venturi=single.venturi,
        baseline=best(raw["insert_venturi_schema"]),
        baseline_label="raw single-row INSERT into a migrated venturi jobs table",
        target="(info)",
    )
    bulk_schema = Figure(
        "enqueue_bulk_venturi_schema",
        "  the same delay_many, vs COPY into venturi's own table",
        "jobs/s",
        venturi=bulk.venturi,
        baseline=best(raw["copy_venturi_schema"]),
        baseline_label="raw COPY into a migrated venturi jobs table",
        target="(info)",
    )
    drain_c8_limit_8 = Figure(
        "drain_c8_vs_limit_8",
        "  the same c=8 drain, vs a raw loop claiming 8 at a time",
        "jobs/s",
        venturi=drain_c8.venturi,
        baseline=best(raw["limit_8"]),
        baseline_label="raw claim+complete loop, LIMIT 8 (claims sized to free slots)",
        target="(info)",
    )
    drain_async = Figure(
        "drain_async",
        f"drain {sizes.drain:,} async def no-op jobs on the event loop (async_concurrency 100)",
        "jobs/s",
        venturi=best(ven["drain_async"], rate),
        baseline=drain_c8.venturi,
        baseline_label="the sync no-op drain, concurrency 8, same run (above)",
        target="(info)",
    )
    for figure in (single_schema, bulk_schema, drain_c8_limit_8, drain_async):
        _ratio(figure)
    awaited = Figure(
        "enqueue_adelay",
        f"enqueue: await .adelay() in a loop ({sizes.single_inserts:,})",
        "jobs/s",
        venturi=best(ven["adelay"]),
        baseline=best(ven["delay_chunked"]),
        baseline_label=f"venturi .delay() in a loop, same lockstep ({ASYNC_CHUNK} per turn)",
        target="(info)",
    )
    gathered = Figure(
        "enqueue_adelay_gather",
        f"enqueue: asyncio.gather of {ASYNC_CHUNK} .adelay() ({sizes.single_inserts:,})",
        "jobs/s",
        venturi=best(ven["adelay_gather"]),
        baseline=best(ven["delay_chunked"]),
        baseline_label=f"venturi .delay() in a loop, same lockstep ({ASYNC_CHUNK} per turn)",
        target="(info)",
    )
    for figure in (awaited, gathered):
        _ratio(figure)
    figures += [single, single_schema, bulk, bulk_schema, awaited, gathered]
    figures += [drain_c1, drain_c8, drain_c8_limit_8, drain_async]

    if isinstance(latency, dict):
        for key, bound in (("p50_ms", 3.0), ("p95_ms", None), ("p99_ms", 10.0)):
            figure = Figure(
                f"pickup_{key}",
                f"pickup latency {key[:3]}, idle worker ({latency['probes']} probes)",
                "ms",
                venturi=latency[key],
                target=f"<= {bound:g} ms" if bound else "(info)",
                met=latency[key] <= bound if bound else None,
            )
            figures.append(figure)
    else:
        figures.append(Figure("pickup", "pickup latency", "ms", notes=str(latency)))

    big_figure = Figure(
        "drain_c8_big_table",
        f"drain c=8 beside {sizes.terminal_rows:,} terminal + {sizes.future_rows:,} future rows",
        "jobs/s",
        baseline=drain_c8.venturi,
        baseline_label="the same drain on an empty table (above)",
        target=">= 0.8",
    )
    if isinstance(big, dict):
        big_figure.venturi = best(big["samples"], rate)
        big_figure.notes = f"background fill took {big['background_fill_s']} s (untimed)"
        _ratio(big_figure, at_least=0.8)
    else:
        big_figure.notes = str(big)
    figures.append(big_figure)

    rss_figure = Figure(
        "worker_rss",
        "worker peak RSS (VmHWM), concurrency 8",
        "MiB",
        baseline_label=f"after {sizes.rss_first:,} jobs",
        target="<= 1.10 (within 10%)",
    )
    if isinstance(rss, dict):
        rss_figure.baseline = rss["after_first"]["VmHWM"] / 1024
        if "after_second" in rss:
            rss_figure.label += f" after {rss['after_second']['jobs']:,} jobs"
            rss_figure.venturi = rss["after_second"]["VmHWM"] / 1024
            _ratio(rss_figure, at_most=1.10)
        else:
            rss_figure.notes = "second reading skipped (--quick)"
    else:
        rss_figure.notes = str(rss)
    figures.append(rss_figure)
    return figures


def _fmt(value: float | str | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return "skipped" if value.startswith("skipped") else "failed" if "fail" in value else value
    if unit == "ms" or unit == "MiB":
        return f"{value:,.1f}"
    return f"{value:,.0f}"


def render(
    figures: list[Figure],
    peer_results: dict[str, Any],
    info: dict[str, Any],
    rounds: int,
    elapsed: float,
    quick: bool,
) -> str:
    columns = ["figure", "unit", "venturi", "baseline", "ratio", "target", "met", *peers.LIBRARIES]
    rows = []
    for f in figures:
        rows.append(
            [
                f.label,
                f.unit,
                _fmt(f.venturi, f.unit),
                _fmt(f.baseline, f.unit),
                f"{f.ratio:.2f}" if f.ratio is not None else "-",
                f.target,
                {True: "yes", False: "NO", None: "-"}[f.met],
                *(_fmt(f.peers.get(lib), f.unit) if f.peers else "" for lib in peers.LIBRARIES),
            ]
        )
    widths = [max(len(str(c)), *(len(str(r[i])) for r in rows)) for i, c in enumerate(columns)]
    line = lambda cells: "  ".join(  # noqa: E731
        str(c).ljust(w) if i in (0, 1, 5) else str(c).rjust(w)
        for i, (c, w) in enumerate(zip(cells, widths, strict=True))
    )
    out = [
        f"venturi bench ({'quick' if quick else 'full'}, best of {rounds} round(s), "
        f"{elapsed / 60:.1f} min): PostgreSQL {info['postgresql']}, {info['cpus']} CPUs, "
        f"synchronous_commit={info['server_settings'].get('synchronous_commit')}, "
        f"autovacuum={info['server_settings'].get('autovacuum')}, "
        f"load average {info['load_average_at_start'][0]:.2f} at start, "
        f"{info['load_average_at_end'][0]:.2f} at end",
        line(columns),
        line(["-" * w for w in widths]),
        *(line(r) for r in rows),
        "",
        "baselines:",
        *(f"  {f.label}: {f.baseline_label}" for f in figures if f.baseline_label),
    ]
    notes = [f"  {f.label}: {f.notes}" for f in figures if f.notes]
    if notes:
        out += ["notes:", *notes]
    out.append("peers (same workload, public APIs):")
    for library, result in peer_results.items():
        if isinstance(result, dict):
            out.append(f"  {library} {result['version']}: drain by {result['drain_settings']}")
        else:
            out.append(f"  {library}: {result}")
    return "\n".join(out)


if __name__ == "__main__":
    main()
