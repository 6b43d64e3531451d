"""The ``Callbacks`` role: what is enqueued when a job ends dead (ADR 0138)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

__all__ = ["Callbacks"]


class Callbacks(Protocol):
    """The failure callbacks of ``@task(on_dead=...)``, kept by the store itself, so the
    callback job is written by whichever statement records the death, in its transaction."""

    def set_dead_callbacks(self, callbacks: Mapping[str, str | None]) -> None:
        """For each kind, the kind whose job is enqueued (with keyword arguments
        ``job_id``, ``kind``, ``note``) in the transaction that makes one of its jobs
        dead; ``None`` removes a kind's callback. Kinds not named keep theirs. A job
        whose header ``venturi-link-error`` names a kind gets that callback instead."""
        ...
