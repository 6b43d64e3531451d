"""The worker registry (ADR 0119).

Part of the storage boundary; ``venturi.backend`` is where callers import it from.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Protocol

from venturi.types import (
    WorkerInfo,
    WorkerRegistration,
)

__all__ = ["Workers"]


class Workers(Protocol):
    """The worker registry (ADR 0119).

    Written by each worker's registration service (``runtime/registration.py``:
    ``register_worker``, ``heartbeat_worker``, ``deregister_worker``,
    ``unserved_kinds``); read by the App (``list_workers``, ``unserved_kinds``).
    """

    def register_worker(self, worker: WorkerRegistration, *, expires_in: timedelta) -> None:
        """Write ``worker``'s registry entry afresh: started and heartbeat now, running 0,
        live until ``now() + expires_in``; an entry of the same id is replaced (ADR 0119)."""
        ...

    def heartbeat_worker(
        self, worker: WorkerRegistration, *, running: int, expires_in: timedelta, sweep_limit: int
    ) -> list[str]:
        """Refresh ``worker``'s heartbeat, ``running`` and expiry (``now() + expires_in``),
        re-creating the entry (started now) if it was swept; also delete up to
        ``sweep_limit`` other entries whose expiry has passed. Returns the ids deleted.

        Concurrent heartbeats never wait on each other's sweeps, and an entry
        refreshed before a sweep reaches it is not deleted.
        """
        ...

    def deregister_worker(self, worker_id: str) -> bool:
        """Delete this worker's registry entry; False when it had none."""
        ...

    def list_workers(self) -> list[WorkerInfo]:
        """Registry entries not yet expired, newest ``started_at`` first, then by id."""
        ...

    def unserved_kinds(self) -> list[str]:
        """Kinds with a due pending job (``visible_at <= now()``) that no unexpired
        registry entry serves, sorted; ``[]`` when every due kind is served."""
        ...
