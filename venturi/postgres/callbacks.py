"""The Callbacks and Keys roles on PostgreSQL (ADR 0138): the ``_dead_callbacks`` rows
the ``_on_dead`` trigger (V13) reads when a row becomes dead; the keys of keyed kinds."""

from __future__ import annotations

from collections.abc import Mapping

from venturi.postgres.store import Store
from venturi.types import KeyOccupancy

__all__ = ["CallbackVerbs", "KeyVerbs"]


class CallbackVerbs(Store):
    """``Callbacks``' verbs (venturi/backend/)."""

    def set_dead_callbacks(self, callbacks: Mapping[str, str | None]) -> None:
        if not callbacks:
            return
        kinds = sorted(callbacks)
        self._run(
            lambda conn: self._queries.set_dead_callbacks.exec(
                conn, kinds=kinds, callback_kinds=[callbacks[k] for k in kinds]
            )
        )


class KeyVerbs(Store):
    """``Keys``' verbs (venturi/backend/)."""

    def key_occupancy(self, kind: str, *, limit: int) -> list[KeyOccupancy]:
        rows = self._run(
            lambda conn: self._queries.key_occupancy.many(conn, kind=kind, limit=limit)
        )
        return [KeyOccupancy(r["key"], int(r["running"]), int(r["pending"])) for r in rows]
