"""Liveness and readiness of a venturi process: the two checks, and a small HTTP server for them.

``liveness()`` is Kubernetes' liveness probe: healthy while every loop of the
process (``runtime.service.running_loops``: claims, leases, limits, pruner,
registry, beat) runs and has started its next step on time; a loop whose
thread ended unasked, or ``stall_after`` seconds overdue, is named. It reads
no database: an outage is not a reason to restart the process, whose loops
wait it out (ADR 0113). ``readiness(check)`` is the readiness probe: the
database answers and the prefix's schema is what this code needs (the
services' start check, ``App.check_schema``), else the one-line reason.

Each check returns ``(ok, reason)``. ``HealthServer`` serves them as ``GET
/healthz`` and ``GET /readyz`` (200 or 503, the reason as the body) on a
thread of its own (``--health-port``); the in-server integrations
(``contrib.asgi``, ``contrib.flask``) serve the same checks as routes (ADR 0136).
"""

from __future__ import annotations

import errno
import logging
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from venturi.errors import ConfigurationError, VenturiError
from venturi.runtime.service import running_loops

__all__ = [
    "DEFAULT_HOST",
    "STALL_AFTER",
    "Check",
    "HealthServer",
    "liveness",
    "readiness",
    "respond",
]

logger = logging.getLogger(__name__)

#: Every interface: a kubelet probes the pod's own address, not its loopback.
DEFAULT_HOST = "0.0.0.0"
#: Seconds a loop's next step may be overdue before the loop counts as stuck: more
#: than its longest legitimate step (the claim loop's wait plus a statement's reply
#: bound, ADR 0123).
STALL_AFTER = 120.0

#: A check: ``(ok, reason)``, the reason one line for an operator.
Check = Callable[[], tuple[bool, str]]


def liveness(stall_after: float = STALL_AFTER) -> tuple[bool, str]:
    """Whether every loop of this process runs and keeps to its schedule (no I/O).

    Before the loops start (a service waiting for its database) and after they
    were asked to stop there is none, which is healthy: the process is doing
    what it should.
    """
    now = time.monotonic()
    loops = running_loops()
    troubles = [t for loop in loops if (t := loop.trouble(now, stall_after)) is not None]
    if troubles:
        return False, "; ".join(troubles)
    if not loops:
        return True, "no loop running (starting or stopping)"
    return True, f"{len(loops)} loops running: {', '.join(loop.name for loop in loops)}"


def readiness(check_schema: Callable[[], str]) -> tuple[bool, str]:
    """Whether the database answers and the schema is current: ``check_schema`` is
    ``App.check_schema`` (it returns where the database is, or raises why not)."""
    try:
        where = check_schema()
    except VenturiError as exc:
        return False, " ".join(str(exc).split())
    return True, f"database {where} answers; schema current"


def respond(path: str, live: Check, ready: Check) -> tuple[int, str] | None:
    """The status and body for ``path`` (ending ``/healthz`` or ``/readyz``); None for
    any other path. Shared by the server here and the integrations' routes."""
    if path.endswith("/healthz"):
        check = live
    elif path.endswith("/readyz"):
        check = ready
    else:
        return None
    ok, reason = check()
    return (200 if ok else 503), f"{'ok' if ok else 'unavailable'}: {reason}\n"


class HealthServer:
    """``GET /healthz`` and ``GET /readyz`` over HTTP, on a daemon thread.

    The port is bound when the server is built, so a port in use fails there,
    before the service starts: ``ConfigurationError`` naming it. ``start()``
    serves; ``stop()`` stops serving and frees the port (idempotent).
    """

    def __init__(
        self,
        ready: Check,
        *,
        port: int,
        host: str = DEFAULT_HOST,
        live: Check = liveness,
    ) -> None:
        handler = _handler(live, ready)
        try:
            self._server = ThreadingHTTPServer((host, port), handler)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise ConfigurationError(
                    f"health port {port} on {host} is in use: pick another --health-port"
                ) from None
            raise ConfigurationError(
                f"cannot serve health checks on {host}:{port}: {exc.strerror or exc}"
            ) from None
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="venturi-health", daemon=True
        )

    @property
    def port(self) -> int:
        """The bound port (the one asked for, or the one the system chose for 0)."""
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()
        logger.info("serving health checks on port %d (/healthz, /readyz)", self.port)

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()


def _handler(live: Check, ready: Check) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # the name http.server calls
            answer = respond(self.path.split("?", 1)[0], live, ready)
            status, body = answer if answer is not None else (404, "not found\n")
            data = body.encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            logger.debug("health: " + format, *args)

    return Handler
