"""Waiting, wake-ups, the database clock and leadership: what workers and beats agree on.

Part of the storage boundary; ``venturi.backend`` is where callers import it from.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Protocol

from venturi.types import (
    Leader,
)

__all__ = ["Coordination", "Leadership", "Listener"]


class Listener(Protocol):
    """Wake-ups sent on enqueue (ADR 20), on a connection of its own."""

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` s (negative: 0); True as soon as a wake-up arrives
        (each committed enqueue sends one; a rolled-back one none), False on timeout.

        Subscribes on the first call (earlier enqueues are not seen). After a lost
        connection it raises ``BackendUnavailable`` once and resubscribes on the next
        call; wake-ups sent meanwhile are lost, so callers also poll (ADR 20).
        """
        ...

    def interrupt(self) -> None:
        """End the ``wait`` in progress at once (it returns False), or the next one if
        none is; safe from any thread. Before the first ``wait`` (the subscription)
        it may be lost. The claim loop waits on its listener, and a handler finishing
        or ``stop()`` ends that wait this way (ADR 0132)."""
        ...

    def close(self) -> None:
        """End the subscription; idempotent."""
        ...


class Leadership(Protocol):
    """A held, exclusive role (e.g. the one active beat of a prefix)."""

    def is_held(self) -> bool:
        """Check (with a round trip) that the role is still ours; False, never raising,
        once the session that holds it is gone (the role went with it)."""
        ...

    def release(self) -> None:
        """Give the role up so the next ``try_lead`` takes it; idempotent, never raises."""
        ...


class Coordination(Protocol):
    """What workers and beats wait and agree on: the database clock, wake-ups,
    exclusive roles (ADR 20, 0102, 0131).

    Used by the worker's waiter (``listen``, ``time_until_visible``;
    ``runtime/waiting.py``), beat (``now``, ``try_lead``), the pruner
    (``try_lead``) and the App (``leader``, for the CLI and the dashboard).
    """

    def time_until_visible(self, kinds: Collection[str]) -> timedelta | None:
        """Database time until the soonest pending ``visible_at`` among ``kinds``.

        ``None`` when no pending job of those kinds exists (or no kinds); zero or
        negative when one is already due.
        """
        ...

    def now(self) -> datetime:
        """The database clock, the one clock of lifecycle columns; timezone-aware."""
        ...

    def listen(self) -> Listener:
        """A new subscription to this prefix's enqueue wake-ups; the caller closes it."""
        ...

    def try_lead(self, role: str) -> Leadership | None:
        """Take the exclusive ``role`` for this prefix, or None when another holds it.

        Held until released, or until the holder's session ends; other prefixes'
        roles are independent.
        """
        ...

    def leader(self, role: str) -> Leader | None:
        """Who holds ``role`` of this prefix now (``try_lead``'s), or None when nobody does.

        Read from the held role itself, not from a record its holder writes:
        a holder that died stops being shown when its session ends, and
        holding a role costs no write (ADR 0131).
        """
        ...
