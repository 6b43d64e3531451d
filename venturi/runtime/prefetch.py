"""How many claimed jobs a worker may hold beyond its busy handlers (claim-ahead, ADR 0114).

As many as the handlers will start within ``horizon`` seconds at their recent
pace, never more than ``limit``; nothing until a pace is known. The pace is a
handler's *busy* time per job (from taking it off the local queue to handing
its outcome on), not the handler's run time: for tiny jobs the bookkeeping
and the GIL are most of the cost.

Pure bookkeeping, no clock and no threads: the worker feeds it busy times
(under its own lock) and asks it for ``depth()``.
"""

from __future__ import annotations

__all__ = ["DEFAULT_PREFETCH", "Prefetch"]

#: The default ``limit``: drains as fast as 512, while 512-row claim and finish
#: batches grew a worker's memory (allocator fragmentation, not Python objects);
#: bench/README.md, "Default prefetch 256, not 512".
DEFAULT_PREFETCH = 256
#: The default ``horizon``: a held job is expected to start within this many seconds.
DEFAULT_HORIZON = 0.1
#: Weight of the newest busy time in the moving average: about the last 20 jobs count.
_SMOOTHING = 0.1


class Prefetch:
    """The claim-ahead depth of one worker.

    Options:
        concurrency: the worker's handler threads.
        limit: the most jobs ever held ahead (0 disables claim-ahead).
        horizon: seconds within which a held job is expected to start.
    """

    def __init__(
        self, *, concurrency: int, limit: int = DEFAULT_PREFETCH, horizon: float = DEFAULT_HORIZON
    ) -> None:
        self._concurrency = concurrency
        self.limit = limit
        self._horizon = horizon
        self._mean_busy: float | None = None

    def observe(self, busy: float) -> None:
        """Record how long one handler was busy with one job (seconds)."""
        busy = max(busy, 0.0)
        if self._mean_busy is None:
            self._mean_busy = busy
        else:
            self._mean_busy += _SMOOTHING * (busy - self._mean_busy)

    def depth(self) -> int:
        """Jobs to hold ahead now: those the handlers would start within the horizon."""
        if self.limit == 0 or self._mean_busy is None:
            return 0
        if self._mean_busy <= 0:
            return self.limit
        startable = self._concurrency * self._horizon / self._mean_busy
        return min(self.limit, int(startable))

    def refill_at(self) -> int:
        """Room (in jobs) at which a worker whose handlers all have work claims again.

        Half the depth: batches stay large, and the held jobs do not run out
        while the claim is in flight.
        """
        return max(1, (self.depth() + 1) // 2)
