"""The Leases role on PostgreSQL: finish, renew, release and recover claimed rows.

Each statement is fenced on the claim (ADR 19); outcomes are stored as given
(the runtime bounds results before ``finish``, ADR 0124).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any

import orjson

from venturi.postgres.queries import Query
from venturi.postgres.sessions import Connection
from venturi.postgres.store import RESULT_CHANNEL, Store
from venturi.types import Claim, Finished, Renewal

__all__ = ["LeaseVerbs", "finish_input"]

_MICROSECOND = timedelta(microseconds=1)


class LeaseVerbs(Store):
    """``Leases``' verbs (venturi/backend/)."""

    def finish(self, results: Sequence[Finished]) -> set[str]:
        """Plain jobs through ``finish_jobs`` (as before workflows); workflow steps, and
        any row it left alone (a lost claim, a step not flagged ``in_workflow``),
        through ``finish_jobs_in_workflows``, which hands their results on (ADR 0125)."""
        if not results:
            return set()
        steps = [r for r in results if r.in_workflow]
        plain = [r for r in results if not r.in_workflow]
        done: set[str] = set()
        if plain:
            done = self._finish(self._queries.finish_jobs, plain)
            steps += [r for r in plain if r.claim.job_id not in done]
        if steps:
            done |= self._finish(self._queries.finish_jobs_in_workflows, steps)
        return done

    def _finish(self, statement: Query, results: Sequence[Finished]) -> set[str]:
        params = {**finish_input(results), "result_channel": RESULT_CHANNEL}
        if statement is self._queries.finish_jobs_in_workflows:
            params["channel"] = self._channel
        rows = self._run_bounded(lambda conn: statement.many(conn, **params))
        return {row["job_id"] for row in rows}

    def renew_leases(self, claims: Sequence[Claim], lease: timedelta) -> Renewal:
        if not claims:
            return Renewal()
        rows = self._run_bounded(
            lambda conn: self._queries.renew_leases.many(
                conn, lease=lease, **self._claim_arrays(claims)
            )
        )
        return Renewal(
            held=frozenset(row["id"] for row in rows),
            cancel_requested=frozenset(row["id"] for row in rows if row["is_cancel_requested"]),
        )

    def release(self, claims: Sequence[Claim]) -> int:
        if not claims:
            return 0
        rows = self._run_bounded(
            lambda conn: self._queries.release_jobs.many(
                conn, note="worker shutdown", **self._claim_arrays(claims)
            )
        )
        if rows:
            # Released rows are pending again: idle workers elsewhere claim them now,
            # not at their next poll (a stopping worker may hold a prefetch's worth).
            self._run_bounded(
                lambda conn: self._queries.notify_wakeup.exec(conn, channel=self._channel)
            )
        return len(rows)

    @staticmethod
    def _claim_arrays(claims: Sequence[Claim]) -> dict[str, list[Any]]:
        return {
            "ids": [c.job_id for c in claims],
            "claimed_by": [c.claimed_by for c in claims],
            "run_counts": [c.run_count for c in claims],
        }

    def recover_stale(
        self, *, max_failures: Mapping[str, int], default_max_failures: int, limit: int
    ) -> int:
        def recover(conn: Connection) -> int:
            # A transaction, so the dependants of a step recovered dead end with it.
            with conn.transaction():
                rows = self._queries.recover_stale.many(
                    conn,
                    kinds=list(max_failures),
                    max_failures=list(max_failures.values()),
                    default_max_failures=default_max_failures,
                    limit=limit,
                )
                self._end_dependants(conn, [r["job_id"] for r in rows if r["ends_step"]])
            return len(rows)

        return self._run_bounded(recover)


def finish_input(results: Sequence[Finished]) -> dict[str, Any]:
    """The finish statements' outcome parameters: the ids, for the primary-key probes,
    and one JSON object per outcome (a JSON null is NULL), each outcome as given."""
    rows = []
    for finished in results:
        claim, outcome = finished.claim, finished.outcome
        rows.append(
            {
                "id": claim.job_id,
                "claimed_by": claim.claimed_by,
                "run_count": claim.run_count,
                "outcome": outcome.kind,  # orjson writes a StrEnum as its value
                "note": outcome.note,
                "is_failure": outcome.is_failure,
                "delay_us": outcome.delay // _MICROSECOND,
                "eta": outcome.eta,
                "carry": outcome.carry,
                "attachment": outcome.attachment,
                "traceback": outcome.traceback,
                "result": outcome.result,
            }
        )
    return {"ids": [r.claim.job_id for r in results], "input": orjson.dumps(rows).decode()}
