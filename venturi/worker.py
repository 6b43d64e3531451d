"""The public ``Worker``: claims jobs, runs their handlers on a fixed pool, records outcomes.

This module is the facade: the options and their checks, and the three ways
to run a worker (``run``, ``start``/``stop``, ``run_once``). The running loop
itself (claim loop, handler threads, event loop, committer, lease keeper,
limits, pruner, registry entry) is ``venturi.runtime.engine``, one ``Engine``
per start()..stop() cycle; it logs as ``venturi.worker`` too.

The claim, the run and the record go through one ``Runner``, the same path
``run_once`` and ``venturi.testing.drain`` use.
"""

from __future__ import annotations

import importlib.metadata
import logging
import threading
import time
from collections.abc import Callable, Collection
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from venturi.backend import Backend
from venturi.errors import ConfigurationError
from venturi.events import WorkerStarted, WorkerStopped
from venturi.runtime.engine import SHUTDOWN_TIMEOUT, Engine, EngineSettings
from venturi.runtime.leases import MAX_RECOVERY_INTERVAL
from venturi.runtime.prefetch import DEFAULT_PREFETCH
from venturi.runtime.runner import Runner, worker_id
from venturi.runtime.service import check_at_start, run_until_signalled

if TYPE_CHECKING:
    from venturi.app import App
    from venturi.task import Task

__all__ = ["DEFAULT_ASYNC_CONCURRENCY", "MAX_PREFETCH", "SHUTDOWN_TIMEOUT", "Worker"]

logger = logging.getLogger(__name__)

#: The largest ``prefetch``: the most claimed rows one worker may hold unstarted.
#: Within it, a worker holds only what its handlers start within the prefetch
#: horizon at their recent pace (``runtime/prefetch.py``, ADR 0114).
MAX_PREFETCH = 1000
#: The default ``async_concurrency``: async handlers mostly wait on I/O, and each
#: waiting one costs a coroutine, not a thread.
DEFAULT_ASYNC_CONCURRENCY = 100


class Worker:
    """Runs the jobs of an App's tasks on a pool of threads.

    Options:
        concurrency: handler threads, i.e. jobs run at once (default 8).
        kinds: the kinds to serve; ``None`` serves every task of ``app.tasks()``.
            Kinds in the table that this worker does not know are never claimed.
        grace: seconds ``stop()`` lets running handlers finish before their
            jobs are released back to ``pending`` (ADR 21).
        poll_interval: the longest idle wait between two claims, the backstop
            for a lost notification (ADR 20).
        recovery_interval: seconds between two sweeps for expired leases
            (ADR 19); at most 10.
        retention: when set, delete terminal jobs finished longer ago than
            this, once a minute, one worker of the prefix at a time (pruner.py).
        prefetch: the most claimed jobs held waiting for a free handler
            (default 256, at most ``MAX_PREFETCH`` = 1000; 0 claims only for
            free handlers). Only as many are
            held as the handlers should start within 0.1 s at their recent
            pace, so long jobs are never held ahead (ADR 0114).
        async_concurrency: ``async def`` handlers run at once on the worker's
            event loop (default 100), apart from ``concurrency``; nothing is
            claimed ahead for them (ADR 0126).

    Raises ``ConfigurationError`` for an unknown kind or an impossible setting.

    Three ways to run it::

        venturi.Worker(app).run()                  # blocks; SIGINT/SIGTERM stop it
        w = venturi.Worker(app); w.start()         # threads inside another process
        w.stop(grace=10)
        assert venturi.Worker(app).run_once() == 1 # one iteration, in tests
    """

    def __init__(
        self,
        app: App,
        *,
        concurrency: int = 8,
        kinds: Collection[str] | None = None,
        grace: float = 30.0,
        poll_interval: float = 5.0,
        recovery_interval: float = 5.0,
        retention: timedelta | None = None,
        prefetch: int | None = None,
        async_concurrency: int = DEFAULT_ASYNC_CONCURRENCY,
    ) -> None:
        if isinstance(kinds, str):
            raise ConfigurationError("kinds must be a collection of kinds, not one string")
        if concurrency < 1:
            raise ConfigurationError(f"concurrency must be at least 1, got {concurrency}")
        if isinstance(async_concurrency, bool) or not (
            isinstance(async_concurrency, int) and async_concurrency >= 1
        ):
            raise ConfigurationError(
                f"async_concurrency must be an integer of at least 1, got {async_concurrency!r}"
            )
        if grace < 0:
            raise ConfigurationError(f"grace must not be negative, got {grace}")
        if poll_interval <= 0:
            raise ConfigurationError(f"poll_interval must be positive, got {poll_interval}")
        if not 0 < recovery_interval <= MAX_RECOVERY_INTERVAL:
            raise ConfigurationError(
                f"recovery_interval must be in (0, {MAX_RECOVERY_INTERVAL:g}] seconds, "
                f"got {recovery_interval}"
            )
        if prefetch is not None and not 0 <= prefetch <= MAX_PREFETCH:
            raise ConfigurationError(
                f"prefetch must be between 0 and {MAX_PREFETCH}, got {prefetch}"
            )
        if retention is not None and retention < timedelta(0):
            raise ConfigurationError(f"retention must not be negative, got {retention}")
        known = app.tasks()
        self.app = app
        self.concurrency = concurrency
        self.async_concurrency = async_concurrency
        self.kinds: tuple[str, ...] = tuple(app.served_kinds(kinds, who="the worker"))
        self.grace = grace
        self.poll_interval = poll_interval
        self.recovery_interval = recovery_interval
        self.retention = retention
        self.prefetch = DEFAULT_PREFETCH if prefetch is None else prefetch
        self.worker_id = worker_id()
        self._known: dict[str, Task[Any, Any]] = dict(known)
        #: Built on first use, so that constructing a Worker builds no backend.
        self._runner: Runner | None = None

        # Guards the start/stop state; each cycle's bookkeeping has its own lock.
        self._lock = threading.Lock()
        self._is_started = False
        self._stopped = threading.Event()
        self._engine: Engine | None = None

    @property
    def backend(self) -> Backend:
        return self.app.backend

    # -- running -------------------------------------------------------------------------

    def run(self) -> None:
        """Run until SIGINT or SIGTERM, then stop gracefully.

        The first signal stops claiming and lets running handlers finish within
        ``grace``; a second one stops at once (running jobs are released). Signal
        handlers are installed only here, and only from the main thread. The
        App stays open: whoever created it closes it.
        """
        run_until_signalled(
            start=self.start,
            stop=lambda hurry: self.stop(hurry=hurry),
            stopped=self._stopped,
            name=f"worker {self.worker_id}",
        )

    def start(self) -> None:
        """Start the worker's threads and return; safe to call twice.

        Checks the database first (``App.check_schema``): an unmigrated prefix
        or a refused login raises here, before any thread starts. An outage does
        not: the worker starts anyway and its loops wait for the database, so a
        web server that starts it keeps serving. Under ``run()`` an outage is
        waited for up to ``START_WAIT`` seconds (runtime/service.py), then
        raised (ADR 0118).
        """
        location = check_at_start(self.app.check_schema, f"worker {self.worker_id}")
        with self._lock:
            if self._is_started:
                return
            self._is_started = True
            self._stopped.clear()
        engine = Engine(
            self._run_path(),
            EngineSettings(
                concurrency=self.concurrency,
                async_concurrency=self.async_concurrency,
                kinds=self.kinds,
                poll_interval=self.poll_interval,
                recovery_interval=self.recovery_interval,
                retention=self.retention,
                prefetch=self.prefetch,
            ),
            backend=self.backend,
            events=self.app.events,
            name=f"venturi-worker-{id(self):x}",
        )
        self._engine = engine
        engine.start()
        logger.info(
            "worker %s started: concurrency %d%s, kinds %s; venturi %s, database %s, prefix %s",
            self.worker_id,
            self.concurrency,
            f", async_concurrency {self.async_concurrency}" if engine.has_async_kinds else "",
            ", ".join(self.kinds) or "(none)",
            _version(),
            location,
            self.app.prefix,
        )
        if self.app.events.active:
            self.app.events.emit(
                WorkerStarted(
                    worker_id=self.worker_id, kinds=self.kinds, concurrency=self.concurrency
                )
            )

    def stop(self, grace: float | None = None, *, hurry: Callable[[], bool] | None = None) -> None:
        """Stop gracefully (ADR 21): idempotent, safe before ``start()``, bounded in time.

        Stops claiming, lets running handlers finish for up to ``grace`` seconds
        (default: the worker's ``grace``; ``hurry`` returning True cuts it
        short), returns the jobs still held to ``pending`` with a ``released``
        entry and no failure, records every outcome already produced, then ends
        the threads, each within ``SHUTDOWN_TIMEOUT`` more seconds. A handler
        still running afterwards keeps its (daemon) thread, and its late
        outcome is discarded. The App stays usable: its backend is not closed.
        """
        with self._lock:
            engine = self._engine
            if not self._is_started or engine is None:
                return
            self._is_started = False
            self._engine = None
        running = engine.drain()
        grace = self.grace if grace is None else grace
        logger.info(
            "worker %s stopping: %d job(s) running, grace %.1fs", self.worker_id, running, grace
        )
        engine.stop(time.monotonic() + grace, hurry or (lambda: False))
        self._stopped.set()
        logger.info("worker %s stopped", self.worker_id)
        if self.app.events.active:
            self.app.events.emit(WorkerStopped(worker_id=self.worker_id))

    def run_once(self) -> int:
        """Sweep expired leases, claim one batch, run it in this thread, record it.

        For tests (STYLE R9): no threads, no waiting. The batch is as large as
        ``concurrency`` allows (capped kinds count as empty, since the jobs run
        one after another). Not to be mixed with ``start()`` on the same
        Worker. Returns how many jobs were run.
        """
        runner = self._run_path()
        runner.lease_keeper(recovery_interval=self.recovery_interval).recover_once()
        request = runner.plan.request(free=self.concurrency, running={}, is_renewed=False)
        if request is None:
            return 0
        return len(runner.run(request))

    def _run_path(self) -> Runner:
        if self._runner is None:
            self._runner = Runner(
                self.backend,
                self._known,
                kinds=self.kinds,
                worker_id=self.worker_id,
                concurrency=self.concurrency,
                events=self.app.events,
                age_after=self.app.age_after,
                result_max_bytes=self.app.result_max_bytes,
                shared_limits=self.app.shared_limits(),
            )
        return self._runner


def _version() -> str:
    try:
        return importlib.metadata.version("venturi")
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"
