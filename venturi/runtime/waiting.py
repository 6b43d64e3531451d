"""How an idle worker waits (ADR 20): never busy, never past a due job.

The claim loop waits for at most ``min(poll_interval, database time until the
soonest pending visible_at)``, on the listener itself: the thread that claims
is the one the enqueue's NOTIFY wakes, so a new job costs no hand-off from a
listener thread to the claim loop (ADR 0132, round three; bench/README.md).
Four things end the wait early:

- a NOTIFY sent on enqueue;
- a handler finishing (a slot, or a capped kind's room, became free);
- ``stop()``;
- a listener (re)connection, because notifications sent while it was away
  are lost and one extra claim is cheaper than a missed job.

The in-process ones go through ``wake()``: a flag, and the listener's
``interrupt()`` for a wait in progress. When the database is away the
listener is reconnected with backoff, and meanwhile the wait is on the flag
alone, with the bounded poll as the backstop.

The wake-up must be *armed* (cleared) before the claim it guards, not after:
a wake that lands between the claim and the wait then still ends the wait
at once instead of being lost. A notification that lands then waits on the
listener's socket, which ends the next wait at once too.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection

from venturi.backend import Coordination, Listener
from venturi.errors import BackendUnavailable, DatabaseRefused
from venturi.runtime.service import Backoff

__all__ = ["Waiter"]

logger = logging.getLogger(__name__)

#: Shortest wait for a job due "now": the claim just missed it (another
#: worker's claim held its row lock), so look again soon, but not in a spin.
MIN_WAIT = 0.02


class Waiter:
    """The claim loop's idle wait: the wake-up flag and the listener it waits on.

    Used by one thread (the claim loop: ``arm``, ``wait``, ``close``); ``wake``
    from any thread.

    Options:
        poll_interval: the longest wait, the backstop for lost notifications.
    """

    def __init__(self, backend: Coordination, *, poll_interval: float) -> None:
        self._backend = backend
        self.poll_interval = poll_interval
        self._woken = threading.Event()
        self._listener: Listener | None = None
        self._backoff = Backoff()
        self._listen_again_at = 0.0
        self._is_waiting = False

    def arm(self) -> None:
        """Clear the wake-up; call it before the claim whose emptiness leads to ``wait``."""
        self._woken.clear()

    def wake(self) -> None:
        """End the wait in progress, or the next one; from any thread. A handler ends
        it for every job, so the listener is interrupted (a system call) only while
        the claim loop waits on it."""
        self._woken.set()
        listener = self._listener
        if self._is_waiting and listener is not None:
            listener.interrupt()

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
        deadline = time.monotonic() + timeout
        try:
            while True:
                listener, is_new = self._listening()
                if is_new:
                    return True
                # Set before the flag is read: a wake() that does not see it set
                # the flag before this reads it (see wake).
                self._is_waiting = True
                if self._woken.is_set():
                    return True
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                if listener is None:
                    # Away: on the wake-up alone, until it is time to listen again.
                    until_listening = max(0.0, self._listen_again_at - time.monotonic())
                    self._woken.wait(min(remaining, until_listening))
                    continue
                try:
                    if listener.wait(remaining):
                        return True
                except DatabaseRefused:
                    raise  # for good: the claim loop stops on it (ServiceThread)
                except BackendUnavailable as exc:
                    self._lost_listener(exc)
        finally:
            self._is_waiting = False

    def close(self) -> None:
        """End the subscription (from the claim loop's thread, as it ends)."""
        listener, self._listener = self._listener, None
        if listener is not None:
            try:
                listener.close()
            except Exception:
                logger.debug("closing the listener failed", exc_info=True)

    def _listening(self) -> tuple[Listener | None, bool]:
        """The listener, subscribed; and whether it is new (wake-ups were missed)."""
        if self._listener is not None:
            return self._listener, False
        if time.monotonic() < self._listen_again_at:
            return None, False
        listener = self._backend.listen()
        try:
            # A zero wait subscribes (an adapter may connect lazily); only then is
            # LISTEN surely in place, and what was enqueued before it is found by
            # one more claim.
            listener.wait(0)
        except DatabaseRefused:
            listener.close()
            raise
        except BackendUnavailable as exc:
            listener.close()
            self._lost_listener(exc)
            return None, False
        self._listener = listener
        if self._backoff.is_failing:
            logger.info("listener: database reachable again")
            self._backoff.reset()
        logger.debug("listening for enqueue notifications")
        return listener, True

    def _lost_listener(self, exc: BackendUnavailable) -> None:
        """Said as a ServiceThread says an outage: once at warning level, then at debug."""
        self.close()
        is_new_outage = not self._backoff.is_failing
        delay = self._backoff.next_delay()
        self._listen_again_at = time.monotonic() + delay
        if is_new_outage:
            logger.warning("listener: database unreachable, listening again with backoff: %s", exc)
        else:
            logger.debug("listener: database still unreachable; again in %.2fs", delay)
