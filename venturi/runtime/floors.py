"""Claim floors: where a busy worker's next claim of a kind may start (ADR 0115).

The claim walks a kind's pending rows in claim order, ``(priority,
created_at)``. Rows waiting for a later ``visible_at`` (retries, pauses,
delayed and beat-scheduled jobs) keep their old ``created_at`` and so sit at
the front of that order, and every claim walks past them: with 200,000 of
them, about 25 ms of database time per claim, whatever the claim's size.

While a worker drains a backlog, each claim tells it where the next one can
start: just at the last row it got of each kind. Every row before that was
claimed, not yet visible, or locked by another claim when the scan passed
it. The next claim of the kind starts there (an index range start, not a
filter), so it reads only fresh rows.

A floor can hide rows that become eligible behind it later: a future row
whose ``visible_at`` arrives, a retried or released job (old ``created_at``),
a higher tier enqueued meanwhile. So floors are trusted only briefly and only
in a backlog:

- only after a claim that came back full (there is more to take), and any
  claim that comes back short drops them all, so an idle or keeping-up worker
  never uses them and claims in exact order;
- only for ``refresh`` seconds after the last claim made without floors, so a
  row hidden behind a floor is claimed at most that much later than in exact
  order (the default, 0.1 s, matches the claim-ahead horizon of prefetch.py,
  which already lets held jobs run before a newer, higher-priority one).

Pure bookkeeping on a monotonic clock passed in, no threads: the claim loop
owns one and is its only user.
"""

from __future__ import annotations

from collections.abc import Sequence

from venturi.types import ClaimedJob, ClaimFloor

#: The default ``refresh``: how long floors are trusted after a claim made without them.
DEFAULT_REFRESH = 0.1


class ClaimFloors:
    """The floors of one claim loop.

    Options:
        refresh: seconds after a floorless claim during which floors are used.
    """

    def __init__(self, *, refresh: float = DEFAULT_REFRESH) -> None:
        self._refresh = refresh
        self._floors: dict[str, ClaimFloor] = {}
        self._scanned_at: float | None = None

    def current(self, now: float) -> dict[str, ClaimFloor]:
        """The floors for the next claim: none once ``refresh`` has passed since a full scan."""
        if self._scanned_at is None or now - self._scanned_at >= self._refresh:
            return {}
        return dict(self._floors)

    def record(
        self, jobs: Sequence[ClaimedJob], *, used: dict[str, ClaimFloor], limit: int, now: float
    ) -> None:
        """Learn from a claim made with the floors ``used``, of at most ``limit`` jobs."""
        if len(jobs) < limit:
            self._floors.clear()
            self._scanned_at = None
            return
        if not used:
            self._floors.clear()
            self._scanned_at = now
        for job in jobs:  # claim order: the last job of a kind is its new floor
            self._floors[job.kind] = ClaimFloor(int(job.priority), job.created_at)
