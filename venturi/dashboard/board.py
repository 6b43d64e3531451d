"""The state behind the dashboard's routes: the App, the rules for changes, rendering.

Every route reaches the one ``Dashboard`` through ``board_of(request)``. It
holds the permission rules (read-only, token sign-in, the host's
``authorize`` hook), the checks every POST passes (``change``: origin, size,
CSRF; ``guarded``: plus the permission), the templates, and the shared read
cache. ``url_for`` and ``see_other`` build paths under wherever the dashboard
is mounted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from venturi.app import App
from venturi.dashboard.cache import SharedCache
from venturi.dashboard.security import (
    COOKIE,
    Authorize,
    Session,
    Signer,
    is_same_origin,
)
from venturi.dashboard.views import (
    bounded_traceback,
    format_age,
    format_json,
    format_time,
)
from venturi.errors import ConfigurationError

__all__ = [
    "HERE",
    "MAX_FORM_BYTES",
    "NAVIGATION",
    "NOTICES",
    "Dashboard",
    "board_of",
    "logger",
    "see_other",
    "url_for",
]

#: The dashboard logs as ``venturi.dashboard.web``, whichever of its modules speaks.
logger = logging.getLogger("venturi.dashboard.web")

T = TypeVar("T")

HERE = Path(__file__).parent
#: Form bodies are a few fields; anything larger is refused before parsing.
MAX_FORM_BYTES = 64 * 1024

#: The navigation, in order: (route name, label).
NAVIGATION = (
    ("overview", "Overview"),
    ("jobs", "Jobs"),
    ("workflows", "Workflows"),
    ("workers", "Workers"),
    ("schedules", "Schedules"),
    ("enqueue", "Enqueue"),
)

#: Messages shown after a change, by code: the URL carries a code, never text.
NOTICES = {
    "retried": "Retried: the job is pending again, eligible now.",
    "cancelled": "Cancelled: the job is dead with the note 'cancelled'.",
    "cancel-requested": (
        "Cancellation requested: the job's worker sees the request at its next lease "
        "renewal and ends the run dead, note 'cancelled' (a run that completes first "
        "stays completed)."
    ),
    "enqueued": "Enqueued.",
    "bulk-retried": "Retried {n} job(s).",
    "bulk-cancelled": "Cancelled {n} job(s).",
    "signed-in": "Signed in: changes are allowed in this browser.",
    "signed-out": "Signed out.",
}


class Dashboard:
    """The state behind the routes: the App, the rules for changes, the shared cache."""

    def __init__(
        self,
        app: App,
        *,
        token: str | None,
        read_only: bool,
        authorize: Authorize | None,
        secret: bytes | None,
        live_interval: float,
    ) -> None:
        if read_only and (token is not None or authorize is not None):
            raise ConfigurationError("a read-only dashboard takes no token and no authorize hook")
        if not read_only and token is None and authorize is None:
            raise ConfigurationError(
                "the dashboard needs token=... (or authorize=...) to allow changes, "
                "or read_only=True"
            )
        if token is not None and (not token or len(token) < 8):
            raise ConfigurationError("the dashboard token must be at least 8 characters")
        if not live_interval > 0:
            raise ConfigurationError(f"live_interval must be positive, got {live_interval}")
        self.app = app
        self.token = token
        self.is_read_only = read_only
        self.authorize = authorize
        self.signer = Signer.for_token(token, secret)
        self.cache = SharedCache(live_interval)
        self.live_interval = live_interval
        self.templates = jinja2.Environment(
            loader=jinja2.FileSystemLoader(HERE / "templates"),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
        )
        self.templates.filters.update(
            age=format_age,
            time=format_time,
            json=format_json,
            traceback=bounded_traceback,
        )

    # -- reads (shared) --------------------------------------------------------------

    async def read(self, key: tuple[Any, ...], load: Callable[[], T]) -> T:
        return await run_in_threadpool(self.cache.get, key, load)

    # -- sessions and permission -----------------------------------------------------

    def session(self, request: Request) -> Session:
        found = self.signer.read_session(request)
        if found is not None and found.is_signed_in and self.token is None:
            found = Session(found.nonce, False)
        return found or self.signer.new_session(is_signed_in=False)

    def may_change(self, request: Request, session: Session) -> bool:
        if self.is_read_only:
            return False
        if self.authorize is not None and self.authorize(request):
            return True
        return self.token is not None and session.is_signed_in

    def render(
        self,
        request: Request,
        template: str,
        context: Mapping[str, Any],
        *,
        status_code: int = 200,
        session: Session | None = None,
    ) -> HTMLResponse:
        session = session or self.session(request)
        notice = NOTICES.get(request.query_params.get("notice", ""))
        if notice is not None:
            count = request.query_params.get("n", "")
            notice = notice.format(n=int(count) if count.isdigit() else "some")
        html = self.templates.get_template(template).render(
            request=request,
            url=lambda name, **params: url_for(request, name, **params),
            navigation=NAVIGATION,
            is_read_only=self.is_read_only,
            has_token=self.token is not None,
            may_change=self.may_change(request, session),
            csrf=self.signer.csrf_token(session),
            live_interval=self.live_interval,
            notice=notice,
            **{"page": "", **context},
        )
        response = HTMLResponse(html, status_code=status_code)
        response.headers["cache-control"] = "no-store"
        if session.is_new:
            self.set_cookie(request, response, session)
        return response

    def set_cookie(self, request: Request, response: Response, session: Session) -> None:
        response.set_cookie(
            COOKIE,
            self.signer.cookie_value(session),
            path=_root(request) or "/",
            httponly=True,
            samesite="strict",
            secure=request.url.scheme == "https",
        )

    def error(self, request: Request, status_code: int, title: str, message: str) -> HTMLResponse:
        return self.render(
            request, "error.html", {"title": title, "message": message}, status_code=status_code
        )

    async def change(self, request: Request) -> tuple[dict[str, str], Session] | Response:
        """Every POST passes here: read-only, origin, CSRF and permission, in that order.

        Returns the form and session, or the refusal to send; nothing is written
        before this returns a form.
        """
        if self.is_read_only:
            return self.error(request, 403, "Read-only", "This dashboard is read-only.")
        if not is_same_origin(request):
            return self.error(
                request, 403, "Refused", "The request did not come from this dashboard's pages."
            )
        body = await request.body()
        if len(body) > MAX_FORM_BYTES:
            return self.error(request, 413, "Too large", "The form is too large.")
        try:
            form = dict(parse_qsl(body.decode(), keep_blank_values=True, strict_parsing=False))
        except UnicodeDecodeError:
            return self.error(request, 400, "Bad form", "The form is not UTF-8 text.")
        session = self.session(request)
        if session.is_new or not self.signer.is_valid_csrf(session, form.get("csrf")):
            return self.error(
                request,
                403,
                "Refused",
                "The form's security token is missing or stale: reload the page and try again.",
            )
        return form, session

    async def guarded(self, request: Request) -> tuple[dict[str, str], Session] | Response:
        """``change`` plus the permission to change things."""
        checked = await self.change(request)
        if isinstance(checked, Response):
            return checked
        _, session = checked
        if not self.may_change(request, session):
            return self.error(request, 403, "Sign in", "Changes need the dashboard token.")
        return checked


# --------------------------------------------------------------------- requests


def board_of(request: Request) -> Dashboard:
    """The ``Dashboard`` whose route is serving ``request``."""
    board: Dashboard = request.app.state.dashboard
    return board


def url_for(request: Request, name: str, **params: str) -> str:
    """A path to one of the dashboard's routes, under wherever it is mounted.

    Resolved on the dashboard's own routes (``request.app`` is the dashboard's
    Starlette even when mounted), not the host application's, whose router
    cannot see names inside an unnamed mount.
    """
    dashboard: Starlette = request.app
    return _root(request) + str(dashboard.url_path_for(name, **params))


def _root(request: Request) -> str:
    root: str = request.scope.get("root_path", "")
    return root.rstrip("/")


def see_other(request: Request, name: str, query: str = "", **params: str) -> RedirectResponse:
    """Redirect after a POST to a page the browser then GETs (303: no re-submission)."""
    target = url_for(request, name, **params)
    if query:
        target = f"{target}?{query}"
    return RedirectResponse(target, status_code=303)
