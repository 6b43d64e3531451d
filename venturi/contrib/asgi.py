"""A worker inside an ASGI process: a lifespan for Starlette, FastAPI and any ASGI app.

::

    from fastapi import FastAPI
    from venturi.contrib.asgi import worker_lifespan

    api = FastAPI(lifespan=worker_lifespan(app, concurrency=4, grace=10))

On startup the lifespan starts a ``venturi.Worker`` (its threads, beside the
event loop); on shutdown it stops it gracefully (``stop(grace=...)``: running
jobs finish within the grace, the others are released) and closes the App.
Both run in a thread (``asyncio.to_thread``) so the event loop keeps serving
while the worker starts and stops. uvicorn runs the lifespan shutdown when it
gets SIGTERM or SIGINT, after its open requests are done, so a rolling deploy
loses no job. The worker never installs signal handlers: the server owns them.

Your own lifespan composes with it (``lifespan=``): it is entered first and
left last, so what it sets up (migrations, clients the handlers use) exists
before the worker claims anything and outlives the worker's last job. Whatever
state it yields is passed through to the framework. Needs no dependency: a
lifespan is a plain async context manager factory.

``health_app(app)`` is a plain ASGI app answering ``GET .../healthz`` and ``GET
.../readyz`` with the checks of ``venturi.health`` (what ``venturi worker
--health-port`` serves), to mount where the probes look::

    api.mount("/venturi", health_app(app))   # /venturi/healthz, /venturi/readyz
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, MutableMapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, Generic, TypeVar, cast, overload

from venturi import App, Worker
from venturi.health import liveness, readiness, respond
from venturi.logs import show_in_server

__all__ = ["ASGIApp", "Lifespan", "WorkerLifespan", "health_app", "worker_lifespan"]

logger = logging.getLogger(__name__)

#: The state a lifespan yields to the requests (``None``: none).
S = TypeVar("S", bound="Mapping[str, Any] | None")

#: What Starlette and FastAPI accept as ``lifespan=``: called with the ASGI app.
Lifespan = Callable[[Any], AbstractAsyncContextManager[S]]

#: An ASGI 3 application: ``(scope, receive, send)``.
ASGIApp = Callable[
    [
        MutableMapping[str, Any],
        Callable[[], Awaitable[MutableMapping[str, Any]]],
        Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ],
    Awaitable[None],
]


class WorkerLifespan(Generic[S]):
    """The lifespan ``worker_lifespan`` returns; ``worker`` is the running Worker, if any.

    Options:
        app: the venturi App whose tasks the worker serves.
        lifespan: the ASGI app's own lifespan, entered around the worker.
        grace: seconds running jobs get to finish at shutdown before release.
        close_app: close the App (``await app.aclose()``) after the worker stopped;
            pass False when the App outlives this ASGI app (several test clients).
        worker_options: passed to ``venturi.Worker`` (``concurrency``, ``kinds``, ...).
    """

    def __init__(
        self,
        app: App,
        *,
        lifespan: Lifespan[S] | None = None,
        grace: float = 30.0,
        close_app: bool = True,
        **worker_options: Any,
    ) -> None:
        self.app = app
        self.grace = grace
        self.worker: Worker | None = None
        self._lifespan = lifespan
        self._close_app = close_app
        self._worker_options = worker_options

    def __call__(self, asgi_app: Any) -> AbstractAsyncContextManager[S]:
        return self._run(asgi_app)

    @asynccontextmanager
    async def _run(self, asgi_app: Any) -> AsyncIterator[S]:
        if self._lifespan is None:
            async with self._worker_running():
                yield cast(S, None)  # WorkerLifespan[None]: worker_lifespan's overloads
            return
        async with self._lifespan(asgi_app) as state, self._worker_running():
            yield state

    @asynccontextmanager
    async def _worker_running(self) -> AsyncIterator[None]:
        show_in_server()
        worker = Worker(self.app, grace=self.grace, **self._worker_options)
        await asyncio.to_thread(worker.start)
        self.worker = worker
        try:
            yield
        finally:
            logger.info("ASGI shutdown: stopping the venturi worker (grace %.1fs)", self.grace)
            await asyncio.to_thread(worker.stop, self.grace)
            self.worker = None
            if self._close_app:
                await self.app.aclose()


@overload
def worker_lifespan(
    app: App,
    *,
    lifespan: None = None,
    grace: float = 30.0,
    close_app: bool = True,
    **worker_options: Any,
) -> WorkerLifespan[None]: ...
@overload
def worker_lifespan(
    app: App,
    *,
    lifespan: Lifespan[S],
    grace: float = 30.0,
    close_app: bool = True,
    **worker_options: Any,
) -> WorkerLifespan[S]: ...
def worker_lifespan(
    app: App,
    *,
    lifespan: Lifespan[Any] | None = None,
    grace: float = 30.0,
    close_app: bool = True,
    **worker_options: Any,
) -> WorkerLifespan[Any]:
    """A lifespan that runs a ``venturi.Worker`` for as long as the ASGI app serves.

    Pass it as ``FastAPI(lifespan=...)`` or ``Starlette(lifespan=...)``; the
    options are ``WorkerLifespan``'s. Its type is the state your own ``lifespan``
    yields (``None`` without one), so a type checker accepts it where the framework
    does. Raises ``ConfigurationError`` at startup for worker options that cannot
    work (the server then refuses to start).
    """
    return WorkerLifespan(
        app, lifespan=lifespan, grace=grace, close_app=close_app, **worker_options
    )


def health_app(app: App) -> ASGIApp:
    """An ASGI app serving ``GET`` paths ending ``/healthz`` (this process's loops run)
    and ``/readyz`` (``app``'s database answers, its schema is current): 200 or 503
    with a one-line reason, 404 for other paths, 405 for other methods (ADR 0136).
    The readiness check runs in a thread: it opens a connection."""

    def ready() -> tuple[bool, str]:
        return readiness(app.check_schema)

    async def serve(
        scope: MutableMapping[str, Any],
        receive: Callable[[], Awaitable[MutableMapping[str, Any]]],
        send: Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ) -> None:
        if scope["type"] != "http":
            return
        if scope["method"] not in ("GET", "HEAD"):
            status, body = 405, "method not allowed\n"
        else:
            answer = await asyncio.to_thread(respond, scope["path"], liveness, ready)
            status, body = answer if answer is not None else (404, "not found\n")
        data = body.encode("utf-8")
        headers = [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(data)).encode()),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        is_head = scope["method"] == "HEAD"
        await send({"type": "http.response.body", "body": b"" if is_head else data})

    return serve
