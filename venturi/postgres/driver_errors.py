"""Driver errors leave the adapter as venturi's, and nothing psycopg-specific with them.

Every psycopg error that means "the database is not there" becomes
``BackendUnavailable``, or ``DatabaseRefused`` when the server answered and
said no for good (ADR 0118); a missing table of a known prefix becomes
``SchemaMissing``. A session that could not be opened at all says where it
tried and why in one line (``connect_failure``): ``cannot reach 127.0.0.1:1
(connection refused)``. And the driver's own pool warnings about venturi's
pools, one per background retry during an outage, are lowered to DEBUG
(``OWN_POOLS``): the service loops say it once (ADR 0118, "Unreachable at
start").
"""

from __future__ import annotations

import logging
import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NoReturn

import psycopg
from psycopg.conninfo import conninfo_to_dict

from venturi.errors import BackendUnavailable, DatabaseRefused, SchemaMissing
from venturi.naming import Prefix

__all__ = [
    "OWN_POOLS",
    "OwnPoolsFilter",
    "connect_failure",
    "reraise_translated",
    "server_address",
    "translated_errors",
    "unavailable",
]

#: What the server says when it refuses a session for a reason that waiting will
#: not fix. libpq keeps only the text of a refusal at connect (psycopg's
#: ``sqlstate`` is None then), so the text is matched; a server whose
#: ``lc_messages`` is not English is treated as an outage and retried (ADR 0118).
_REFUSALS = (
    '" does not exist',  # 3D000 database "x", 28000 role "x"
    "authentication failed for user",  # 28P01 password, scram; 28000 peer, ident
    "no pg_hba.conf entry",  # 28000
    "is not permitted to log in",  # 28000
    "permission denied for database",  # 42501: no CONNECT privilege
    "is not currently accepting connections",  # 55000: datallowconn = false
    "no password supplied",  # libpq's own: the server asked for a password
)


@contextmanager
def translated_errors(prefix: Prefix | None = None) -> Iterator[None]:
    """Driver errors out as venturi's: a missing table is ``SchemaMissing`` when
    the prefix is known, a lost or refused connection ``BackendUnavailable``."""
    try:
        yield
    except psycopg.Error as exc:
        reraise_translated(exc, prefix)


def reraise_translated(exc: psycopg.Error, prefix: Prefix | None = None) -> NoReturn:
    """Raise ``exc`` as ``translated_errors`` does: for the callers without the context
    manager (``Pool.run``'s, on the one-statement path)."""
    if isinstance(exc, psycopg.errors.UndefinedTable) and prefix is not None:
        raise SchemaMissing(prefix.value) from exc
    if isinstance(exc, psycopg.OperationalError):
        raise unavailable(exc) from exc
    raise exc


def unavailable(exc: psycopg.Error) -> BackendUnavailable:
    """``DatabaseRefused`` when the server refused the session for good, else an outage."""
    text = str(exc).strip()
    if exc.sqlstate is None and any(fragment in text for fragment in _REFUSALS):
        # "connection failed: connection to server at ... failed: FATAL:  <reason>"
        return DatabaseRefused(" ".join(text.rpartition("FATAL:")[2].split()))
    return BackendUnavailable(f"database unavailable: {text}")


def connect_failure(exc: psycopg.Error, url: str, connect_timeout: float) -> BackendUnavailable:
    """``unavailable(exc)`` for a session that could not be opened, naming where it was tried.

    A refusal stays ``DatabaseRefused``; an outage says the server's address
    (from ``url``, which a timeout's text does not carry) and libpq's reason
    in one line: ``database unavailable: cannot reach 127.0.0.1:1 (connection
    refused)``, ``... (no answer within 5 s)``.
    """
    error = unavailable(exc)
    if isinstance(error, DatabaseRefused):
        return error
    return BackendUnavailable(
        f"database unavailable: cannot reach {_target(url)} "
        f"({_reason(exc, connect_timeout)})"
    )


def server_address(url: str) -> str:
    """Where ``url`` connects, for a message: ``host:port`` (never a user or password)."""
    return _target(url)


def _target(url: str) -> str:
    """Where libpq connects for ``url``: ``host:port`` (each of a list), or the socket path.

    No password, user or database: only the address. Unset parts come from
    libpq's environment (``PGHOST``, ``PGPORT``) and its defaults.
    """
    try:
        params = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return "the database"
    hosts = str(params.get("host") or params.get("hostaddr") or os.environ.get("PGHOST") or "")
    ports = str(params.get("port") or os.environ.get("PGPORT") or "5432").split(",")
    places = []
    for index, host in enumerate(hosts.split(",")):
        port = ports[index] if index < len(ports) else ports[-1]
        places.append(_place(host.strip(), port.strip() or "5432"))
    return ", ".join(places)


def _place(host: str, port: str) -> str:
    if not host:
        return f"the local socket (port {port})"
    if host.startswith(("/", "@")):
        return f"socket {host.rstrip('/')}/.s.PGSQL.{port}"
    if ":" in host:
        return f"[{host}]:{port}"
    return f"{host}:{port}"


def _reason(exc: psycopg.Error, connect_timeout: float) -> str:
    """libpq's reason in a few words: the end of its first line, without the hint after it."""
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "timeout expired" in first_line:
        # psycopg's own wait, in whole seconds (sessions.connect_kwargs).
        return f"no answer within {max(1, round(connect_timeout))} s"
    reason = first_line.rpartition(" failed: ")[2].removeprefix("FATAL:").strip()
    if len(reason) > 1 and reason[0].isupper() and reason[1].islower():
        reason = reason[0].lower() + reason[1:]
    return " ".join(reason.split())


#: The logger psycopg_pool reports on.
_DRIVER_POOL_LOGGER = "psycopg.pool"


class OwnPoolsFilter(logging.Filter):
    """Lowers psycopg_pool's WARNINGs about venturi's own pools to DEBUG.

    psycopg_pool warns at every failed background connect (``error connecting
    in 'venturi-...'``), retried by each pool every second or two, and at each
    broken session given back (``discarding closed connection``): a flood
    during an outage, beside the one line per loop that venturi logs. A
    WARNING whose arguments are one of venturi's pools' names or sessions is
    kept as DEBUG when its logger has DEBUG enabled, and dropped otherwise;
    records about other programs' pools pass unchanged.
    """

    def __init__(self) -> None:
        super().__init__()
        self._names: set[str] = set()
        self._sessions: weakref.WeakSet[psycopg.BaseConnection[Any]] = weakref.WeakSet()
        self._lock = threading.Lock()

    def watch(self, name: str) -> None:
        """Treat the pool ``name`` as venturi's, and install the filter (idempotent)."""
        with self._lock:
            self._names.add(name)
        logging.getLogger(_DRIVER_POOL_LOGGER).addFilter(self)

    def adopt(self, conn: psycopg.BaseConnection[Any]) -> None:
        """Treat ``conn``, a session one of venturi's pools opened, as venturi's."""
        with self._lock:
            self._sessions.add(conn)

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.WARNING or not self._is_about_ours(record):
            return True
        if not logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            return False
        record.levelno = logging.DEBUG
        record.levelname = logging.getLevelName(logging.DEBUG)
        return True

    def _is_about_ours(self, record: logging.LogRecord) -> bool:
        args = record.args if isinstance(record.args, tuple) else ()
        return any(
            (isinstance(arg, str) and arg in self._names)
            or (isinstance(arg, psycopg.BaseConnection) and arg in self._sessions)
            for arg in args
        )


#: The one filter, shared by every pool of the adapter.
OWN_POOLS = OwnPoolsFilter()
