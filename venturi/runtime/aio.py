"""The worker's event loop thread: where its ``async def`` handlers run (ADR 0126).

One thread owns one loop. The worker hands it callbacks from any thread
(``submit``), which start tasks on the loop (``create_task``), and cancels
those tasks from any thread (``cancel``); both are ``call_soon_threadsafe``
callbacks, so they run in the order they were asked for.

A handler that blocks the loop (a sync call inside ``async def``) starves every
other async run. Two cheap parts catch it without asyncio's debug mode (which
slows every step): a coroutine on the loop that wakes every ``_TICK`` seconds
and measures how late it woke, and a watchdog thread that, when the loop has
not ticked for ``block_threshold`` seconds, asks which task is running
(``asyncio.current_task(loop)``) and what it is (``describe``: its kind and
job), there and then, since the run may be over once the loop frees. When the
loop frees again, one WARNING names it and says how long the loop was blocked.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["EventLoopThread"]

logger = logging.getLogger(__name__)

#: How often the lag monitor wakes on the loop, and the watchdog looks at it.
_TICK = 0.05
#: Blocking the loop longer than this is logged (asyncio's own slow-callback default).
DEFAULT_BLOCK_THRESHOLD = 0.1
#: How long the loop's end waits for the tasks it cancels (a pool's close is bounded too).
_END_TIMEOUT = 5.0
_NOT_A_HANDLER = "a callback that is not a handler"


class EventLoopThread:
    """One event loop in its own daemon thread (a worker ``Part``).

    Options:
        name: the thread's name.
        describe: what a blocking task was running, for the warning (``None``
            when the task is not a handler's).
        block_threshold: seconds of blocking that are logged.
    """

    def __init__(
        self,
        name: str,
        *,
        describe: Callable[[asyncio.Task[Any]], str | None],
        block_threshold: float = DEFAULT_BLOCK_THRESHOLD,
    ) -> None:
        self.loop = asyncio.new_event_loop()
        self._describe = describe
        self._threshold = block_threshold
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._watchdog = threading.Thread(target=self._watch, name=f"{name}-watchdog", daemon=True)
        self._stopping = threading.Event()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ticked = time.monotonic()
        #: What was seen running while the loop was blocked (set by the watchdog).
        self._blocker: str | None = None

    def start(self) -> None:
        self._thread.start()
        self._watchdog.start()

    def submit(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` on the loop, from any thread."""
        self.loop.call_soon_threadsafe(callback)

    def create_task(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """Run ``coroutine`` as a task (on the loop only); stop() cancels it if still running."""
        task = self.loop.create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def cancel(self, task: Callable[[], asyncio.Task[Any] | None]) -> None:
        """Cancel the task ``task()`` names when read on the loop (real cancellation)."""
        self.loop.call_soon_threadsafe(self._cancel, task)

    def request_stop(self) -> None:
        """Cancel every task still running, then stop the loop once they have ended."""
        self._stopping.set()
        if not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self._shutdown)

    def join(self, deadline: float) -> bool:
        self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
        self._watchdog.join(timeout=max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            logger.warning(
                "the event loop thread %s did not stop in time: an async handler blocks it",
                self._thread.name,
            )
            return False
        return True

    # -- on the loop -------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        monitor = self.loop.create_task(self._monitor_lag())
        try:
            self.loop.run_forever()
        finally:
            monitor.cancel()
            self._end_loop()

    def _end_loop(self) -> None:
        """End the loop as ``asyncio.run`` does: cancel every task still on it (what
        libraries started there, such as the async pool a handler's
        ``adelay`` opened, whose shutdown guard closes it), let them finish, then close
        the async generators and the loop. Closing it with tasks pending would log
        ``Task was destroyed but it is pending!`` for each of them."""
        pending = asyncio.all_tasks(self.loop)
        for task in pending:
            task.cancel()
        if pending:
            _, stuck = self.loop.run_until_complete(asyncio.wait(pending, timeout=_END_TIMEOUT))
            if stuck:
                logger.warning(
                    "%d task(s) on the event loop thread %s ignored cancellation at stop",
                    len(stuck),
                    self._thread.name,
                )
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()

    @staticmethod
    def _cancel(task: Callable[[], asyncio.Task[Any] | None]) -> None:
        found = task()
        if found is not None:
            found.cancel()

    def _shutdown(self) -> None:
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        if not tasks:
            self.loop.stop()
            return
        gathered = asyncio.gather(*tasks, return_exceptions=True)
        gathered.add_done_callback(lambda _: self.loop.stop())

    async def _monitor_lag(self) -> None:
        while True:
            before = time.monotonic()
            self._ticked = before
            await asyncio.sleep(_TICK)
            blocked = time.monotonic() - before - _TICK
            if blocked >= self._threshold:
                self._log_blocked(blocked)
            self._blocker = None

    def _log_blocked(self, blocked: float) -> None:
        logger.warning(
            "the event loop was blocked for %.2f s by %s; no other async handler ran "
            "meanwhile: move blocking calls off the loop (asyncio.to_thread) or make "
            "the task a sync one",
            blocked,
            self._blocker or _NOT_A_HANDLER,
            extra={"blocked_ms": round(blocked * 1000, 1)},
        )

    # -- the watchdog thread -----------------------------------------------------------

    def _watch(self) -> None:
        while not self._stopping.wait(_TICK):
            if self._blocker is None and time.monotonic() - self._ticked > self._threshold:
                # Read from another thread while the loop is stuck in one task's step.
                task = asyncio.current_task(self.loop)
                self._blocker = (
                    self._describe(task) if task is not None else None
                ) or _NOT_A_HANDLER
