"""The Workers role on PostgreSQL: the worker registry (ADR 0119).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from venturi.postgres.store import Store
from venturi.types import WorkerInfo, WorkerRegistration

__all__ = ["WorkerVerbs"]


class WorkerVerbs(Store):
    """``Workers``' verbs (venturi/backend/)."""

    def register_worker(self, worker: WorkerRegistration, *, expires_in: timedelta) -> None:
        self._run(
            lambda conn: self._queries.register_worker.exec(
                conn, expires_in=expires_in, **_registration(worker)
            )
        )

    def heartbeat_worker(
        self, worker: WorkerRegistration, *, running: int, expires_in: timedelta, sweep_limit: int
    ) -> list[str]:
        rows = self._run(
            lambda conn: self._queries.heartbeat_worker.many(
                conn,
                running=running,
                expires_in=expires_in,
                sweep_limit=sweep_limit,
                **_registration(worker),
            )
        )
        return [row["id"] for row in rows]

    def deregister_worker(self, worker_id: str) -> bool:
        row = self._run(lambda conn: self._queries.deregister_worker.one(conn, id=worker_id))
        return row is not None

    def list_workers(self) -> list[WorkerInfo]:
        rows = self._run(self._queries.list_workers.many)
        return [
            WorkerInfo(
                id=r["id"],
                version=r["version"],
                kinds=tuple(r["kinds"]),
                concurrency=r["concurrency"],
                running=r["running"],
                started_at=r["started_at"],
                heartbeat_at=r["heartbeat_at"],
                expires_at=r["expires_at"],
            )
            for r in rows
        ]

    def unserved_kinds(self) -> list[str]:
        return [row["kind"] for row in self._run(self._queries.unserved_kinds.many)]


def _registration(worker: WorkerRegistration) -> dict[str, Any]:
    return {
        "id": worker.id,
        "version": worker.version,
        "kinds": list(worker.kinds),
        "concurrency": worker.concurrency,
    }


