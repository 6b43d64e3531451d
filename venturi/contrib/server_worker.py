"""One venturi worker per web-server process, for integrations that run worker threads
inside the server (``venturi.contrib.flask``, ``venturi.contrib.django``).

The threads start at most once per process, at its first request (the
integration calls ``start_once``), not at import: a pre-forking server imports
the app in its master and forks, and threads do not survive a fork; a
reloader imports it in a watcher process that serves nothing. ``start()``
starts them at once where that is wanted (a gunicorn ``post_fork`` hook).
They stop gracefully (``Worker.stop(grace)``: running jobs finish within the
grace, the others are released) at interpreter exit and, when armed from the
main thread, on SIGTERM, which then defers to the handler that was there
before (the server's own graceful shutdown) or, if there was none, exits
with status 0 instead of dying on the signal. The worker's start and stop
lines show at INFO on stderr unless the program configured logging itself
(``venturi.logs.show_in_server``).
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
from collections.abc import Callable, Mapping
from types import FrameType
from typing import Any

from venturi import App, Worker
from venturi.logs import show_in_server

__all__ = ["ServerWorker"]

logger = logging.getLogger(__name__)


class ServerWorker:
    """This process's in-server worker of the App ``app()`` returns (read when it starts)."""

    def __init__(self, app: Callable[[], App], options: Mapping[str, Any], grace: float) -> None:
        self.options = dict(options)
        self.grace = grace
        self.worker: Worker | None = None
        self._app = app
        self._pid: int | None = None
        self._lock = threading.Lock()

    def arm(self) -> None:
        """Stop at interpreter exit, and on SIGTERM when called from the main thread."""
        atexit.register(self.stop)
        if threading.current_thread() is threading.main_thread():
            self._install_sigterm_handler()

    def start_once(self, *_: Any, **__: Any) -> None:
        """Start unless this process's worker runs (a request hook: takes any arguments)."""
        if self._pid != os.getpid():
            self.start()

    def start(self) -> None:
        """Start this process's worker (once per process; a forked child starts its own)."""
        with self._lock:
            if self._pid == os.getpid():
                return
            # A worker inherited through fork has no threads here: start afresh.
            show_in_server()
            self.worker = Worker(self._app(), grace=self.grace, **self.options)
            self.worker.start()
            self._pid = os.getpid()

    def stop(self) -> None:
        """Stop this process's worker gracefully; idempotent."""
        with self._lock:
            worker = self.worker if self._pid == os.getpid() else None
            self.worker, self._pid = None, None
        if worker is not None:
            worker.stop(self.grace)

    def _install_sigterm_handler(self) -> None:
        previous = signal.getsignal(signal.SIGTERM)

        def on_sigterm(signum: int, frame: FrameType | None) -> None:
            logger.info("SIGTERM: stopping the venturi worker (grace %.1fs)", self.grace)
            self.stop()
            if callable(previous):
                previous(signum, frame)
            elif previous != signal.SIG_IGN:
                raise SystemExit(0)

        signal.signal(signal.SIGTERM, on_sigterm)
