"""The Results role on PostgreSQL: stored results and their waiters' wake-ups (ADR 0124).

A waiter marks the row awaited; the finish that ends it notifies the job's
own channel (``store.RESULT_CHANNEL`` and the id).
"""

from __future__ import annotations

from venturi.backend import Listener
from venturi.postgres.listener import PollingListener, PostgresListener
from venturi.postgres.store import RESULT_CHANNEL, Store
from venturi.types import Status, StoredResult

__all__ = ["ResultVerbs"]


class ResultVerbs(Store):
    """``Results``' verbs (venturi/backend/)."""

    def read_result(self, job_id: str) -> StoredResult | None:
        row = self._run(lambda conn: self._queries.read_result.one(conn, id=job_id))
        if row is None:
            return None
        return StoredResult(Status(row["status"]), row["result"], row["note"])

    def await_result(self, job_id: str) -> None:
        self._run(lambda conn: self._queries.await_result.exec(conn, id=job_id))

    def listen_result(self, job_id: str) -> Listener:
        # LISTEN needs a session: behind a pooler, the direct URL, else the waiter polls.
        url = self._session_url
        if url is None:
            return PollingListener()
        return PostgresListener(url, RESULT_CHANNEL + job_id, self._connect_timeout)


