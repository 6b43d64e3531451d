"""Periodic jobs: a report at 03:00 Paris time every night, enqueued by Beat.

Beat enqueues each tick ahead of time, as a row that becomes visible at the
tick; any worker runs it when it comes due. Start as many Beats as you like:
one per prefix is active, the others stand by and take over if it dies.

    python examples/periodic.py                    # run Beat until Ctrl-C
    python examples/periodic.py --once             # one iteration: enqueue, show, exit
    venturi worker --app examples.periodic:app     # elsewhere: run the jobs when due

The database is $VENTURI_DATABASE_URL, else the embedded server
(``pip install 'venturi[embedded]'``).
"""

from __future__ import annotations

import argparse
import logging
from zoneinfo import ZoneInfo

import venturi

app = venturi.App()


# 03:00 on the Paris wall clock, winter and summer alike: once a day all year.
# (A 02:30 schedule would run at 03:00 on the night clocks go forward, when
# 02:30 does not exist, and once, at the first 02:30, on the night they go
# back; see venturi.cron for the rules.)
@app.task(kind="reports.nightly", schedule="0 3 * * *", timezone="Europe/Paris")
def nightly_report() -> str:
    return "report sent"


@app.task(kind="cache.refresh")
def refresh_cache(region: str) -> None:
    print(f"refreshing the {region} cache")


# Several schedules may share a task; give each a name. With catch_up=True the
# most recent tick missed while no Beat ran is run once when one is back.
app.periodic("*/15 * * * *", refresh_cache, args=("eu",), name="refresh-eu", catch_up=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--once", action="store_true", help="run one iteration, then exit")
    options = parser.parse_args(argv)

    app.migrate()
    beat = venturi.Beat(app)
    try:
        if not options.once:
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
            beat.run()  # until Ctrl-C or SIGTERM
            return 0
        # One iteration without taking the leadership: harmless next to a running
        # Beat, whose rows it would find already pending.
        beat.run_once()
        schedules = beat.schedules()
        for job in app.jobs(status="pending", limit=100).jobs:
            name = (job.dedup_key or "").removeprefix("beat:")
            if name in schedules:
                zone = ZoneInfo(schedules[name].timezone)
                print(f"{name}: {job.kind} at {job.visible_at.astimezone(zone).isoformat()}")
        return 0
    finally:
        app.close()


if __name__ == "__main__":
    raise SystemExit(main())
