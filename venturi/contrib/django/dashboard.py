"""The dashboard under a URL of the project, behind Django's sign-in.

::

    urlpatterns = [path("venturi/", include("venturi.contrib.django.urls"))]

Only active staff users reach it (others go to ``LOGIN_URL``); by default
they may also change things (retry, cancel, enqueue), or only superusers
with ``VENTURI["DASHBOARD_CHANGES"] = "superuser"`` (``"none"``: read-only
for everyone). The dashboard keeps its own CSRF protection for changes (a
signed session cookie and a per-session form token, keyed from
``SECRET_KEY`` so every server process shares it), so its view is exempt
from Django's CSRF middleware, whose token its forms do not carry.

The request is handed to venturi's WSGI dashboard with the URL prefix as
``SCRIPT_NAME``, under WSGI and ASGI Django alike.
"""

from __future__ import annotations

import hashlib
import hmac
import io
import sys
import threading
from collections.abc import Callable, Iterable
from typing import Any

from django.conf import settings
from django.contrib.auth.decorators import user_passes_test
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt

from venturi.contrib.django.state import get_app

__all__ = ["CHANGES", "MAY_CHANGE_HEADER", "dashboard_view", "wsgi_app"]

#: Set by the view, never taken from the client: may this request change things?
MAY_CHANGE_HEADER = "x-venturi-may-change"
_MAY_CHANGE_ENVIRON = "HTTP_X_VENTURI_MAY_CHANGE"
CHANGES = ("staff", "superuser", "none")

_lock = threading.Lock()
#: The App the dashboard was built on, and the dashboard (rebuilt for a new App).
_built: dict[str, Any] = {}


def _changes() -> str:
    value = getattr(settings, "VENTURI", {}).get("DASHBOARD_CHANGES", "staff")
    if value not in CHANGES:
        raise ImproperlyConfigured(
            f"VENTURI['DASHBOARD_CHANGES'] must be one of {', '.join(CHANGES)}, got {value!r}"
        )
    return str(value)


def _may_change(request: Any) -> bool:
    return bool(request.headers.get(MAY_CHANGE_HEADER) == "1")


def wsgi_app() -> Callable[..., Any]:
    """The dashboard of the project's App, built once per App."""
    from venturi.dashboard import create_wsgi_app

    app = get_app()
    with _lock:
        if _built.get("app") is not app:
            secret = hmac.new(
                settings.SECRET_KEY.encode(), b"venturi.dashboard", hashlib.sha256
            ).digest()
            _built["app"] = app
            _built["dashboard"] = create_wsgi_app(app, authorize=_may_change, secret=secret)
        dashboard: Callable[..., Any] = _built["dashboard"]
        return dashboard


def _environ(request: HttpRequest, path: str, may_change: bool) -> dict[str, Any]:
    """A WSGI environ for the dashboard, mounted where this view's pattern starts."""
    environ: dict[str, Any] = {k: v for k, v in request.META.items() if isinstance(v, str)}
    mount = request.path[: len(request.path) - len(path)].rstrip("/")
    environ.update(
        {
            "SCRIPT_NAME": mount,
            "PATH_INFO": "/" + path,
            "QUERY_STRING": request.META.get("QUERY_STRING", ""),
            "REQUEST_METHOD": request.method or "GET",
            "CONTENT_LENGTH": str(len(request.body)),
            "wsgi.input": io.BytesIO(request.body),
            "wsgi.errors": sys.stderr,
            "wsgi.url_scheme": request.scheme or "http",
            "wsgi.version": (1, 0),
            "wsgi.multithread": True,
            "wsgi.multiprocess": True,
            "wsgi.run_once": False,
            "SERVER_NAME": request.get_host().split(":")[0],
            "SERVER_PORT": request.get_port(),
        }
    )
    environ.pop(_MAY_CHANGE_ENVIRON, None)
    if may_change:
        environ[_MAY_CHANGE_ENVIRON] = "1"
    return environ


def _is_staff(user: Any) -> bool:
    return bool(user.is_active and user.is_staff)


@csrf_exempt  # type: ignore[untyped-decorator]
@user_passes_test(_is_staff)  # type: ignore[untyped-decorator]
def dashboard_view(request: HttpRequest, path: str = "") -> HttpResponse:
    """Serve one dashboard request for a staff user."""
    changes = _changes()
    user: Any = request.user
    may_change = changes == "staff" or (changes == "superuser" and user.is_superuser)
    captured: dict[str, Any] = {}

    def start_response(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> None:
        captured["status"], captured["headers"] = status, headers

    body: Iterable[bytes] = wsgi_app()(_environ(request, path, may_change), start_response)
    content = b"".join(body)
    close = getattr(body, "close", None)
    if close is not None:
        close()
    response = HttpResponse(content, status=int(captured["status"].split(" ", 1)[0]))
    for name, value in captured["headers"]:
        if name.lower() == "set-cookie":
            response.cookies.load(value)
        else:
            response.headers[name] = value
    return response
