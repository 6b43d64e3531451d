"""The dashboard's ASGI application: its routes, error pages and mounting.

Only venturi's public API is used (App operations and tasks), so the
dashboard works against any App, whatever backend it was built with.
Blocking App calls run in Starlette's thread pool; reads go through one
``SharedCache`` so viewers do not multiply queries. The pages live in
``pages``, the changes in ``actions``, the rules they share in ``board``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from venturi.app import App
from venturi.dashboard.actions import (
    bulk,
    bulk_confirm,
    cancel,
    enqueue,
    enqueue_form,
    login,
    login_form,
    logout,
    retry,
)
from venturi.dashboard.board import HERE, Dashboard, board_of, logger
from venturi.dashboard.control import kind_change, kinds, schedule_change
from venturi.dashboard.keys import keys
from venturi.dashboard.pages import job, jobs, overview, schedules, workers, workflow, workflows
from venturi.dashboard.security import Authorize, SecurityHeaders
from venturi.errors import BackendUnavailable, VenturiError

__all__ = ["create_app", "create_wsgi_app"]


async def _unavailable(request: Request, exc: Exception) -> Response:
    logger.warning("dashboard: %s", exc)
    return board_of(request).error(request, 503, "Database unavailable", str(exc))


async def _failed(request: Request, exc: Exception) -> Response:
    logger.warning("dashboard: %s", exc)
    return board_of(request).error(request, 500, "Error", str(exc))


class _RootPath:
    """Tells the routes where they are mounted when the server in front does not."""

    def __init__(self, app: ASGIApp, root_path: str) -> None:
        self._app = app
        self._root_path = root_path

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not scope.get("root_path"):
            scope = {**scope, "root_path": self._root_path}
        await self._app(scope, receive, send)


Endpoint = Callable[[Request], Awaitable[Response]]


def _behind_sign_in(endpoint: Endpoint) -> Endpoint:
    """``endpoint``, served only to a request that may read (``Dashboard.refuse_read``)."""

    @wraps(endpoint)
    async def checked(request: Request) -> Response:
        refusal = board_of(request).refuse_read(request)
        return refusal if refusal is not None else await endpoint(request)

    return checked


def _route(path: str, endpoint: Endpoint, name: str, method: str = "GET") -> Route:
    return Route(path, _behind_sign_in(endpoint), methods=[method], name=name)


def _routes() -> list[Route | Mount]:
    """Every URL of the dashboard, by name (templates and redirects use the names).

    Every route but the sign-in and the static files passes the read rule first,
    changes included: when reads need sign-in, nothing else answers a stranger.
    """
    return [
        _route("/", overview, "overview"),
        _route("/jobs", jobs, "jobs"),
        _route("/jobs/bulk", bulk_confirm, "bulk_confirm"),
        _route("/jobs/bulk", bulk, "bulk", "POST"),
        _route("/jobs/{job_id}", job, "job"),
        _route("/jobs/{job_id}/retry", retry, "retry", "POST"),
        _route("/jobs/{job_id}/cancel", cancel, "cancel", "POST"),
        _route("/workflows", workflows, "workflows"),
        _route("/workflows/{workflow_id}", workflow, "workflow"),
        _route("/workers", workers, "workers"),
        _route("/kinds", kinds, "kinds"),
        _route("/kinds/change", kind_change, "kind_change", "POST"),
        _route("/schedules", schedules, "schedules"),
        _route("/schedules/change", schedule_change, "schedule_change", "POST"),
        _route("/keys", keys, "keys"),
        _route("/enqueue", enqueue_form, "enqueue"),
        _route("/enqueue", enqueue, "enqueue_post", "POST"),
        _route("/logout", logout, "logout", "POST"),
        Route("/login", login_form, name="login"),
        Route("/login", login, methods=["POST"], name="login_post"),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]


def create_app(
    app: App,
    *,
    token: str | None = None,
    read_only: bool = False,
    root_path: str = "",
    authorize: Authorize | None = None,
    secret: bytes | None = None,
    live_interval: float = 2.0,
    public_read: bool = False,
) -> ASGIApp:
    """The dashboard of ``app`` as an ASGI application, to serve or to mount.

    Options:
        token: the secret that signs a browser in, to read every page and to
            change things (retry, cancel, enqueue). Without it (and without
            ``authorize``) pass ``read_only=True``.
        public_read: with a token, let anyone who reaches the dashboard read it
            (payloads, results, tracebacks) and keep only the changes behind
            the sign-in.
        read_only: show everything, change nothing, show no action buttons; no
            sign-in (whatever is in front decides who reads).
        root_path: the URL prefix the dashboard is served under when the
            server in front strips it and does not say so (Starlette's
            ``Mount`` and WSGI's ``SCRIPT_NAME`` say so already).
        authorize: ``request -> bool``, for a host application with its own
            sign-in (the hook the Django integration uses): a request it
            approves may change things without the token.
        secret: signing key for sessions when there is no token (several
            processes behind ``authorize`` must share one).
        live_interval: seconds between live refreshes; also how long a read
            is shared between viewers.

    Example::

        from fastapi import FastAPI
        api = FastAPI()
        api.mount("/venturi", venturi.dashboard.create_app(app, token=os.environ["TOKEN"]))
    """
    board = Dashboard(
        app,
        token=token,
        read_only=read_only,
        authorize=authorize,
        secret=secret,
        live_interval=live_interval,
        public_read=public_read,
    )
    starlette = Starlette(
        routes=_routes(),
        exception_handlers={BackendUnavailable: _unavailable, VenturiError: _failed},
    )
    starlette.state.dashboard = board
    asgi: ASGIApp = SecurityHeaders(starlette)
    if root_path:
        asgi = _RootPath(asgi, "/" + root_path.strip("/"))
    return asgi


def create_wsgi_app(app: App, **options: Any) -> Callable[..., Any]:
    """``create_app`` for WSGI servers (Flask, Django, gunicorn): the same options.

    Served through ``a2wsgi``, which runs the ASGI app on an event loop
    thread of its own; live updates poll, so no request is held open.
    """
    from a2wsgi import ASGIMiddleware

    return ASGIMiddleware(create_app(app, **options))  # type: ignore[arg-type]
