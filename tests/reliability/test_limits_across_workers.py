"""Global caps and rate limits hold across worker processes (ADR 0128).

Real ``venturi worker`` subprocesses on one prefix (``limits_app.py``); the cap
is checked by sampling the database every 20 ms, the rate by the start times
the handlers write.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fault_tools import Sampler
from limits_app import CAP, LEASE, build_app
from support import wait_until

import venturi

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent


class Fleet:
    """``venturi worker --app limits_app:app`` processes; all SIGKILLed at teardown."""

    def __init__(self, database_url: str, prefix: str, tmp_path: Path) -> None:
        self.starts = tmp_path / "starts.txt"
        self.starts.touch()
        self._logs = tmp_path
        self._env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("VENTURI_", "PG"))},
            "VENTURI_DATABASE_URL": database_url,
            "LIMITS_PREFIX": prefix,
            "LIMITS_STARTS": str(self.starts),
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "PYTHONUNBUFFERED": "1",
        }
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, count: int = 1, concurrency: int = 4) -> list[subprocess.Popen[bytes]]:
        started = []
        for _ in range(count):
            log = self._logs / f"worker-{len(self.processes)}.log"
            with log.open("wb") as output:
                process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "venturi",
                        "worker",
                        "--app",
                        "limits_app:app",
                        "--concurrency",
                        str(concurrency),
                    ],
                    env=self._env,
                    stdout=output,
                    stderr=subprocess.STDOUT,
                    cwd=HERE,
                )
            self.processes.append(process)
            started.append(process)
        return started

    def started(self) -> list[tuple[str, int, float]]:
        rows = []
        for line in self.starts.read_text(encoding="utf-8").splitlines():
            kind, n, at = line.split()
            rows.append((kind, int(n), float(at)))
        return rows

    def kill_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(10)


@pytest.fixture
def fleet(app: venturi.App, database_url: str, prefix: str, tmp_path: Path) -> Iterator[Fleet]:
    started = Fleet(database_url, prefix, tmp_path)
    yield started
    started.kill_all()


@pytest.fixture
def tasks(database_url: str, prefix: str, app: venturi.App) -> Iterator[dict[str, Any]]:
    limits_app, by_kind = build_app(database_url, prefix)
    yield by_kind
    limits_app.close()


def _count(db: Any, kind: str, status: str) -> int:
    row = db.one(
        "SELECT count(*) AS n FROM {{prefix}}_jobs WHERE kind = %s AND status = %s", (kind, status)
    )
    return int(row["n"])


def test_three_workers_never_run_more_of_a_kind_than_its_global_cap(
    fleet: Fleet, tasks: dict[str, Any], db: Any, database_url: str, prefix: str
) -> None:
    tasks["limits.capped"].delay_many([{"n": n} for n in range(24)])

    with Sampler(database_url, prefix, "limits.capped") as sampler:
        fleet.start(3)
        wait_until(lambda: _count(db, "limits.capped", "completed") == 24, timeout=90)

    assert max(sampler.samples) == CAP, sampler.samples


def test_a_killed_workers_slots_come_back_after_its_lease(
    fleet: Fleet, tasks: dict[str, Any], db: Any, database_url: str, prefix: str
) -> None:
    tasks["limits.capped"].delay_many([{"n": n, "seconds": 120.0} for n in range(4)])
    with Sampler(database_url, prefix, "limits.capped") as sampler:
        [first] = fleet.start(1)
        wait_until(lambda: _count(db, "limits.capped", "claimed") == CAP, timeout=60)
        [held] = db.all("SELECT DISTINCT claimed_by FROM {{prefix}}_jobs WHERE status = 'claimed'")
        first.kill()
        killed_at = time.monotonic()
        fleet.start(1)

        def taken_over() -> bool:
            rows = db.all(
                "SELECT claimed_by FROM {{prefix}}_jobs WHERE status = 'claimed'"
                " AND claimed_by <> %s",
                (held["claimed_by"],),
            )
            return len(rows) == CAP

        wait_until(taken_over, timeout=60)
        recovered_after = time.monotonic() - killed_at

    assert recovered_after >= LEASE.total_seconds() * 0.9
    assert max(sampler.samples) == CAP, sampler.samples


def test_a_rate_limit_spreads_starts_across_workers_and_does_not_slow_other_kinds(
    fleet: Fleet, tasks: dict[str, Any]
) -> None:
    tasks["limits.rated"].delay_many([{"n": n} for n in range(40)])
    tasks["limits.free"].delay_many([{"n": n} for n in range(40)])

    fleet.start(2)
    wait_until(lambda: len(fleet.started()) == 80, timeout=90)

    starts = fleet.started()
    rated = sorted(at for kind, _, at in starts if kind == "limits.rated")
    free = sorted(at for kind, _, at in starts if kind == "limits.free")
    assert rated[-1] - rated[0] >= 3.5, rated
    # 10/s with a burst of one: no second holds more than 10 starts (plus one at its edge).
    assert max(sum(1 for at in rated if t <= at < t + 1.0) for t in rated) <= 11, rated
    assert free[-1] - free[0] < 1.5, free
