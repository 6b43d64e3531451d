"""A SIGKILLed worker cannot deregister: its registry entry is swept by a live one (ADR 0119).

Two real ``venturi worker`` processes (``chaos_app.py``, lease 2 s: heartbeats
every 0.67 s, entries expire 2 s after the last one) register; one is killed
with SIGKILL. Its entry drops out of ``app.workers()`` once expired, then the
survivor's next heartbeat deletes the row and says so in its log.
"""

from __future__ import annotations

import socket
from typing import Any

import pytest
from fault_tools import WorkerFleet
from support import wait_until

import venturi

#: A hang guard for expiry plus a sweep, not a speed assertion.
SWEEP_TIMEOUT = 30.0


def registry_ids(db: Any) -> set[str]:
    """Every row of the registry, expired or not."""
    return {row["id"] for row in db.all("SELECT id FROM {{prefix}}_workers")}


@pytest.mark.slow
def test_a_sigkilled_workers_entry_expires_and_is_swept_by_a_live_worker(
    app: venturi.App, db: Any, fleet: WorkerFleet
) -> None:
    db.execute("TRUNCATE {{prefix}}_workers")
    fleet.start(2)
    fleet.wait_started()
    victim, survivor = fleet.slots
    host = socket.gethostname()
    victim_id, survivor_id = f"{host}:{victim.pid}", f"{host}:{survivor.pid}"
    wait_until(lambda: {w.id for w in app.workers()} == {victim_id, survivor_id})

    victim.kill()
    victim.wait(10)

    wait_until(lambda: {w.id for w in app.workers()} == {survivor_id}, timeout=SWEEP_TIMEOUT)
    wait_until(lambda: registry_ids(db) == {survivor_id}, timeout=SWEEP_TIMEOUT)
    wait_until(
        lambda: f"worker {victim_id} stopped heartbeating" in fleet.log(survivor),
        timeout=SWEEP_TIMEOUT,
    )
    survivor.terminate()
    assert survivor.wait(20) == 0, fleet.logs()
    assert registry_ids(db) == set()
