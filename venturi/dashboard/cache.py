"""A read cache shared by every viewer of one dashboard process.

Live pages refresh every few seconds in every open tab. Without this, ten
viewers would mean ten ``stats`` queries per interval; with it, each distinct
read (the stats, the chart, one filtered listing) runs at most once per
interval for all of them together, and concurrent misses wait for the one
read in flight instead of starting their own.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

__all__ = ["MAX_ENTRIES", "SharedCache"]

T = TypeVar("T")

#: Distinct reads kept at once; past this the oldest is dropped (filters come from URLs).
MAX_ENTRIES = 256


class SharedCache:
    """Values by key, each fresh for ``ttl`` seconds; one load per key at a time."""

    def __init__(self, ttl: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: dict[Hashable, tuple[float, Any]] = {}
        self._loading: dict[Hashable, threading.Lock] = {}

    def get(self, key: Hashable, load: Callable[[], T]) -> T:
        """The cached value of ``key``, or ``load()``'s, run by one caller while others wait."""
        with self._lock:
            hit = self._fresh(key)
            if hit is not None:
                return hit[0]  # type: ignore[no-any-return]
            loading = self._loading.setdefault(key, threading.Lock())
        with loading:
            with self._lock:
                hit = self._fresh(key)
                if hit is not None:
                    return hit[0]  # type: ignore[no-any-return]
            value = load()
            with self._lock:
                self._entries[key] = (self._clock(), value)
                self._evict()
            return value

    def clear(self) -> None:
        """Forget everything: after a change, the next page shows the change."""
        with self._lock:
            self._entries.clear()

    def _fresh(self, key: Hashable) -> tuple[Any] | None:
        entry = self._entries.get(key)
        if entry is None or self._clock() - entry[0] >= self._ttl:
            return None
        return (entry[1],)

    def _evict(self) -> None:
        now = self._clock()
        for key in [k for k, (at, _) in self._entries.items() if now - at >= self._ttl]:
            del self._entries[key]
            self._loading.pop(key, None)
        while len(self._entries) > MAX_ENTRIES:
            oldest = min(self._entries, key=lambda k: self._entries[k][0])
            del self._entries[oldest]
            self._loading.pop(oldest, None)
