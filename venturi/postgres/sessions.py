"""How the adapter opens a session, and reads its socket without blocking.

Every session is autocommit (ADR 0100) and carries TCP keepalives, so a peer
that vanished ends an idle session instead of leaving it open for good
(ADR 0123). Behind a transaction-mode pooler a pooled session prepares
nothing (``connect_kwargs``). The claim pool's sessions get the settings of
``configure_claim_session``. A session that cannot be opened raises
``BackendUnavailable`` naming the address it tried (``DatabaseRefused`` for
a refused login), so every caller reports the same line.
"""

from __future__ import annotations

import functools
import math
import select
from collections.abc import Callable, Mapping
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from venturi.postgres.driver_errors import connect_failure

__all__ = [
    "DEFAULT_CONNECT_TIMEOUT",
    "DEFAULT_KEEPALIVES",
    "SESSIONS_LOGGER",
    "AsyncConnection",
    "Connection",
    "aconnect",
    "configure_claim_session",
    "connect",
    "connect_kwargs",
    "has_input",
    "input_poll",
    "ready",
    "with_keepalives",
]

Connection = psycopg.Connection[Any]
AsyncConnection = psycopg.AsyncConnection[Any]

#: The logger of the adapter's sessions: pools, listener, watchdog and leadership
#: all log under this one name, which log configurations refer to.
SESSIONS_LOGGER = "venturi.postgres.connections"

#: How long a caller waits for a pooled connection (or a first connection) before
#: BackendUnavailable: bounded, so a missing database never hangs a caller.
DEFAULT_CONNECT_TIMEOUT = 5.0

#: libpq parameters added to every URL that does not set them itself (ADR 0123):
#: an idle session whose peer vanished is dropped after 15 + 3 x 5 = 30 s of
#: unanswered keepalive probes, a session whose writes go unacknowledged after 30 s.
DEFAULT_KEEPALIVES: Mapping[str, str] = {
    "keepalives": "1",
    "keepalives_idle": "15",
    "keepalives_interval": "5",
    "keepalives_count": "3",
    "tcp_user_timeout": "30000",
}


def with_keepalives(url: str) -> str:
    """``url`` with the ``DEFAULT_KEEPALIVES`` it does not set; its own values win.

    A string libpq cannot parse is returned as it is, for ``connect`` to report.
    """
    try:
        given = conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        return url
    missing = {key: value for key, value in DEFAULT_KEEPALIVES.items() if key not in given}
    return make_conninfo(url, **missing) if missing else url


def connect_kwargs(connect_timeout: float, *, may_prepare: bool = True) -> dict[str, Any]:
    """psycopg's keywords for a session of the adapter: autocommit, a whole-second
    connect timeout, and no prepared statements when ``may_prepare`` is False."""
    kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": max(1, round(connect_timeout))}
    if not may_prepare:
        # psycopg prepares a statement after its 5th execution; a prepared statement
        # outlives the transaction, which a transaction-mode pooler does not (ADR 0123).
        kwargs["prepare_threshold"] = None
    return kwargs


def connect(url: str, connect_timeout: float, *, application_name: str | None = None) -> Connection:
    """A dedicated autocommit session, outside every pool (ADR 0100); ``application_name``
    overrides the URL's. ``BackendUnavailable`` (``connect_failure``) when none opens."""
    kwargs = connect_kwargs(connect_timeout)
    if application_name is not None:
        kwargs["application_name"] = application_name
    try:
        return psycopg.connect(url, **kwargs)
    except psycopg.OperationalError as exc:
        raise connect_failure(exc, url, connect_timeout) from exc


async def aconnect(url: str, connect_timeout: float) -> AsyncConnection:
    """``connect`` for async code (no ``application_name``: the pools' attempts need none)."""
    try:
        return await psycopg.AsyncConnection.connect(url, **connect_kwargs(connect_timeout))
    except psycopg.OperationalError as exc:
        raise connect_failure(exc, url, connect_timeout) from exc


def configure_claim_session(conn: Connection) -> None:
    """Claim sessions plan ``claim_jobs`` once, and never by a sequential scan, so that
    a plan made on an empty table stays right as the table grows; why, and why only
    the claim pool: docs/design/indexes.md, "Generic plans of the hot statements"."""
    conn.execute("SET plan_cache_mode = force_generic_plan")
    conn.execute("SET enable_seqscan = off")


#: ``select.poll`` where there is one (not on Windows): ``has_input`` runs at every pooled
#: checkout, so it polls its one descriptor without ``ready``'s sets and rounding.
_poll = getattr(select, "poll", None)


def has_input(fd: int) -> bool:
    """Unread input or a hang-up on ``fd``, without blocking; True when unsure."""
    try:
        return bool(input_poll(fd)(0))
    except (OSError, ValueError):
        return True


def input_poll(fd: int) -> Callable[[int], object]:
    """A zero-timeout look at ``fd``, made once for a descriptor looked at again and
    again (the hot session's): called with 0, it is truthy when ``fd`` has unread
    input or a hang-up. ``poll`` of a poller registered on ``fd`` where there is one,
    else ``ready``."""
    if _poll is None:
        return functools.partial(ready, [fd])
    poller = _poll()
    poller.register(fd, select.POLLIN)
    poll: Callable[[int], object] = poller.poll
    return poll


def ready(fds: list[int], timeout: float) -> set[int]:
    """Those of ``fds`` with input (or a hang-up), waiting up to ``timeout`` s for one.

    ``poll`` where there is one: ``select`` refuses descriptors above 1023,
    which a busy web server's connections can have.
    """
    if hasattr(select, "poll"):
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        return {fd for fd, _ in poller.poll(math.ceil(max(0.0, timeout) * 1000))}
    readable, _, _ = select.select(fds, [], [], max(0.0, timeout))
    return set(readable)
