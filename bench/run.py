"""venturi's benchmark suite: every figure beside its baseline, in one run, on one server.

    python bench/run.py [--quick] [--database-url URL] [--rounds N] [--profile]
                        [--sections a,b | --skip a,b] [--list]
                        [--offered-minutes 10] [--xmin-phase 60]

The URL defaults to $VENTURI_DATABASE_URL, else
postgresql://postgres@127.0.0.1:5432/test. Every figure runs on tables the
suite creates under fresh names and drops afterwards (the offered-load
sections on a private cluster they start). Throughput figures are measured
``--rounds`` times (default 3, ``--quick`` 1), venturi and its raw baseline
interleaved within each round, and the best round of each is kept: on a
shared machine, interference only ever slows a round down.

The suite is a list of sections (``SECTIONS`` below, ``--list`` prints them);
each runs by default in a full run, some not in ``--quick``. ``--sections``
runs exactly those named, ``--skip`` drops some from the default.

Progress goes to stderr; stdout gets one table: each figure, its baseline,
the ratio, the target and whether it is met. The full results, every sample
included, are written to bench/results/<timestamp>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import peers
import sections as s
from sections import Run, Section
from workload import Figure, Sizes, connect, database_url

RESULTS_DIR = Path(__file__).resolve().parent / "results"

#: The suite, in the order it runs. A new group of figures is one more ``Section``
#: here: a ``measure(run)`` returning its samples and a ``figures(run)`` making its
#: table rows (bench/workflow_bench.py and bench/fair_bench.py plug in here).
SECTIONS: list[Section] = [
    Section(
        "enqueue",
        ".delay(), delay_many, adelay beside raw INSERT/COPY",
        s.measure_enqueue,
        s.enqueue_figures,
    ),
    Section(
        "drain",
        "drains c=1/c=8/2 processes/async beside raw loops",
        s.measure_drain,
        s.drain_figures,
    ),
    Section(
        "pickup",
        "pickup latency beside a raw LISTEN/NOTIFY loop",
        s.measure_pickup,
        s.pickup_figures,
    ),
    Section(
        "big_table",
        "c=8 drain beside 1M terminal + 200k future rows",
        s.measure_big_table,
        s.big_table_figures,
    ),
    Section("rss", "worker RSS after 10k / 100k jobs", s.measure_rss, s.rss_figures),
    Section("peers", "procrastinate and pgqueuer, when installed", s.measure_peers, s.no_figures),
    Section(
        "limits",
        "global cap / rate limit declared, not binding, beside none",
        s.measure_limits,
        s.limits_figures,
        quick=False,
    ),
    Section(
        "pgbouncer",
        "1 and 8 workers through pgbouncer beside direct",
        s.measure_pgbouncer,
        s.pgbouncer_figures,
        quick=False,
    ),
    Section(
        "workflows",
        "a chord beside a plain drain; the plain drain before V9",
        s.measure_workflows,
        s.workflows_figures,
        quick=False,
    ),
    Section(
        "fair",
        "fair_key declared (2 / 1,000 keys) beside none",
        s.measure_fair,
        s.fair_figures,
        quick=False,
    ),
    Section(
        "xmin",
        "claim latency around a held xmin horizon (private cluster)",
        s.measure_xmin,
        s.xmin_figures,
        quick=False,
    ),
    Section(
        "offered_load",
        "2,000 jobs/s offered for --offered-minutes (private cluster)",
        s.measure_offered_load,
        s.offered_load_figures,
        quick=False,
    ),
]


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


def _names(text: str | None) -> list[str]:
    names = [n.strip() for n in (text or "").split(",") if n.strip()]
    known = {section.name for section in SECTIONS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise SystemExit(f"unknown section(s) {unknown}; known: {sorted(known)}")
    return names


def selected(args: argparse.Namespace) -> list[Section]:
    only, skip = _names(args.sections), _names(args.skip)
    if args.no_peers:
        skip.append("peers")
    if only:
        return [section for section in SECTIONS if section.name in only]
    default = [section for section in SECTIONS if (section.quick if args.quick else section.full)]
    return [section for section in default if section.name not in skip]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="smaller sizes, one round, the quick sections only"
    )
    parser.add_argument("--database-url", default=None)
    parser.add_argument("--rounds", type=int, default=None, help="rounds per throughput figure")
    parser.add_argument("--sections", help="comma-separated: run exactly these sections")
    parser.add_argument("--skip", help="comma-separated: leave these out of the default")
    parser.add_argument("--no-peers", action="store_true", help="the same as --skip peers")
    parser.add_argument("--list", action="store_true", help="print the sections and exit")
    parser.add_argument(
        "--offered-minutes", type=float, default=10.0, help="offered_load: how long (10)"
    )
    parser.add_argument(
        "--xmin-phase", type=float, default=60.0, help="xmin: seconds before / held / after (60)"
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="py-spy record the worker during the first c=8 drains (speedscope files in results/)",
    )
    args = parser.parse_args()
    if args.list:
        for section in SECTIONS:
            modes = "+".join(
                m for m, on in (("quick", section.quick), ("full", section.full)) if on
            )
            print(f"{section.name:<14} {modes or 'on request':<11} {section.about}")
        return

    url = database_url(args.database_url)
    chosen = selected(args)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    run = Run(
        url=url,
        sizes=Sizes.quick() if args.quick else Sizes.full(),
        rounds=args.rounds or (1 if args.quick else 3),
        quick=args.quick,
        run_dir=RESULTS_DIR / stamp,
        profile_dir=RESULTS_DIR / stamp if args.profile else None,
        offered_minutes=args.offered_minutes,
        xmin_phase=args.xmin_phase,
    )
    started = time.perf_counter()
    info = machine(url)
    s.log(
        f"venturi bench: {'quick' if args.quick else 'full'}, {run.rounds} round(s), {url}, "
        f"sections {', '.join(section.name for section in chosen)}"
    )
    for section in chosen:
        s.log(f"[{section.name}] {section.about}")
        run.samples[section.name] = section.measure(run)

    figures: list[Figure] = []
    for section in chosen:
        try:
            figures += section.figures(run)
        except Exception as exc:  # a section's table must not hide the others'
            figures += s.failure_row(section.name, section.name, f"{type(exc).__name__}: {exc}")
    elapsed = time.perf_counter() - started
    info["load_average_at_end"] = os.getloadavg()
    peer_results = run.samples.get("peers") or {}
    print(render(figures, peer_results, info, run.rounds, elapsed, args.quick))
    run.run_dir.mkdir(parents=True, exist_ok=True)
    s.write_plans(run)
    output = RESULTS_DIR / f"{stamp}.json"
    output.write_text(
        json.dumps(
            {
                "started_utc": stamp,
                "mode": "quick" if args.quick else "full",
                "sections": [section.name for section in chosen],
                "rounds": run.rounds,
                "elapsed_s": round(elapsed, 1),
                "machine": info,
                "sizes": run.sizes.__dict__,
                "figures": [f.as_json() for f in figures],
                "samples": run.samples,
            },
            indent=2,
            default=str,
        )
    )
    s.log(f"results: {output} (worker logs under {run.run_dir})")


# -- the table ---------------------------------------------------------------------------


def _fmt(value: float | str | None, unit: str = "") -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return "skipped" if value.startswith("skipped") else "failed" if "fail" in value else value
    if unit == "ratio":
        return f"{value:.3f}"
    if unit == "ms":
        return f"{value:,.2f}"
    if unit == "MiB":
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
