"""The Claims role on PostgreSQL: plain, limited and fair claims, and priority aging.

A limited claim (global caps, rate limits; ADR 0128) runs in one transaction
that locks the limited kinds' rows; a fair claim (ADR 0129) is one statement.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import orjson

from venturi.backend import CAP_RECHECK
from venturi.postgres.sessions import Connection
from venturi.postgres.store import Store
from venturi.types import Claim, ClaimedJob, ClaimFloor, KindLimits, LimitedClaim, Priority

__all__ = ["ClaimVerbs", "claim_input"]


class ClaimVerbs(Store):
    """``Claims``' verbs (venturi/backend/); the claims run on the claim pool."""

    def claim(
        self,
        *,
        kinds: Collection[str],
        limit: int,
        worker_id: str,
        lease: timedelta,
        horizon: timedelta = timedelta(0),
        floors: Mapping[str, ClaimFloor] | None = None,
    ) -> list[ClaimedJob]:
        if not kinds or limit <= 0:
            return []
        kinds = list(kinds)
        rows = self._run_bounded(
            lambda conn: self._claim_rows(
                conn,
                kinds,
                [limit] * len(kinds),
                limit=limit,
                worker_id=worker_id,
                lease=lease,
                horizon=horizon,
                floors=floors,
            ),
            self._claim_pool,
        )
        return _claimed_jobs(rows, worker_id)

    def _claim_rows(
        self,
        conn: Connection,
        kinds: list[str],
        kind_limits: list[int],
        *,
        limit: int,
        worker_id: str,
        lease: timedelta,
        horizon: timedelta,
        floors: Mapping[str, ClaimFloor] | None,
    ) -> list[dict[str, Any]]:
        return self._queries.claim_jobs.many(
            conn,
            kinds=claim_input(kinds, kind_limits, floors),
            limit=limit,
            worker_id=worker_id,
            lease=lease,
            horizon=horizon,
        )

    def claim_limited(
        self,
        *,
        kinds: Collection[str],
        limit: int,
        worker_id: str,
        lease: timedelta,
        limits: Mapping[str, KindLimits],
        horizon: timedelta = timedelta(0),
        floors: Mapping[str, ClaimFloor] | None = None,
    ) -> LimitedClaim:
        kinds = list(kinds)
        limited = sorted(kind for kind in kinds if kind in limits)
        if not limited or limit <= 0:
            return LimitedClaim(
                self.claim(
                    kinds=kinds,
                    limit=limit,
                    worker_id=worker_id,
                    lease=lease,
                    horizon=horizon,
                    floors=floors,
                ),
                {},
            )
        capped = [kind for kind in limited if limits[kind].global_concurrency is not None]
        with self._connection(self._claim_pool) as conn, conn.transaction():
            self._queries.lock_claim_limits.exec(conn, kinds=limited)
            state = {
                row["kind"]: row
                for row in self._queries.claim_limit_state.many(conn, kinds=limited, capped=capped)
            }
            room: dict[str, int] = {}
            throttled: dict[str, timedelta] = {}
            for kind in limited:
                allowed, wait = _limited_room(limits[kind], state[kind], limit)
                if allowed > 0:
                    room[kind] = allowed
                else:
                    throttled[kind] = wait
            claimable = [kind for kind in kinds if kind not in throttled]
            rows = self._claim_rows(
                conn,
                claimable,
                [room.get(kind, limit) for kind in claimable],
                limit=limit,
                worker_id=worker_id,
                lease=lease,
                horizon=horizon,
                floors=floors,
            )
            self._spend_rate_tokens(conn, limits, state, rows)
        return LimitedClaim(_claimed_jobs(rows, worker_id), throttled)

    def _spend_rate_tokens(
        self,
        conn: Connection,
        limits: Mapping[str, KindLimits],
        state: Mapping[str, Mapping[str, Any]],
        rows: Sequence[Mapping[str, Any]],
    ) -> None:
        # An expired job starts no run (ADR 0135), so it spends no start.
        taken = Counter(row["kind"] for row in rows if not row["is_expired"])
        spent: dict[str, datetime] = {}
        for kind, count in taken.items():
            rate = limits[kind].rate_limit if kind in limits else None
            if rate is not None:
                row = state[kind]
                spent[kind] = row["next_start_at"] + count * rate.interval
        if spent:
            self._queries.advance_rate_limits.exec(
                conn, kinds=list(spent), next_start_at=list(spent.values())
            )

    def claim_fair(
        self,
        *,
        kind: str,
        limit: int,
        worker_id: str,
        lease: timedelta,
        horizon: timedelta = timedelta(0),
    ) -> list[ClaimedJob]:
        if limit <= 0:
            return []
        rows = self._run_bounded(
            lambda conn: self._queries.claim_fair_jobs.many(
                conn, kind=kind, limit=limit, worker_id=worker_id, lease=lease, horizon=horizon
            ),
            self._claim_pool,
        )
        return _claimed_jobs(rows, worker_id, in_claim_order=True)

    def promote_waiting(self, kinds: Collection[str], *, age_after: timedelta, limit: int) -> int:
        if not kinds:
            return 0
        row = self._run(
            lambda conn: self._queries.promote_waiting.one(
                conn, kinds=list(kinds), age_after=age_after, limit=limit
            )
        )
        return int(row["promoted"]) if row is not None else 0


def claim_input(
    kinds: Sequence[str],
    kind_limits: Sequence[int],
    floors: Mapping[str, ClaimFloor] | None = None,
) -> str:
    """``claim_jobs``'s kinds: one JSON object per kind, with its probe's limit and its
    floor (ADR 0115; none: nulls)."""
    floors = floors or {}
    rows = []
    for kind, kind_limit in zip(kinds, kind_limits, strict=True):
        floor = floors.get(kind)
        rows.append(
            {
                "kind": kind,
                "floor_priority": None if floor is None else int(floor.priority),
                "floor_created_at": None if floor is None else floor.created_at,
                "kind_limit": kind_limit,
            }
        )
    return orjson.dumps(rows).decode()


def _claimed_jobs(
    rows: list[dict[str, Any]], worker_id: str, *, in_claim_order: bool = False
) -> list[ClaimedJob]:
    """The claimed rows as jobs, by tier then age; ``in_claim_order``: as the statement
    returned them (a fair claim's rotation order, ADR 0129)."""
    if not in_claim_order:
        rows.sort(key=lambda r: (r["priority"], r["created_at"], r["id"]))
    return [
        ClaimedJob(
            claim=Claim(r["id"], worker_id, r["run_count"]),
            kind=r["kind"],
            payload=r["payload"],
            carry=r["carry"],
            priority=Priority(r["priority"]),
            failure_count=r["failure_count"],
            created_at=r["created_at"],
            claim_expires_at=r["claim_expires_at"],
            headers=r["headers"],
            workflow_id=r["workflow_id"],
            is_expired=r["is_expired"],
        )
        for r in rows
    ]


def _limited_room(
    limits: KindLimits, state: Mapping[str, Any], limit: int
) -> tuple[int, timedelta]:
    """How many jobs of a limited kind this claim may take, and, when none, how long
    until it may take one (ADR 0128)."""
    allowed, waits = limit, []
    if limits.global_concurrency is not None:
        allowed = min(allowed, limits.global_concurrency - state["claimed"])
        if allowed <= 0:
            waits.append(CAP_RECHECK)
    rate = limits.rate_limit
    if rate is not None:
        now: datetime = state["now"]
        start: datetime = state["next_start_at"]
        due = (now + rate.burst * rate.interval - start) // rate.interval
        if due <= 0:
            waits.append(start - (rate.burst - 1) * rate.interval - now)
        allowed = min(allowed, due)
    return max(allowed, 0), max(waits, default=timedelta(0))


