"""Who may change things, and the browser-side defences around it.

A session is a signed cookie ``<nonce>.<signed-in flag>.<mac>``; the key is
derived from the token, so every process serving the same token accepts the
same cookies and changing the token signs everyone out. The CSRF token of a
form is a MAC of the session's nonce (per session, never stored), and every
POST must also come from this origin (``Origin``, else ``Referer``). Nothing
here keeps state on the server.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable
from dataclasses import dataclass

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = [
    "CONTENT_SECURITY_POLICY",
    "COOKIE",
    "HEADERS",
    "Authorize",
    "SecurityHeaders",
    "Session",
    "Signer",
    "is_same_origin",
    "is_token",
]

COOKIE = "venturi_dashboard"

#: Scripts and styles only from the dashboard's own files; nothing inline, no frames.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
HEADERS = (
    (b"content-security-policy", CONTENT_SECURITY_POLICY.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"same-origin"),
    (b"cross-origin-opener-policy", b"same-origin"),
)

#: Decides whether a request may change things when the host application has its own
#: sign-in (e.g. Django's ``request.user.is_staff``); replaces the token sign-in.
Authorize = Callable[[Request], bool]


@dataclass(frozen=True, slots=True)
class Session:
    nonce: str
    is_signed_in: bool
    is_new: bool = False


class Signer:
    """Signs and checks session cookies and CSRF tokens with one key."""

    def __init__(self, key: bytes) -> None:
        self._key = key

    @classmethod
    def for_token(cls, token: str | None, secret: bytes | None = None) -> Signer:
        """A key from the token, else ``secret``, else a random one (this process only)."""
        if token is not None:
            return cls(hashlib.sha256(b"venturi-dashboard-session\x00" + token.encode()).digest())
        return cls(secret if secret is not None else secrets.token_bytes(32))

    def _mac(self, purpose: str, value: str) -> str:
        message = f"{purpose}\x00{value}".encode()
        return hmac.new(self._key, message, hashlib.sha256).hexdigest()

    def new_session(self, *, is_signed_in: bool) -> Session:
        return Session(secrets.token_urlsafe(18), is_signed_in, is_new=True)

    def cookie_value(self, session: Session) -> str:
        body = f"{session.nonce}.{int(session.is_signed_in)}"
        return f"{body}.{self._mac('session', body)}"

    def read_session(self, request: Request) -> Session | None:
        raw = request.cookies.get(COOKIE)
        if raw is None or raw.count(".") != 2:
            return None
        nonce, flag, mac = raw.split(".")
        if flag not in ("0", "1"):
            return None
        if not hmac.compare_digest(mac, self._mac("session", f"{nonce}.{flag}")):
            return None
        return Session(nonce, flag == "1")

    def csrf_token(self, session: Session) -> str:
        return self._mac("csrf", session.nonce)

    def is_valid_csrf(self, session: Session, token: str | None) -> bool:
        return token is not None and hmac.compare_digest(token, self.csrf_token(session))


def is_token(given: str | None, token: str) -> bool:
    return given is not None and hmac.compare_digest(given.encode(), token.encode())


def is_same_origin(request: Request) -> bool:
    """The POST was made by a page of this server (the browser names its origin)."""
    expected = f"{request.url.scheme}://{request.url.netloc}"
    origin = request.headers.get("origin")
    if origin is not None:
        return origin == expected
    referer = request.headers.get("referer")
    return referer is not None and (referer == expected or referer.startswith(expected + "/"))


class SecurityHeaders:
    """ASGI middleware: the same defensive headers on every response, static files too."""

    def __init__(self, app: ASGIApp) -> None:
        self._app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        await self._app(scope, receive, send_with_headers)
