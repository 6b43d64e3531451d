"""Driver errors leave the adapter as venturi's, and nothing psycopg-specific with them.

Every psycopg error that means "the database is not there" becomes
``BackendUnavailable``, or ``DatabaseRefused`` when the server answered and
said no for good (ADR 0118); a missing table of a known prefix becomes
``SchemaMissing``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import NoReturn

import psycopg

from venturi.errors import BackendUnavailable, DatabaseRefused, SchemaMissing
from venturi.naming import Prefix

__all__ = ["reraise_translated", "translated_errors", "unavailable"]

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
