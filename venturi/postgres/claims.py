"""The Claims role on PostgreSQL: plain, limited, keyed and fair claims, and priority aging.

A limited claim (global caps, rate limits; ADR 0128) runs in one transaction
that locks the limited kinds' rows; keyed kinds (per-key caps and rates) and
kinds under a shared limit (ADR 0138) are claimed one by one inside it; a fair
claim (ADR 0129) is one statement.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta
from operator import itemgetter
from typing import Any

import orjson

from venturi.backend import CAP_RECHECK
from venturi.postgres.sessions import Connection
from venturi.postgres.store import Store
from venturi.types import (
    Claim,
    ClaimedJob,
    ClaimFloor,
    KindLimits,
    LimitedClaim,
    Priority,
    RateLimit,
    SharedLimit,
)

__all__ = ["ClaimVerbs", "claim_input"]

#: Claim order: by tier, then age (the id breaks ties).
_CLAIM_ORDER = itemgetter("priority", "created_at", "id")
#: Each tier by its stored number: a look-up, where ``Priority(n)`` is a slow enum call
#: made once per claimed job.
_PRIORITIES = {int(tier): tier for tier in Priority}


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
        shared = _shared_limits(limits, kinds)
        with self._connection(self._claim_pool) as conn, conn.transaction():
            # Lock order: the kinds' rows, then the shared limits' rows, each by name
            # (ADR 0128, 0138), so two claimers never wait on each other in a circle.
            self._queries.lock_claim_limits.exec(conn, kinds=limited)
            if shared:
                self._queries.lock_shared_limits.exec(conn, names=sorted(shared))
            state = {
                row["kind"]: row
                for row in self._queries.claim_limit_state.many(conn, kinds=limited, capped=capped)
            }
            shared_room, shared_state = self._shared_room(conn, shared, limit)
            room: dict[str, int] = {}
            throttled: dict[str, timedelta] = {}
            for kind in limited:
                allowed, wait = _limited_room(limits[kind], state[kind], limit)
                for name in (s.name for s in limits[kind].shared):
                    allowed = min(allowed, shared_room[name][0])
                    wait = max(wait, shared_room[name][1])
                if allowed > 0:
                    room[kind] = allowed
                else:
                    throttled[kind] = wait
            rows = self._claim_separately(
                conn,
                [k for k in kinds if k in room and (limits[k].is_keyed or limits[k].shared)],
                limits=limits,
                room=room,
                shared_room=shared_room,
                limit=limit,
                worker_id=worker_id,
                lease=lease,
                horizon=horizon,
                floors=floors,
                throttled=throttled,
            )
            together = [
                kind
                for kind in kinds
                if kind not in throttled
                and not (kind in limits and (limits[kind].is_keyed or limits[kind].shared))
            ]
            rows += (
                self._claim_rows(
                    conn,
                    together,
                    [room.get(kind, limit) for kind in together],
                    limit=limit - len(rows),
                    worker_id=worker_id,
                    lease=lease,
                    horizon=horizon,
                    floors=floors,
                )
                if together and len(rows) < limit
                else []
            )
            self._spend_rate_tokens(conn, limits, state, rows)
            self._spend_shared_tokens(conn, limits, shared_state, rows)
        return LimitedClaim(_claimed_jobs(rows, worker_id), throttled)

    def _shared_room(
        self, conn: Connection, shared: Mapping[str, SharedLimit], limit: int
    ) -> tuple[dict[str, list[Any]], dict[str, Mapping[str, Any]]]:
        """Each locked shared limit's room ``[jobs, wait when none]`` and its state."""
        if not shared:
            return {}, {}
        rows = self._queries.shared_limit_state.many(
            conn,
            limits=orjson.dumps(
                [{"name": s.name, "kinds": list(s.kinds)} for s in shared.values()]
            ).decode(),
        )
        state: dict[str, Mapping[str, Any]] = {row["name"]: row for row in rows}
        room: dict[str, list[Any]] = {}
        for name, spec in shared.items():
            allowed, wait = _limited_room(
                KindLimits(spec.concurrency, spec.rate), state[name], limit
            )
            room[name] = [allowed, wait]
        return room, state

    def _claim_separately(
        self,
        conn: Connection,
        kinds: list[str],
        *,
        limits: Mapping[str, KindLimits],
        room: dict[str, int],
        shared_room: dict[str, list[Any]],
        limit: int,
        worker_id: str,
        lease: timedelta,
        horizon: timedelta,
        floors: Mapping[str, ClaimFloor] | None,
        throttled: dict[str, timedelta],
    ) -> list[dict[str, Any]]:
        """The kinds claimed one by one: keyed kinds (``claim_keyed_jobs``, ADR 0138)
        and kinds under a shared limit, whose room the earlier kinds' jobs use up.

        A keyed kind that comes back short (its free keys had fewer jobs than asked)
        is left out of requests for ``CAP_RECHECK``: a key freed by another worker
        sends no notification, and its visible jobs would otherwise end the idle
        wait at once (the worker clears it once it writes an outcome of the kind)."""
        rows: list[dict[str, Any]] = []
        for kind in kinds:
            spec = limits[kind]
            names = [s.name for s in spec.shared]
            allowed = min([room[kind], limit - len(rows), *(shared_room[n][0] for n in names)])
            if allowed <= 0:
                continue
            if spec.is_keyed:
                taken = self._claim_keyed(
                    conn,
                    kind,
                    spec,
                    limit=allowed,
                    worker_id=worker_id,
                    lease=lease,
                    horizon=horizon,
                )
                if len(taken) < allowed:
                    throttled[kind] = CAP_RECHECK
            else:
                taken = self._claim_rows(
                    conn,
                    [kind],
                    [allowed],
                    limit=allowed,
                    worker_id=worker_id,
                    lease=lease,
                    horizon=horizon,
                    floors=floors,
                )
            for name in names:
                shared_room[name][0] -= len(taken)
            rows += taken
        return rows

    def _claim_keyed(
        self,
        conn: Connection,
        kind: str,
        spec: KindLimits,
        *,
        limit: int,
        worker_id: str,
        lease: timedelta,
        horizon: timedelta,
    ) -> list[dict[str, Any]]:
        """One keyed kind's claim, and the starts it took from its keys' rates."""
        rate = spec.rate_limit if spec.rate_per_key else None
        rows = self._queries.claim_keyed_jobs.many(
            conn,
            kind=kind,
            limit=limit,
            per_key=spec.key_concurrency,
            rate_interval=None if rate is None else rate.interval,
            rate_burst=None if rate is None else rate.burst,
            worker_id=worker_id,
            lease=lease,
            horizon=horizon,
        )
        if rate is not None:
            taken = Counter(row["fair_key"] for row in rows if not row["is_expired"])
            if taken:
                self._queries.advance_key_rates.exec(
                    conn,
                    kind=kind,
                    keys=list(taken),
                    taken=list(taken.values()),
                    rate_interval=rate.interval,
                )
        return rows

    def _spend_shared_tokens(
        self,
        conn: Connection,
        limits: Mapping[str, KindLimits],
        state: Mapping[str, Mapping[str, Any]],
        rows: Sequence[Mapping[str, Any]],
    ) -> None:
        """The starts taken from each shared limit with a rate (ADR 0138)."""
        taken: Counter[str] = Counter()
        rates: dict[str, RateLimit] = {}
        for row in rows:
            if row["is_expired"] or row["kind"] not in limits:
                continue
            for spec in limits[row["kind"]].shared:
                if spec.rate is not None:
                    taken[spec.name] += 1
                    rates[spec.name] = spec.rate
        if taken:
            self._queries.advance_shared_limits.exec(
                conn,
                names=list(taken),
                next_start_at=[
                    state[name]["next_start_at"] + count * rates[name].interval
                    for name, count in taken.items()
                ],
            )

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
            spec = limits.get(kind)
            rate = None if spec is None or spec.rate_per_key else spec.rate_limit
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


def _shared_limits(
    limits: Mapping[str, KindLimits], kinds: Sequence[str]
) -> dict[str, SharedLimit]:
    """The shared limits the claim's kinds count against, by name."""
    return {s.name: s for kind in kinds if kind in limits for s in limits[kind].shared}


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
        rows.sort(key=_CLAIM_ORDER)
    return [
        ClaimedJob(
            claim=Claim(r["id"], worker_id, r["run_count"]),
            kind=r["kind"],
            payload=r["payload"],
            carry=r["carry"],
            priority=_PRIORITIES[r["priority"]],
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
    rate = None if limits.rate_per_key else limits.rate_limit
    if rate is not None:
        now: datetime = state["now"]
        start: datetime = state["next_start_at"]
        due = (now + rate.burst * rate.interval - start) // rate.interval
        if due <= 0:
            waits.append(start - (rate.burst - 1) * rate.interval - now)
        allowed = min(allowed, due)
    return max(allowed, 0), max(waits, default=timedelta(0))
