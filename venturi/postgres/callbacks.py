"""The Callbacks role on PostgreSQL (ADR 0138): the ``_dead_callbacks`` rows the
``_on_dead`` trigger (V13) reads when a row becomes dead."""

from __future__ import annotations

from collections.abc import Mapping

from venturi.postgres.store import Store

__all__ = ["CallbackVerbs"]


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
