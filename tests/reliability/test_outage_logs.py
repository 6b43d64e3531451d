"""An outage under a running worker is two lines per loop, not a flood (SPEC 6.6, ADR 0118).

A ``venturi worker`` reaches the database through a TCP proxy that the test
stops (every connection breaks, new ones are refused) long enough for the
pools to retry in the background several times, then starts again. Each loop
thread logs "database unreachable" once and "database reachable again" once;
the driver's own pool warnings (``psycopg.pool``: "error connecting in
'venturi-...'", one per background retry) stay out of the log; the worker
runs jobs before and after and stops with status 0.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

import chaos_app
import pytest
from fault_tools import WorkerFleet, wait_for_sessions_to_end
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from support import TcpProxy, wait_until

#: Hang guards, not speed assertions.
DRAIN_TIMEOUT = 60.0
OUTAGE_TIMEOUT = 90.0
#: Failed steps of the claim loop after its first one: each waited for the pool,
#: which retried its connection meanwhile.
RETRIES_SEEN = 2

UNREACHABLE = re.compile(r"(\S+): database unreachable, ")
STILL_UNREACHABLE = re.compile(r"(\S+-claim): database still unreachable")
REACHABLE_AGAIN = re.compile(r"(\S+): database reachable again")


def completed(db: Any) -> int:
    return int(db.scalar("SELECT count(*) FROM {{prefix}}_jobs WHERE status = 'completed'"))


@pytest.mark.slow
def test_an_outage_under_a_running_worker_is_one_warning_and_one_recovery_line_per_loop(
    db: Any, database_url: str, prefix: str, tmp_path: Path
) -> None:
    target = conninfo_to_dict(database_url)
    proxy = TcpProxy(str(target.get("host") or "127.0.0.1"), int(target.get("port") or 5432))
    queue, work, _ = chaos_app.build_app(database_url, prefix)
    fleet = WorkerFleet(
        make_conninfo(database_url, host="127.0.0.1", port=str(proxy.port)),
        prefix,
        tmp_path,
        application_name=f"venturi-outage-{prefix}",
        options=("--log-level", "DEBUG"),
    )
    try:
        work.delay_many([{"n": n} for n in range(10)])
        fleet.start(1)
        fleet.wait_started()
        (process,) = fleet.slots
        wait_until(lambda: completed(db) == 10, timeout=DRAIN_TIMEOUT)

        proxy.stop()
        wait_until(
            lambda: len(STILL_UNREACHABLE.findall(fleet.log(process))) >= RETRIES_SEEN,
            timeout=OUTAGE_TIMEOUT,
        )
        proxy.start()
        wait_until(
            lambda: set(REACHABLE_AGAIN.findall(fleet.log(process)))
            >= set(UNREACHABLE.findall(fleet.log(process))),
            timeout=OUTAGE_TIMEOUT,
        )
        work.delay_many([{"n": n} for n in range(10, 20)])
        wait_until(lambda: completed(db) == 20, timeout=DRAIN_TIMEOUT)
        assert fleet.stop() == [0], fleet.logs()
        wait_for_sessions_to_end(db, fleet.application_name)
    finally:
        fleet.kill_all()
        proxy.stop()
        queue.close()

    log = fleet.log(process)
    assert "psycopg.pool" not in log, log
    assert "error connecting in" not in log, log
    warned = Counter(UNREACHABLE.findall(log))
    recovered = Counter(REACHABLE_AGAIN.findall(log))
    assert any(name.endswith("-claim") for name in warned), log
    assert set(warned.values()) == {1}, warned
    assert recovered == warned, log
