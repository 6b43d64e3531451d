"""PostgresBackend: the Backend protocol on PostgreSQL, one module per role composed here.

Each role's verbs live in a module of their own (``enqueue.py``, ``claims.py``,
``leases.py``, ``coordination.py``, ``operations.py``, ``workers.py``,
``results.py``, ``workflows.py``, ``control.py``, ``durable.py``,
``callbacks.py``; the order of venturi/backend/ and of the sections of
``queries.sql``), as mixins over ``store.Store``: a verb is found on
the class by inheritance, with no call layer between the caller and its
statements (the hot paths, claim, finish and enqueue, run as they did in one
class). This module builds the adapter
from its options (the pools, the reply watchdog, the statements) and holds the
``Schema`` role: migrations, the start check and closing what it built.
Sessions, pools and driver-error translation live in modules of their own (the
package's docstring maps them).
"""

from __future__ import annotations

import asyncio

import psycopg

from venturi.errors import ConfigurationError, SchemaMissing
from venturi.naming import DEFAULT_PREFIX, Prefix
from venturi.postgres.callbacks import CallbackVerbs, KeyVerbs
from venturi.postgres.claims import ClaimVerbs, claim_input
from venturi.postgres.control import ControlVerbs
from venturi.postgres.coordination import CoordinationVerbs
from venturi.postgres.driver_errors import translated_errors
from venturi.postgres.durable import DurableVerbs
from venturi.postgres.enqueue import COPY_THRESHOLD, EnqueueVerbs
from venturi.postgres.leases import LeaseVerbs, finish_input
from venturi.postgres.migrator import Migrator
from venturi.postgres.operations import OperatorVerbs
from venturi.postgres.pools import AsyncPool, Pool
from venturi.postgres.queries import Queries
from venturi.postgres.results import ResultVerbs
from venturi.postgres.sessions import (
    DEFAULT_CONNECT_TIMEOUT,
    configure_claim_session,
    connect,
    with_keepalives,
)
from venturi.postgres.watchdog import DEFAULT_REPLY_TIMEOUT, ReplyWatchdog
from venturi.postgres.workers import WorkerVerbs
from venturi.postgres.workflows import WorkflowVerbs
from venturi.types import AppliedMigration

# claim_input, finish_input and COPY_THRESHOLD are defined by their roles' modules and
# kept importable here, where bench/ and the plan tests import them.
__all__ = ["COPY_THRESHOLD", "PostgresBackend", "claim_input", "finish_input"]


class PostgresBackend(
    EnqueueVerbs,
    ClaimVerbs,
    LeaseVerbs,
    CoordinationVerbs,
    OperatorVerbs,
    WorkerVerbs,
    ResultVerbs,
    WorkflowVerbs,
    ControlVerbs,
    DurableVerbs,
    CallbackVerbs,
    KeyVerbs,
):
    """The default storage adapter.

    Options:
        url: a libpq connection string or URL.
        prefix: table-name prefix, validated before anything connects (ADR 6).
        pool_size: maximum pooled connections (a worker uses one for outcomes
            and one for leases, plus the enqueues of the process). Claims have
            a pool of their own, opened on the first claim, whose sessions plan
            claims once (``sessions.configure_claim_session``).
        connect_timeout: seconds to wait for a connection before
            ``BackendUnavailable``.
        direct_url: the server itself, when ``url`` goes through a pooler:
            LISTEN, leadership and migrations need a session and use it (ADR 0123).
        transaction_pooling: ``url`` is a transaction-mode pooler (PgBouncer's
            ``pool_mode = transaction``): pooled sessions prepare nothing and
            set nothing. Default: on exactly when ``direct_url`` is given. On
            without a direct URL, workers poll instead of listening, leadership
            holds a transaction open, and ``migrate`` is refused.
        reply_timeout: seconds a worker statement (claim, renewal, outcome,
            recovery, leadership check) waits for its reply before its session is
            abandoned with ``BackendUnavailable`` (silent partitions, ADR 0123).

    Every URL gets TCP keepalives unless it sets them (``sessions.DEFAULT_KEEPALIVES``).

    ``aenqueue`` runs the same statements as ``enqueue`` on an asyncio pool of
    up to ``pool_size`` sessions per event loop (``pools.AsyncPool``),
    opened on first use (``enqueue.py``).

    Results are stored as ``finish`` is given them: the size bound
    (``App(result_max_bytes=)``) is applied above the boundary, by the runtime.
    """

    def __init__(
        self,
        url: str,
        *,
        prefix: str = DEFAULT_PREFIX,
        pool_size: int = 10,
        connect_timeout: float = DEFAULT_CONNECT_TIMEOUT,
        direct_url: str | None = None,
        transaction_pooling: bool | None = None,
        reply_timeout: float = DEFAULT_REPLY_TIMEOUT,
    ) -> None:
        self._prefix = Prefix.parse(prefix)
        self._channel = self._prefix.channel
        if reply_timeout <= 0:
            raise ConfigurationError(f"reply_timeout must be positive, got {reply_timeout}")
        self._url = with_keepalives(url)
        self._direct_url = with_keepalives(direct_url) if direct_url is not None else None
        self.is_transaction_pooled = (
            direct_url is not None if transaction_pooling is None else transaction_pooling
        )
        self._connect_timeout = connect_timeout
        self._queries = Queries(self._prefix)
        self._watchdog = ReplyWatchdog(reply_timeout, name=f"venturi-{self._prefix.value}-replies")
        self._pool = Pool(
            self._url,
            name=f"venturi-{self._prefix.value}",
            max_size=pool_size,
            connect_timeout=connect_timeout,
            may_prepare=not self.is_transaction_pooled,
        )
        # Forced generic plans need a session to keep the setting and a prepared
        # statement to reuse the plan: behind a transaction-mode pooler there is
        # neither, and each claim is planned anew (docs/design/indexes.md).
        self._claim_pool = Pool(
            self._url,
            name=f"venturi-{self._prefix.value}-claim",
            max_size=2,
            connect_timeout=connect_timeout,
            configure=None if self.is_transaction_pooled else configure_claim_session,
            may_prepare=not self.is_transaction_pooled,
        )
        self._async_pool = AsyncPool(
            self._url,
            name=f"venturi-{self._prefix.value}-async",
            max_size=pool_size,
            connect_timeout=connect_timeout,
            may_prepare=not self.is_transaction_pooled,
        )

    # -- schema ------------------------------------------------------------------

    def migrate(self) -> list[AppliedMigration]:
        url = self._session_url
        if url is None:
            raise ConfigurationError(
                "migrate holds a session advisory lock, which a transaction-mode pooler "
                "cannot keep: give the server's own URL as direct_url= "
                "(--direct-url, $VENTURI_DIRECT_DATABASE_URL)"
            )
        with (
            translated_errors(),
            connect(url, self._connect_timeout) as conn,
        ):
            return Migrator(self._prefix).migrate(conn)

    def pending_migrations(self) -> tuple[list[AppliedMigration], str]:
        migrator = Migrator(self._prefix)
        pending = self._run(migrator.pending)
        return [AppliedMigration(m.version, m.name) for m in pending], migrator.script(pending)

    def check_schema(self) -> str:
        with (
            translated_errors(self._prefix),
            connect(self._url, self._connect_timeout) as conn,
        ):
            try:
                self._queries.check_schema.many(conn)
            except psycopg.errors.UndefinedColumn as exc:
                raise SchemaMissing(self._prefix.value, missing=_missing_column(exc)) from exc
            info = conn.info
            host = f"[{info.host}]" if ":" in info.host else info.host
            return f"{host}:{info.port}/{info.dbname}"

    def close(self) -> None:
        self._async_pool.close()
        self._claim_pool.close()
        self._pool.close()
        self._watchdog.stop()

    async def aclose(self) -> None:
        await self._async_pool.aclose()
        # The other pools' close joins threads (and other loops' pools): not on this loop.
        await asyncio.to_thread(self.close)


def _missing_column(exc: psycopg.errors.UndefinedColumn) -> str:
    """``column j.traceback`` from the server's message (its wording varies little)."""
    first = str(exc).splitlines()[0]
    return first.removesuffix(" does not exist").strip() or "a column"
