"""Control at run time on running fleets of processes (ADR 0139): ``venturi worker``
processes see a pause, a resume and a limit override within seconds; a running
``venturi beat`` picks up stored schedules (add, pause, trigger, backfill) with no
restart; and with two beats, the leader SIGKILLed while a schedule is added, the
standby runs it and no tick is doubled.

The processes run ``control_app.py`` on the test's prefix.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fault_tools import Sampler
from support import count, duplicate_ticks, wait_until

import venturi

pytestmark = pytest.mark.slow

HERE = Path(__file__).parent
#: How long a change may take to reach every process (the overrides are read every
#: second; a pause needs no read at all).
PROPAGATION = 3.0


class Processes:
    """``venturi worker|beat --app control_app:app`` processes; all SIGKILLed at teardown."""

    def __init__(self, database_url: str, prefix: str, tmp_path: Path) -> None:
        self.starts = tmp_path / "starts.txt"
        self.starts.touch()
        self._logs = tmp_path
        self._env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("VENTURI_", "PG"))},
            "VENTURI_DATABASE_URL": database_url,
            "CONTROL_PREFIX": prefix,
            "CONTROL_STARTS": str(self.starts),
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
            "PYTHONUNBUFFERED": "1",
        }
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, command: str, *options: str) -> subprocess.Popen[bytes]:
        log = self._logs / f"{command}-{len(self.processes)}.log"
        with log.open("wb") as output:
            process = subprocess.Popen(
                [sys.executable, "-m", "venturi", command, "--app", "control_app:app", *options],
                env=self._env,
                stdout=output,
                stderr=subprocess.STDOUT,
                cwd=HERE,
            )
        self.processes.append(process)
        return process

    def started(self) -> list[tuple[int, float]]:
        rows = []
        for line in self.starts.read_text(encoding="utf-8").splitlines():
            n, at = line.split()
            rows.append((int(n), float(at)))
        return rows

    def kill_all(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.kill()
            process.wait(10)


@pytest.fixture
def processes(
    app: venturi.App, database_url: str, prefix: str, tmp_path: Path
) -> Iterator[Processes]:
    started = Processes(database_url, prefix, tmp_path)
    yield started
    started.kill_all()


@pytest.fixture
def control(app: venturi.App) -> venturi.App:
    """The test's App with control_app's tasks registered (same kinds, same prefix)."""
    app.task(kind="control.work", lease=timedelta(seconds=2))(_work)
    app.task(kind="control.tick", lease=timedelta(seconds=2))(_tick)
    return app


def _work(n: int, seconds: float = 0.0) -> int:
    return n


def _tick(label: str = "") -> str:
    return label


def _status_count(db: Any, kind: str, status: str) -> int:
    return count(db, "kind = %s AND status = %s", (kind, status))


def test_a_fleet_stops_claiming_a_paused_kind_within_seconds_and_resumes_it(
    processes: Processes, control: venturi.App, db: Any
) -> None:
    work = control.tasks()["control.work"]
    for _ in range(3):
        processes.start("worker", "--concurrency", "2")
    work.delay_many([{"n": n} for n in range(20)])
    wait_until(lambda: _status_count(db, "control.work", "completed") == 20, timeout=60)

    control.pause_kind("control.work", actor="test")
    work.delay_many([{"n": n} for n in range(100, 130)])
    time.sleep(PROPAGATION)
    assert _status_count(db, "control.work", "pending") == 30
    assert not any(n >= 100 for n, _ in processes.started())

    resumed = time.monotonic()
    control.resume_kind("control.work", actor="test")
    wait_until(lambda: _status_count(db, "control.work", "completed") == 50, timeout=30)
    assert time.monotonic() - resumed < 8


def test_a_limit_override_holds_across_a_fleet_and_raising_it_lets_more_run(
    processes: Processes, control: venturi.App, db: Any, database_url: str, prefix: str
) -> None:
    work = control.tasks()["control.work"]
    for _ in range(3):
        processes.start("worker", "--concurrency", "4")
    work.delay(0)
    wait_until(lambda: _status_count(db, "control.work", "completed") == 1, timeout=60)

    control.set_limits("control.work", global_concurrency=2)
    time.sleep(PROPAGATION)
    with Sampler(database_url, prefix, "control.work") as capped:
        work.delay_many([{"n": n, "seconds": 0.2} for n in range(24)])
        wait_until(lambda: _status_count(db, "control.work", "completed") == 25, timeout=90)
    assert max(capped.samples) == 2, capped.samples

    control.set_limits("control.work", global_concurrency=None)
    time.sleep(PROPAGATION)
    with Sampler(database_url, prefix, "control.work") as free:
        work.delay_many([{"n": n, "seconds": 0.5} for n in range(24)])
        wait_until(lambda: _status_count(db, "control.work", "completed") == 49, timeout=90)
    assert max(free.samples) > 4, free.samples


def _stored_rows(db: Any, name: str) -> list[dict[str, Any]]:
    return db.all(
        "SELECT id, status, visible_at FROM {{prefix}}_jobs WHERE dedup_key = %s"
        " ORDER BY visible_at",
        (f"beat:{name}",),
    )


def test_a_running_beat_adds_pauses_triggers_and_backfills_a_stored_schedule(
    processes: Processes, control: venturi.App, db: Any
) -> None:
    processes.start("beat")
    processes.start("worker", "--concurrency", "2")
    wait_until(control.active_beat, timeout=30)

    control.add_schedule("every-second", "* * * * * *", "control.tick", kwargs={"label": "s"})
    wait_until(lambda: len(_stored_rows(db, "every-second")) >= 3, timeout=20)

    control.pause_schedule("every-second", actor="test")
    time.sleep(PROPAGATION)
    paused_rows = len(_stored_rows(db, "every-second"))
    time.sleep(PROPAGATION)
    assert len(_stored_rows(db, "every-second")) == paused_rows
    assert count(db, "dedup_key = 'beat:every-second' AND status = 'pending'") == 0

    ref = control.trigger_schedule("every-second")
    wait_until(lambda: control.status(ref.id) is venturi.Status.COMPLETED, timeout=20)
    now = control.backend.now().replace(microsecond=0)
    window = (now - timedelta(minutes=5), now - timedelta(minutes=4, seconds=30))
    refs = control.backfill_schedule("every-second", *window)
    assert len(refs) == 31
    assert control.backfill_schedule("every-second", *window) == []
    wait_until(
        lambda: all(control.status(r.id) is venturi.Status.COMPLETED for r in refs), timeout=60
    )

    control.resume_schedule("every-second")
    wait_until(lambda: len(_stored_rows(db, "every-second")) > paused_rows + 2, timeout=20)
    assert duplicate_ticks(db) == []


def test_two_beats_with_the_leader_killed_while_a_schedule_is_added_run_each_tick_once(
    processes: Processes, control: venturi.App, db: Any
) -> None:
    first = processes.start("beat")
    leader = wait_until(control.active_beat).holder
    assert leader is not None and leader.endswith(f":{first.pid}")
    processes.start("beat")
    processes.start("worker", "--concurrency", "4")
    time.sleep(1.0)
    assert control.active_beat().holder == leader  # the second one stands by

    first.kill()
    control.add_schedule("after-kill", "* * * * * *", "control.tick")

    def taken_over() -> bool:
        now = control.active_beat()
        return now is not None and now.holder != leader

    wait_until(taken_over, timeout=30)
    wait_until(lambda: len(_stored_rows(db, "after-kill")) >= 5, timeout=30)
    time.sleep(2.0)
    assert duplicate_ticks(db) == []
    ticks = [row["visible_at"] for row in _stored_rows(db, "after-kill")]
    assert len(ticks) == len(set(ticks))
