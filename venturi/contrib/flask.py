"""A worker inside a Flask server, and enqueue inside the request's transaction.

::

    from venturi.contrib import flask as venturi_flask

    venturi_flask.init_app(flask_app, app, connection=lambda: g.db, concurrency=4)

    @flask_app.post("/orders")
    def create_order():
        order_id = insert_order(g.db)
        venturi_flask.delay(confirm_order, order_id)   # on g.db: commits with the order

**Worker lifecycle.** With ``start_worker=True`` each server process runs one
worker, started at its first request and stopped gracefully at exit and on
SIGTERM (``venturi.contrib.server_worker`` says why and how); ``start()``
starts it at once where that is wanted (a gunicorn ``post_fork`` hook).

**Transactional enqueue.** ``connection=`` names a callable that returns the
request's psycopg connection (wherever the app keeps it, e.g. ``g.db``);
``delay`` / ``apply_async`` / ``delay_many`` here pass it as ``connection=``,
so the job exists exactly when the request's transaction commits.

**Health checks.** ``health_blueprint(app)`` answers ``GET /healthz`` and ``GET
/readyz`` with the checks of ``venturi.health`` (what ``venturi worker
--health-port`` serves): ``flask_app.register_blueprint(health_blueprint(app),
url_prefix="/venturi")``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

import flask

from venturi import App, JobRef, Task, Worker
from venturi.contrib.server_worker import ServerWorker
from venturi.errors import ConfigurationError
from venturi.health import liveness, readiness, respond

__all__ = [
    "EXTENSION",
    "VenturiFlask",
    "apply_async",
    "delay",
    "delay_many",
    "extension",
    "health_blueprint",
    "init_app",
]

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
        self.server_worker = ServerWorker(lambda: app, worker_options, grace)
        self._connection = connection
        flask_app.extensions[EXTENSION] = self
        if start_worker:
            flask_app.before_request(self.server_worker.start_once)
            self.server_worker.arm()

    @property
    def worker(self) -> Worker | None:
        """This process's running worker, if started."""
        return self.server_worker.worker

    def start(self) -> None:
        """Start this process's worker now (once per process; a forked child starts its own)."""
        self.server_worker.start()

    def stop(self) -> None:
        """Stop this process's worker gracefully; idempotent."""
        self.server_worker.stop()

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


def health_blueprint(app: App, name: str = "venturi_health") -> flask.Blueprint:
    """``GET /healthz`` (this process's loops run) and ``GET /readyz`` (``app``'s
    database answers, its schema is current): 200 or 503 with a one-line reason."""
    blueprint = flask.Blueprint(name, __name__)

    def check() -> flask.Response:
        answer = respond(flask.request.path, liveness, lambda: readiness(app.check_schema))
        status, body = answer if answer is not None else (404, "not found\n")
        return flask.Response(body, status=status, mimetype="text/plain")

    blueprint.add_url_rule("/healthz", "healthz", check)
    blueprint.add_url_rule("/readyz", "readyz", check)
    return blueprint
