"""Claim floors: where a busy worker's next claim of a kind may start (ADR 0115).

After a claim that came back full, the next claim of each kind starts just at
the last row it got of that kind, so it does not walk again past the
future-visible rows sorted before it. Floors are trusted only for
``refresh`` seconds after the last claim made without them, and any claim
that comes back short drops them all: an idle or keeping-up worker claims in
exact order.

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
