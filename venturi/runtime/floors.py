"""Claim floors: where a worker's next claim of a kind may start (ADR 0115, ADR 0132).

After a claim that came back full, the next claim of each kind starts just at
the last row it got of that kind, so it does not walk again past the
future-visible rows sorted before it. Floors are trusted only for a while
after the last claim made without them (the *walk*); then the next claim
walks the whole order again.

A short claim normally drops them all, so an idle or keeping-up worker claims
in exact order. But when the last walk was expensive (index entries of rows
that vacuum may not remove yet: a held xmin horizon, a table autovacuum has
not reached, a large future backlog), every floorless claim pays that walk
again; then short claims keep their floors too and floors are trusted for
longer, in proportion to the walk's cost, so walks stay a bounded share of
claim time. The price is order: a row that becomes eligible behind a floor
(released, retried, recovered, promoted, due, or committed after later
ones) waits for the next walk, at most the trust period.

Pure bookkeeping on a monotonic clock passed in, no threads: the claim loop
owns one and is its only user; it calls ``current`` just before each claim
and ``record`` just after, so their times bracket the claim.
"""

from __future__ import annotations

from collections.abc import Sequence

from venturi.types import ClaimedJob, ClaimFloor

__all__ = ["MAX_TRUST", "ClaimFloors"]

#: The default ``refresh``: how long floors are trusted after a cheap walk.
DEFAULT_REFRESH = 0.1
#: A walk at least this long (seconds) is expensive: short claims keep floors.
EXPENSIVE_WALK = 0.002
#: After an expensive walk floors are trusted for this many times its duration
#: (walks then take at most about 5% of claim time) ...
TRUST_PER_WALK = 20.0
#: ... but never longer than this (seconds): the bound on the order trade-off.
MAX_TRUST = 1.0


class ClaimFloors:
    """The floors of one claim loop.

    Options:
        refresh: seconds after a cheap walk during which floors are used (and
            the least they are trusted after an expensive one).
    """

    def __init__(self, *, refresh: float = DEFAULT_REFRESH) -> None:
        self._refresh = refresh
        self._trust = refresh
        self._is_walk_expensive = False
        self._floors: dict[str, ClaimFloor] = {}
        self._scanned_at: float | None = None
        self._walk_started: float | None = None

    def current(self, now: float) -> dict[str, ClaimFloor]:
        """The floors for the next claim: none once the trust period has passed since a walk."""
        if not self._floors or self._scanned_at is None or now - self._scanned_at >= self._trust:
            self._walk_started = now
            return {}
        self._walk_started = None
        return dict(self._floors)

    def record(
        self, jobs: Sequence[ClaimedJob], *, used: dict[str, ClaimFloor], limit: int, now: float
    ) -> None:
        """Learn from a claim made with the floors ``used``, of at most ``limit`` jobs."""
        if not used:
            self._learn_walk(now)
        if len(jobs) < limit and not self._is_walk_expensive:
            self._floors.clear()
            self._scanned_at = None
            return
        # Claim order: the last job of each kind is its new floor.
        for kind, job in {job.kind: job for job in jobs}.items():
            self._floors[kind] = ClaimFloor(int(job.priority), job.created_at)

    def _learn_walk(self, now: float) -> None:
        """A claim without floors just ended: its duration sets how long floors are trusted."""
        walk = None if self._walk_started is None else now - self._walk_started
        self._is_walk_expensive = walk is not None and walk >= EXPENSIVE_WALK
        self._trust = (
            min(MAX_TRUST, max(self._refresh, TRUST_PER_WALK * walk))
            if walk is not None and self._is_walk_expensive
            else self._refresh
        )
        self._floors.clear()
        self._scanned_at = now
