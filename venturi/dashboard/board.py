"""The state behind the dashboard's routes: the App, the rules for reads and changes, rendering.

Every route reaches the one ``Dashboard`` through ``board_of(request)``. It
holds the permission rules (read-only, token sign-in, the host's
``authorize`` hook, whether reads need sign-in), the check every route but
the sign-in and the static files passes (``refuse_read``), the checks every
POST passes (``change``: origin, size, CSRF; ``guarded``: plus the
permission), the templates, and the shared read cache. ``url_for``,
``see_other`` and ``local_target`` build and check paths under wherever the
dashboard is mounted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode

import jinja2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response

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
    "local_target",
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
    ("kinds", "Kinds"),
    ("keys", "Keys"),
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
    "sign-in-to-read": "Sign in with the dashboard's token to read it.",
    "signed-out": "Signed out.",
    "kind-pause": "Paused: no worker claims this kind until it is resumed; running jobs finish.",
    "kind-resume": "Resumed: workers claim this kind again.",
    "kind-limits": "Limits set: every worker uses them within seconds.",
    "schedule-pause": "Schedule paused.",
    "schedule-resume": "Schedule resumed.",
    "schedule-trigger": "Schedule triggered: one run enqueued now.",
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
        public_read: bool = False,
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
        #: With a token, reading needs sign-in too unless ``public_read`` (ADR 0117,
        #: amendment); without one (read-only, or the host's ``authorize``), the
        #: host in front decides who reads.
        self.reads_need_sign_in = token is not None and not public_read
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

    def may_read(self, request: Request, session: Session) -> bool:
        if not self.reads_need_sign_in or session.is_signed_in:
            return True
        return self.authorize is not None and self.authorize(request)

    def refuse_read(self, request: Request) -> Response | None:
        """``None`` when ``request`` may read; else the refusal: a browser is sent to
        the sign-in (303; from a page, back to it once signed in), the rest (live
        refreshes, scripts) get a 401. Nothing is read before this returns ``None``."""
        if self.may_read(request, self.session(request)):
            return None
        wants_page = (
            "text/html" in request.headers.get("accept", "")
            and "x-venturi-live" not in request.headers
        )
        if wants_page:
            back = {"next": _here(request)} if request.method in ("GET", "HEAD") else {}
            query = urlencode({**back, "notice": "sign-in-to-read"})
            return RedirectResponse(f"{url_for(request, 'login')}?{query}", status_code=303)
        return PlainTextResponse(
            f"Sign-in needed: this dashboard shows nothing before signing in at "
            f"{url_for(request, 'login')}.\n",
            status_code=401,
            headers={"www-authenticate": 'Cookie realm="venturi dashboard"'},
        )

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
            reads_need_sign_in=self.reads_need_sign_in,
            may_read=self.may_read(request, session),
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


def _here(request: Request) -> str:
    """The path and query the browser asked for, the mount included (the path of a
    request behind a stripping proxy leaves it out)."""
    root, path = _root(request), request.url.path
    if root and path != root and not path.startswith(root + "/"):
        path = root + path
    return path + (f"?{request.url.query}" if request.url.query else "")


def local_target(request: Request, target: str | None) -> str | None:
    """``target`` when it is a path under the dashboard's mount (where the sign-in
    may send the browser back to), else ``None``: never another site, even one
    spelled ``//host`` or ``/\\host``."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return None
    root = _root(request)
    if root and target != root and not target.startswith(root + "/"):
        return None
    if any(ord(char) < 0x20 or char == "\\" for char in target):
        return None
    return target


def see_other(request: Request, name: str, query: str = "", **params: str) -> RedirectResponse:
    """Redirect after a POST to a page the browser then GETs (303: no re-submission)."""
    target = url_for(request, name, **params)
    if query:
        target = f"{target}?{query}"
    return RedirectResponse(target, status_code=303)
