"""Helpers shared by test modules (importable as ``support``: pytest's pythonpath)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, *, every: float = 0.02) -> Any:
    """Poll ``predicate`` until it is truthy; a bound against hanging, not a timing assert."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        pause.wait(every)
