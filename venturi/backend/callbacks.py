"""The ``Callbacks`` role: what is enqueued when a job ends dead, and the keys of keyed
kinds (ADR 0138)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol

from venturi.types import KeyOccupancy

__all__ = ["Callbacks", "Keys"]


class Callbacks(Protocol):
    """The failure callbacks of ``@task(on_dead=...)``, kept by the store itself, so the
    callback job is written by whichever statement records the death, in its transaction."""

    def set_dead_callbacks(self, callbacks: Mapping[str, str | None]) -> None:
        """For each kind, the kind whose job is enqueued (with keyword arguments
        ``job_id``, ``kind``, ``note``) in the transaction that makes one of its jobs
        dead; ``None`` removes a kind's callback. Kinds not named keep theirs. A job
        whose header ``venturi-link-error`` names a kind gets that callback instead."""
        ...


class Keys(Protocol):
    """What the operator reads of keyed kinds (``concurrency_key=``, ``rate_key=``)."""

    def key_occupancy(self, kind: str, *, limit: int) -> list[KeyOccupancy]:
        """The busiest keys of ``kind``: at most ``limit``, most jobs claimed first,
        then most pending, then by key. Only keyed jobs (a key stored at enqueue)."""
        ...
