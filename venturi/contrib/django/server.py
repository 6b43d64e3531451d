"""Worker threads inside the Django web process (``VENTURI["WORKER_IN_SERVER"]``).

::

    VENTURI = {"DATABASE": "default", "WORKER_IN_SERVER": {"concurrency": 4}}

The dict is ``venturi.Worker``'s options (``concurrency``, ``kinds``, ...;
``queues`` names Django queues as in ``manage.py venturi worker --queues``).
The threads start at the first request each server process handles
(Django's ``request_started``), not when apps are ready: a pre-forking server
(gunicorn ``--preload``) loads the project in its master and forks, and
threads do not survive a fork; ``runserver``'s autoreloader loads it in a
watcher process that serves nothing; and ``manage.py migrate`` has no
business running jobs. ``start()`` starts them at once where that is wanted
(a gunicorn ``post_fork`` hook). They stop gracefully (running jobs get
``VENTURI["GRACE"]`` seconds, the rest are released) at interpreter exit and
on SIGTERM: when apps become ready in the main thread a SIGTERM handler is
installed that stops the worker, then defers to the handler that was there
before (the server's own graceful shutdown) or exits with status 0.

Prefer a separate ``manage.py venturi worker`` when jobs are CPU-heavy or
long (they share the web process's GIL and memory, and a deploy restarts
them), when the web tier scales to zero or recycles workers
(``--max-requests``), or to scale jobs and requests apart. Threads in the
server suit light, I/O-bound work on small deployments.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
from collections.abc import Mapping
from types import FrameType
from typing import Any

from django.core.signals import request_started

from venturi import Worker
from venturi.contrib.django import kinds, state

logger = logging.getLogger(__name__)


class ServerWorker:
    """This process's in-server worker; one per process, started at most once."""

    def __init__(self, options: Mapping[str, Any], grace: float) -> None:
        self.options = dict(options)
        queues = self.options.pop("queues", None)
        if queues is not None:
            self.options["kinds"] = [*self.options.get("kinds", ()), *kinds.kinds_of_queues(queues)]
        self.grace = grace
        self.worker: Worker | None = None
        self._pid: int | None = None
        self._lock = threading.Lock()

    def start(self) -> None:
        with self._lock:
            if self._pid == os.getpid():
                return
            # A worker inherited through fork has no threads here: start afresh.
            self.worker = Worker(state.get_app(), grace=self.grace, **self.options)
            self.worker.start()
            self._pid = os.getpid()

    def stop(self) -> None:
        """Stop this process's worker gracefully; idempotent."""
        with self._lock:
            worker = self.worker if self._pid == os.getpid() else None
            self.worker, self._pid = None, None
        if worker is not None:
            worker.stop(self.grace)

    def _on_request(self, **_: Any) -> None:
        if self._pid != os.getpid():
            self.start()

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


_armed: list[ServerWorker] = []


def arm(options: Mapping[str, Any], grace: float) -> ServerWorker:
    """Start the worker at this process's first request; stop it at exit and SIGTERM."""
    if not _armed:
        worker = ServerWorker(options, grace)
        request_started.connect(worker._on_request, dispatch_uid="venturi.server")
        atexit.register(worker.stop)
        if threading.current_thread() is threading.main_thread():
            worker._install_sigterm_handler()
        _armed.append(worker)
    return _armed[0]


def server_worker() -> ServerWorker | None:
    """The armed in-server worker, if ``WORKER_IN_SERVER`` is set."""
    return _armed[0] if _armed else None
