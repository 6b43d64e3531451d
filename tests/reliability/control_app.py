"""The App of the control-at-run-time fleet tests' subprocesses (ADR 0139).

Started as ``python -m venturi worker|beat --app control_app:app`` with this folder
on ``PYTHONPATH``; its prefix is ``$CONTROL_PREFIX``. ``control.work`` appends
``<n> <wall clock>`` to ``$CONTROL_STARTS`` as it starts and sleeps ``seconds``;
``control.tick`` is what the stored schedules run. The code schedule (hourly) only
lets a beat start before any schedule is stored.
"""

from __future__ import annotations

import os
import threading
import time
from datetime import timedelta

import venturi

LEASE = timedelta(seconds=2)

app = venturi.App(None, prefix=os.environ.get("CONTROL_PREFIX", "control_unset"))


@app.task(kind="control.work", lease=LEASE)
def work(n: int, seconds: float = 0.0) -> int:
    with open(os.environ["CONTROL_STARTS"], "a", encoding="utf-8") as starts:
        starts.write(f"{n} {time.time()}\n")
    threading.Event().wait(seconds)
    return n


@app.task(kind="control.tick", lease=LEASE)
def tick(label: str = "") -> str:
    return label


app.periodic("0 * * * *", tick, name="hourly")
