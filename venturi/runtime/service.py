"""The start/stop contract shared by every background loop (STYLE R8).

A ``ServiceThread`` is a named daemon thread that calls one *step* function
until its stop event is set. The step does one iteration and returns how many
seconds to wait before the next one; the wait is ``stopping.wait(seconds)``, so
``request_stop()`` ends it at once. A step that raises does not kill the
thread: ``BackendUnavailable`` (the database went away) is logged once per
outage and retried after a capped exponential backoff, and any other error is
logged with its traceback and retried the same way, because a loop that dies
silently would leave jobs claimed until their leases lapse.

A *permanent* error is not retried: ``DatabaseRefused`` (no such database,
login refused) and ``SchemaMissing`` (the prefix is not migrated) would fail
the same way at every retry, forever. The loop logs it once, as an ERROR without a
traceback, and ends; under ``run_until_signalled`` the whole service then
stops and ``run()`` raises that error, so ``venturi worker`` exits with it as
one line (ADR 0118). At start (``check_at_start``) such a service waits a
bounded time for a database it cannot reach, then fails the same way.

Threads are daemons so that a handler stuck past every deadline never keeps the
process alive; ``join`` takes a deadline and reports overruns instead of hanging.

Every loop started and not asked to stop is listed by ``running_loops``, and
each says by when its next step is due (one clock read per step): a loop
overdue, or whose thread ended without being asked to, is what a liveness
probe reports (``venturi.health``, ADR 0136).
"""

from __future__ import annotations

import logging
import random
import signal
import threading
import time
from collections.abc import Callable
from contextvars import ContextVar
from types import FrameType
from typing import Any, Protocol

from venturi.errors import BackendUnavailable, DatabaseRefused, SchemaMissing

__all__ = [
    "START_WAIT",
    "Backoff",
    "Part",
    "ServiceThread",
    "check_at_start",
    "run_until_signalled",
    "running_loops",
]

logger = logging.getLogger(__name__)

#: How often ``run_until_signalled`` looks at the signal count.
_SIGNAL_SLICE = 0.2
#: Errors that retrying cannot fix: a loop that meets one stops (see the module docstring).
PERMANENT_ERRORS = (DatabaseRefused, SchemaMissing)
#: How long a service run by ``run_until_signalled`` waits for its database at start.
START_WAIT = 10.0


class Part(Protocol):
    """One part of a running service: start it, ask it to stop, wait with a deadline.

    ``ServiceThread`` is one; so are the committer and the worker's handler
    pool. ``join`` takes a ``time.monotonic()`` deadline.
    """

    def start(self) -> None: ...

    def request_stop(self) -> None: ...

    def join(self, deadline: float) -> bool:
        """False when the part overran ``deadline`` (it has been logged)."""
        ...


class Backoff:
    """Capped exponential delays with jitter, for retrying after an outage.

    ``next_delay()`` returns ``initial``, then twice that, and so on up to
    ``cap`` seconds, each multiplied by a random factor in [0.5, 1.0] so that
    the workers of a fleet do not reconnect in lockstep. ``reset()`` starts
    over after a success.
    """

    def __init__(
        self,
        *,
        initial: float = 0.1,
        cap: float = 5.0,
        rand: Callable[[], float] = random.random,
    ) -> None:
        self._initial = initial
        self._cap = cap
        self._rand = rand
        self._attempts = 0

    @property
    def is_failing(self) -> bool:
        """True between a failure and the next ``reset()``."""
        return self._attempts > 0

    def next_delay(self) -> float:
        base = min(self._cap, self._initial * 2.0 ** min(self._attempts, 32))
        self._attempts += 1
        return base * (0.5 + self._rand() / 2)

    def reset(self) -> None:
        self._attempts = 0


class ServiceThread:
    """One named loop thread: ``step()`` until ``request_stop()``.

    ``step`` returns the seconds to wait before it runs again (``0`` runs it
    again at once); ``on_exit`` runs in the thread when the loop ends (to close
    what only that thread uses). The thread is started by ``start()`` and may
    be started only once; ``request_stop()`` is idempotent and safe before
    ``start()``.

    Example::

        service = ServiceThread("venturi-beat", beat.run_once)
        service.start()
        ...
        service.request_stop()
        service.join(deadline=time.monotonic() + 5)
    """

    def __init__(
        self, name: str, step: Callable[[], float], *, on_exit: Callable[[], None] | None = None
    ) -> None:
        self.name = name
        self.stopping = threading.Event()
        self._step = step
        self._on_exit = on_exit
        self._backoff = Backoff()
        self._thread: threading.Thread | None = None
        #: ``time.monotonic()`` by which the next step should start: set as each step returns.
        self.next_step_by = 0.0
        # Built while run_until_signalled starts a service: report a permanent error to it.
        self._supervisor = _supervisor.get()

    def start(self) -> None:
        if self._thread is not None:
            return
        self.next_step_by = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name=self.name, daemon=True)
        # Started under the lock, so that a health check never sees a loop whose thread
        # has not started yet (``trouble`` would call it ended).
        with _running_lock:
            _running.add(self)
            self._thread.start()

    def request_stop(self) -> None:
        self.stopping.set()
        with _running_lock:
            _running.discard(self)

    def trouble(self, now: float, stall_after: float) -> str | None:
        """Why this loop is not running as it should at ``now`` (``time.monotonic()``):
        its thread ended unasked, or its step is ``stall_after`` seconds overdue."""
        if self._thread is not None and not self._thread.is_alive():
            return f"loop {self.name} has ended"
        overdue = now - self.next_step_by
        if overdue > stall_after:
            return f"loop {self.name} has made no progress for {overdue:.0f} s"
        return None

    def join(self, deadline: float) -> bool:
        """Wait for the thread until ``deadline`` (``time.monotonic()``); False if it overran."""
        if self._thread is None:
            return True
        self._thread.join(timeout=max(0.0, deadline - time.monotonic()))
        if self._thread.is_alive():
            logger.warning("thread %s did not stop before its deadline", self.name)
            return False
        return True

    def _loop(self) -> None:
        logger.debug("thread %s started", self.name)
        try:
            while not self.stopping.is_set():
                delay = self._guarded_step()
                self.next_step_by = time.monotonic() + delay
                if delay > 0:
                    self.stopping.wait(delay)
        finally:
            if self._on_exit is not None:
                self._on_exit()
            logger.debug("thread %s stopped", self.name)

    def _guarded_step(self) -> float:
        """Run one step, turning an error into a backoff delay (see module docstring)."""
        try:
            delay = self._step()
        except PERMANENT_ERRORS as exc:
            logger.error("%s: %s; stopping", self.name, exc)
            self.stopping.set()
            if self._supervisor is not None:
                self._supervisor.fail(exc)
            return 0.0
        except BackendUnavailable as exc:
            is_new_outage = not self._backoff.is_failing
            wait = self._backoff.next_delay()
            if is_new_outage:
                logger.warning(
                    "%s: database unreachable, retrying with backoff: %s", self.name, exc
                )
            else:
                logger.debug("%s: database still unreachable; retry in %.2fs", self.name, wait)
            return wait
        except Exception:
            wait = self._backoff.next_delay()
            logger.exception("%s: unexpected error; retrying in %.2fs", self.name, wait)
            return wait
        if self._backoff.is_failing:
            logger.info("%s: database reachable again", self.name)
            self._backoff.reset()
        return delay


#: The loops started in this process and not asked to stop (``running_loops``).
_running: set[ServiceThread] = set()
_running_lock = threading.Lock()


def running_loops() -> list[ServiceThread]:
    """The loops of this process started and not asked to stop, by name."""
    with _running_lock:
        return sorted(_running, key=lambda loop: loop.name)


def run_until_signalled(
    *,
    start: Callable[[], None],
    stop: Callable[[Callable[[], bool]], None],
    stopped: threading.Event,
    name: str,
) -> None:
    """Start a service, block until it stops or SIGINT/SIGTERM arrives, then stop it.

    ``stop`` receives ``hurry``: a callable that turns True once a second
    signal arrived, to cut a graceful stop short. ``stopped`` is the event the
    service sets once stopped (by this ``stop`` or by another thread's).
    Signal handlers are installed only from the main thread, and the previous
    ones are restored on return.

    A loop of the service that meets a permanent error (``PERMANENT_ERRORS``)
    stops the service at once, and that error is raised from here.
    """
    signals = _SignalCount()
    previous = signals.install()
    supervisor = _Supervisor(signals)
    is_stopping = False
    try:
        token = _supervisor.set(supervisor)
        try:
            start()
        finally:
            _supervisor.reset(token)
        while not stopped.wait(_SIGNAL_SLICE) and supervisor.error is None:
            if signals.count and not is_stopping:
                is_stopping = True
                logger.info("%s: signal received; stopping (a second signal stops at once)", name)
                stop(lambda: signals.count > 1)
    finally:
        stop(lambda: True)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if supervisor.error is not None:
        raise supervisor.error


def check_at_start(check: Callable[[], str], name: str) -> str:
    """Run a service's start check (``App.check_schema``) and return what it says.

    A permanent error (``DatabaseRefused``, ``SchemaMissing``) is raised: the
    service must not start. An outage depends on who started the service
    (ADR 0118, "Unreachable at start"):

    - under ``run_until_signalled`` (``venturi worker``, ``Worker.run()``,
      ``Beat.run()``: the process is the service) the check is retried with
      backoff for up to ``START_WAIT`` seconds, so a database that restarts or
      starts beside the service is waited for; then the last outage is raised
      (a signal cuts the wait short), and the command exits with one line
      naming the host;
    - elsewhere (``start()`` inside a web server) the service starts anyway,
      with one warning, and its loops wait for the database with backoff as
      they do for any outage: the host process keeps serving.
    """
    supervisor = _supervisor.get()
    if supervisor is not None:
        return _wait_for_database(check, name, supervisor)
    try:
        return check()
    except DatabaseRefused:
        raise
    except BackendUnavailable as exc:
        logger.warning("%s: database unreachable at start; starting anyway: %s", name, exc)
        return "(unreachable for now)"


def _wait_for_database(check: Callable[[], str], name: str, supervisor: _Supervisor) -> str:
    """``check()`` until it answers, retried on outages for up to ``START_WAIT`` seconds.

    Quiet while it waits (DEBUG): the outcome is either the service's start
    line or the one error line, which names the host and how long it waited.
    """
    started = time.monotonic()
    deadline = started + START_WAIT
    backoff = Backoff(initial=0.25, cap=2.0)
    while True:
        try:
            location = check()
        except DatabaseRefused:
            raise
        except BackendUnavailable as exc:
            left = deadline - time.monotonic()
            if supervisor.is_signalled() or left <= 0:
                waited = time.monotonic() - started
                raise BackendUnavailable(f"{exc}; {name} gave up after {waited:.0f} s") from exc
            delay = min(backoff.next_delay(), left)
            logger.debug("%s: %s at start; trying again in %.2fs", name, exc, delay)
            supervisor.wait_unless_signalled(delay)
        else:
            if backoff.is_failing:
                waited = time.monotonic() - started
                logger.info("%s: database reachable after %.1fs at start", name, waited)
            return location


class _Supervisor:
    """The first permanent error any loop of one ``run_until_signalled`` service met,
    and whether a signal arrived (for the start check's wait)."""

    def __init__(self, signals: _SignalCount) -> None:
        self.error: Exception | None = None
        self._signals = signals

    def is_signalled(self) -> bool:
        return self._signals.count > 0

    def wait_unless_signalled(self, seconds: float) -> None:
        """Wait ``seconds``, in slices that look at the signal count (its handler sets no event)."""
        deadline = time.monotonic() + seconds
        pause = threading.Event()
        while not self.is_signalled() and (left := deadline - time.monotonic()) > 0:
            pause.wait(min(left, _SIGNAL_SLICE))

    def fail(self, error: Exception) -> None:
        if self.error is None:
            self.error = error


#: Set while ``run_until_signalled`` calls ``start``: the loops built then report to it.
_supervisor: ContextVar[_Supervisor | None] = ContextVar("venturi_supervisor", default=None)


class _SignalCount:
    """Counts SIGINT/SIGTERM; the handler takes no lock and logs nothing (the
    interrupted main thread may hold either), so the waiting loop polls it."""

    def __init__(self) -> None:
        self.count = 0

    def install(self) -> dict[int, Any]:
        if threading.current_thread() is not threading.main_thread():
            logger.debug("not in the main thread: no signal handlers installed")
            return {}
        return {
            signum: signal.signal(signum, self._on_signal)
            for signum in (signal.SIGINT, signal.SIGTERM)
        }

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
