"""A worker inside a Flask server, and enqueue inside the request's transaction.

::

    from venturi.contrib import flask as venturi_flask

    venturi_flask.init_app(flask_app, app, connection=lambda: g.db, concurrency=4)

    @flask_app.post("/orders")
    def create_order():
        order_id = insert_order(g.db)
        venturi_flask.delay(confirm_order, order_id)   # on g.db: commits with the order

**Worker lifecycle.** With ``start_worker=True`` the worker's threads start at
the first request each server process handles, not at ``init_app``: a
pre-forking server (gunicorn with ``--preload``) imports the app in its master
and forks, and threads do not survive a fork; the reloader of ``flask run
--debug`` imports it in a watcher process that serves nothing. ``start()``
starts them at once where that is wanted (a gunicorn ``post_fork`` hook).
They stop gracefully (``Worker.stop(grace)``: running jobs finish within the
grace, the others are released) at interpreter exit and on SIGTERM: when
``init_app`` runs in the main thread it installs a SIGTERM handler that stops
the worker, then defers to the handler that was there before (gunicorn's
graceful shutdown, say) or, if there was none, exits with status 0 instead of
dying on the signal.

**Transactional enqueue.** ``connection=`` names a callable that returns the
request's psycopg connection (wherever the app keeps it, e.g. ``g.db``);
``delay`` / ``apply_async`` / ``delay_many`` here pass it as ``connection=``,
so the job exists exactly when the request's transaction commits.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from types import FrameType
from typing import Any, ParamSpec, TypeVar

import flask

from venturi import App, JobRef, Task, Worker
from venturi.errors import ConfigurationError

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

EXTENSION = "venturi"


class VenturiFlask:
    """What ``init_app`` stores in ``flask_app.extensions["venturi"]``.

    Options:
        start_worker: run a worker in each server process (at its first request).
        connection: returns the request's psycopg connection, for ``delay`` & co.
        grace: seconds running jobs get to finish at shutdown before release.
        worker_options: passed to ``venturi.Worker`` (``concurrency``, ``kinds``, ...).
    """

    def __init__(
        self,
        flask_app: flask.Flask,
        app: App,
        *,
        start_worker: bool = True,
        connection: Callable[[], object] | None = None,
        grace: float = 30.0,
        **worker_options: Any,
    ) -> None:
        self.app = app
        self.grace = grace
        self.worker: Worker | None = None
        self._connection = connection
        self._worker_options = worker_options
        self._lock = threading.Lock()
        self._pid: int | None = None
        flask_app.extensions[EXTENSION] = self
        if start_worker:
            flask_app.before_request(self._start_once)
            atexit.register(self.stop)
            if threading.current_thread() is threading.main_thread():
                self._install_sigterm_handler()

    def _start_once(self) -> None:
        if self._pid != os.getpid():
            self.start()

    def start(self) -> None:
        """Start this process's worker (once per process; a forked child starts its own)."""
        with self._lock:
            if self._pid == os.getpid():
                return
            # A worker inherited through fork has no threads here: start afresh.
            self.worker = Worker(self.app, grace=self.grace, **self._worker_options)
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

    def request_connection(self) -> object:
        """The request's connection, from ``init_app(connection=...)``."""
        if self._connection is None:
            raise ConfigurationError(
                "venturi.contrib.flask: pass init_app(..., connection=lambda: g.db) "
                "(a callable returning the request's psycopg connection) to enqueue in it"
            )
        return self._connection()


def init_app(
    flask_app: flask.Flask,
    app: App,
    *,
    start_worker: bool = True,
    connection: Callable[[], object] | None = None,
    grace: float = 30.0,
    **worker_options: Any,
) -> VenturiFlask:
    """Attach a venturi App to a Flask app; see the module docstring and ``VenturiFlask``."""
    return VenturiFlask(
        flask_app,
        app,
        start_worker=start_worker,
        connection=connection,
        grace=grace,
        **worker_options,
    )


def extension() -> VenturiFlask:
    """The current Flask app's ``VenturiFlask`` (inside a request or app context)."""
    found = flask.current_app.extensions.get(EXTENSION)
    if not isinstance(found, VenturiFlask):
        raise ConfigurationError("venturi.contrib.flask.init_app was not called on this Flask app")
    return found


def delay(task: Task[P, R], *args: P.args, **kwargs: P.kwargs) -> JobRef:
    """``task.delay(...)`` inside the request's transaction (typed like ``delay``)."""
    return task.apply_async(args, kwargs, connection=extension().request_connection())


def apply_async(
    task: Task[Any, Any],
    args: Sequence[Any] = (),
    kwargs: Mapping[str, Any] | None = None,
    **options: Any,
) -> JobRef:
    """``task.apply_async(...)`` inside the request's transaction."""
    return task.apply_async(args, kwargs, connection=extension().request_connection(), **options)


def delay_many(
    task: Task[Any, Any], items: Iterable[Mapping[str, Any] | Sequence[Any]], **options: Any
) -> list[JobRef]:
    """``task.delay_many(...)`` inside the request's transaction (all or nothing with it)."""
    return task.delay_many(items, connection=extension().request_connection(), **options)
