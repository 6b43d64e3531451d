"""How an idle worker waits (ADR 20): never busy, never past a due job.

The claim loop waits on one ``threading.Event``, the *wake-up*, for at most
``min(poll_interval, database time until the soonest pending visible_at)``.
Four things end the wait early by setting the event:

- a NOTIFY sent on enqueue, received by the listener thread;
- a handler finishing (a slot, or a capped kind's room, became free);
- ``stop()``;
- a listener (re)connection, because notifications sent while it was away
  are lost and one extra claim is cheaper than a missed job.

The listener blocks on its own connection in slices of ``LISTEN_SLICE``
seconds and checks its stop event between slices, so stopping never waits
for a notification. When the database is away it reconnects with backoff;
meanwhile the bounded poll is the backstop.

The wake-up must be *armed* (cleared) before the claim it guards, not after:
a notification that lands between the claim and the wait then still ends the
wait at once instead of being lost.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Collection

from venturi.backend import Backend, Listener
from venturi.runtime.service import ServiceThread

logger = logging.getLogger(__name__)

#: Longest a listener blocks before it looks at its stop event.
LISTEN_SLICE = 0.25
#: Shortest wait for a job due "now": the claim just missed it (another
#: worker's claim held its row lock), so look again soon, but not in a spin.
MIN_WAIT = 0.02


class Waiter:
    """The wake-up event, the listener thread that sets it, and the idle wait.

    Options:
        poll_interval: the longest wait, the backstop for lost notifications.
        name: the prefix of the listener thread's name.
    """

    def __init__(self, backend: Backend, *, poll_interval: float, name: str) -> None:
        self._backend = backend
        self.poll_interval = poll_interval
        self._wakeup = threading.Event()
        self._listener: Listener | None = None
        self._listening = ServiceThread(
            f"{name}-listener", self._listen_step, on_exit=self._close_listener
        )

    def start(self) -> None:
        self._listening.start()

    def arm(self) -> None:
        """Clear the wake-up; call it before the claim whose emptiness leads to ``wait``."""
        self._wakeup.clear()

    def wake(self) -> None:
        self._wakeup.set()

    def time_to_next_job(self, kinds: Collection[str]) -> float:
        """Asks the database (a round trip) how long to wait: until the soonest
        ``visible_at`` of ``kinds``, at most the poll interval."""
        if not kinds:
            return self.poll_interval
        until = self._backend.time_until_visible(kinds)
        if until is None:
            return self.poll_interval
        return min(self.poll_interval, max(until.total_seconds(), MIN_WAIT))

    def wait(self, timeout: float) -> bool:
        """Block until woken or ``timeout`` elapses; True when woken."""
        return self._wakeup.wait(timeout)

    def request_stop(self) -> None:
        self._listening.request_stop()
        self.wake()

    def join(self, deadline: float) -> bool:
        """Join the listener thread (which closes its connection as it ends)."""
        self._listening.request_stop()
        return self._listening.join(deadline)

    def _listen_step(self) -> float:
        is_new = self._listener is None
        if self._listener is None:
            self._listener = self._backend.listen()
        try:
            woken = self._listener.wait(LISTEN_SLICE)
        except Exception:
            self._close_listener()
            raise
        if is_new:
            # Only now is LISTEN surely in place (an adapter may connect lazily):
            # whatever was enqueued before it is found by one more claim.
            logger.debug("listening for enqueue notifications")
        if woken or is_new:
            self.wake()
        return 0.0

    def _close_listener(self) -> None:
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.close()
            except Exception:
                logger.debug("closing the listener failed", exc_info=True)
