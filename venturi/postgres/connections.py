"""How the PostgreSQL adapter gets its sessions, and what it lets out of them.

Pooled sessions run in autocommit and session state (LISTEN, leadership
locks) lives on dedicated connections outside the pools: ADR 0100 gives the
reasons. Behind a transaction-mode pooler (PgBouncer) pooled sessions are
not sessions at all, so they prepare nothing and set nothing, and the
dedicated connections go to the direct URL (ADR 0123). Every session carries
TCP keepalives, and worker statements wait a bounded time for their reply,
so a silent network partition ends in ``BackendUnavailable`` rather than in
a hang (ADR 0123). Every psycopg error that means "the database is not there"
leaves this module as ``BackendUnavailable``, or as ``DatabaseRefused`` when
the server answered and said no for good (ADR 0118); nothing psycopg-specific
crosses the Backend boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import math
import os
import select
import socket
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, TypeVar

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from venturi.errors import BackendUnavailable, DatabaseRefused, SchemaMissing
from venturi.naming import Prefix
from venturi.postgres.queries import Queries, read_json_with_venturi

logger = logging.getLogger(__name__)

Connection = psycopg.Connection[Any]
AsyncConnection = psycopg.AsyncConnection[Any]
C = TypeVar("C", Connection, AsyncConnection)
T = TypeVar("T")

#: How long a caller waits for a pooled connection (or a first connection) before
#: BackendUnavailable: bounded, so a missing database never hangs a caller.
DEFAULT_CONNECT_TIMEOUT = 5.0

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

#: How long a worker statement waits for its reply before its session is abandoned
#: (``BackendUnavailable``): a peer that acknowledges bytes and never answers
#: (a hung middlebox, a frozen pooler) is invisible to TCP (ADR 0123).
DEFAULT_REPLY_TIMEOUT = 30.0


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


def _connect_kwargs(connect_timeout: float, *, may_prepare: bool = True) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"autocommit": True, "connect_timeout": max(1, round(connect_timeout))}
    if not may_prepare:
        # psycopg prepares a statement after its 5th execution; a prepared statement
        # outlives the transaction, which a transaction-mode pooler does not (ADR 0123).
        kwargs["prepare_threshold"] = None
    return kwargs


def connect(url: str, connect_timeout: float, *, application_name: str | None = None) -> Connection:
    """A dedicated autocommit session, outside every pool (ADR 0100); ``application_name``
    overrides the URL's."""
    kwargs = _connect_kwargs(connect_timeout)
    if application_name is not None:
        kwargs["application_name"] = application_name
    return psycopg.connect(url, **kwargs)


#: How a leadership session names itself: this text, the role, a space, then its holder.
LEADER_SESSION = "venturi "
#: PostgreSQL keeps the first 63 bytes of an application_name (NAMEDATALEN - 1).
MAX_APPLICATION_NAME = 63


def leader_session_name(role: str) -> str:
    """The ``application_name`` of a leadership session of this process: ``venturi
    <role> <host>:<pid>``, the ``host:pid`` a worker's claims carry (ADR 19), cut to
    what the server keeps (a long host name loses its end, never the pid)."""
    host, pid = socket.gethostname(), str(os.getpid())
    room = MAX_APPLICATION_NAME - len(f"{LEADER_SESSION}{role} :{pid}".encode())
    host = host.encode()[: max(room, 0)].decode(errors="ignore")
    return f"{LEADER_SESSION}{role} {host}:{pid}"


def leader_of_session(role: str, application_name: str | None) -> str | None:
    """The holder a leadership session's name gives (``leader_session_name``), if any."""
    marker = f"{LEADER_SESSION}{role} "
    if not application_name or not application_name.startswith(marker):
        return None
    return application_name[len(marker) :] or None


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


def configure_claim_session(conn: Connection) -> None:
    """Claim sessions plan ``claim_jobs`` once, and never by a sequential scan, so that
    a plan made on an empty table stays right as the table grows; why, and why only
    the claim pool: docs/design/indexes.md, "Generic plans of the hot statements"."""
    conn.execute("SET plan_cache_mode = force_generic_plan")
    conn.execute("SET enable_seqscan = off")


#: Longest a session stays hot, out of its pool, before it goes back (ADR 0132).
HOT_FOR = 1.0


class _HotSession(Generic[C]):
    """The last session given back, kept aside for the next checkout (ADR 0132).

    psycopg_pool hands out its idle sessions first in, first out, so once a
    burst has opened several, one-at-a-time statements rotate through all of
    them, each server process cold (measured after a burst of four:
    ``.delay()`` 0.750-0.777 of the same-schema INSERT rotating, 0.778-0.790
    kept hot; ``await .adelay()`` 0.79 of ``.delay()`` rotating, 0.98 hot), and
    the pool's own checkout costs about as much again as the hot path. The hot
    session goes back to the pool when a checkout is waiting for one, and
    after ``HOT_FOR`` seconds out of it, so the pool's lifetime and idle
    limits still apply to every session. Bookkeeping only: the sync pool
    calls it under its lock, the async one from its loop.
    """

    def __init__(self) -> None:
        self.hot: C | None = None
        self._taken_at: dict[C, float] = {}
        self.waiting = 0

    def take(self) -> C | None:
        """The hot session, or None, and then the caller is counted as waiting for the pool."""
        hot, self.hot = self.hot, None
        if hot is None:
            self.waiting += 1
        return hot

    def got(self, conn: C | None) -> None:
        """The pool's checkout ended (``conn``, or None when it failed)."""
        self.waiting -= 1
        if conn is not None:
            self._taken_at[conn] = time.monotonic()

    def keep(self, conn: C) -> bool:
        """Keep ``conn`` hot (True), or forget it: the caller returns it to the pool."""
        if (
            self.hot is None
            and not self.waiting
            and not conn.closed
            and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            and time.monotonic() - self._taken_at.get(conn, 0.0) < HOT_FOR
        ):
            self.hot = conn
            return True
        self._taken_at.pop(conn, None)
        return False

    def forget(self, conn: C) -> None:
        """``conn`` is discarded (its session ended) and goes back to the pool closed."""
        self._taken_at.pop(conn, None)

    def clear(self) -> C | None:
        """The hot session, forgotten: the caller returns it before closing the pool."""
        hot, self.hot = self.hot, None
        if hot is not None:
            self._taken_at.pop(hot, None)
        return hot


def _configure(conn: Connection, *, then: Callable[[Connection], None] | None) -> None:
    read_json_with_venturi(conn)
    if then is not None:
        then(conn)


class Pool:
    """A psycopg pool that opens on first use and never hands out a session the server ended.

    Lazy: a process that never claims never opens the claim pool, and an App
    that is never used opens nothing.

    Live sessions: when the server ends a session that sits idle in the pool
    (``pg_terminate_backend``, a restart, an idle timeout), the socket gets the
    server's goodbye and the pool does not notice; the next statement sent on
    it would fail. Before handing a connection out, one zero-timeout
    ``select`` looks for unread input, which an idle session never has
    otherwise: none (the normal case) costs no round trip; some costs one
    empty query, and a connection that fails it is closed and replaced (the
    pool reconnects in the background). psycopg_pool's own ``check=`` is not
    used: it pays a round trip on every checkout, and after a failed check it
    sleeps about a second before trying the next connection.
    """

    def __init__(
        self,
        url: str,
        *,
        name: str,
        max_size: int,
        connect_timeout: float,
        configure: Callable[[Connection], None] | None = None,
        may_prepare: bool = True,
    ) -> None:
        self._url = url
        self._connect_timeout = connect_timeout
        self._pool: ConnectionPool[Connection] = ConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            kwargs=_connect_kwargs(connect_timeout, may_prepare=may_prepare),
            timeout=connect_timeout,
            open=False,
            name=name,
            configure=functools.partial(_configure, then=configure),
        )
        self._is_open = False
        self._lock = threading.Lock()
        self._hot: _HotSession[Connection] = _HotSession()

    @contextmanager
    def connection(self) -> Iterator[Connection]:
        """A live pooled session; ``BackendUnavailable`` (saying why) when none comes in time."""
        conn = self._take()
        try:
            with conn:
                yield conn
        finally:
            self._give_back(conn)

    def run(self, action: Callable[[Connection], T]) -> T:
        """``action(conn)`` on a live pooled session: ``connection()`` without its
        generator and ``with conn``, for one-statement calls such as ``.delay()``
        (0.76-0.78 -> 0.80 of the same-schema INSERT, ADR 0132: Python run with
        cold caches after each round trip). An autocommit session is idle after
        any statement; one left in a transaction goes back to the pool, which
        rolls it back."""
        conn = self._take()
        try:
            return action(conn)
        finally:
            self._give_back(conn)

    def _take(self) -> Connection:
        if not self._is_open:
            self._pool.open(wait=False)
            self._is_open = True
        try:
            return self._live_connection()
        except PoolTimeout as exc:
            raise self._why_unavailable(exc) from exc

    def _give_back(self, conn: Connection) -> None:
        with self._lock:
            kept = self._hot.keep(conn)
        if not kept:
            self._pool.putconn(conn)

    def _live_connection(self) -> Connection:
        for _ in range(self._pool.max_size):
            conn = self._checkout()
            if _is_live(conn):
                return conn
            logger.debug("discarding a pooled connection whose session the server ended")
            with self._lock:
                self._hot.forget(conn)
            conn.close()
            self._pool.putconn(conn)  # closed: the pool drops it and connects anew
        return self._checkout()

    def _checkout(self) -> Connection:
        """The hot session if there is one, else the pool's next (ADR 0132)."""
        with self._lock:
            hot = self._hot.take()
        if hot is not None:
            return hot
        conn: Connection | None = None
        try:
            conn = self._pool.getconn()
        finally:
            with self._lock:
                self._hot.got(conn)
        return conn

    def _why_unavailable(self, timeout: PoolTimeout) -> BackendUnavailable:
        """The pool only says it timed out; one direct attempt says why (refused, no such db)."""
        try:
            connect(self._url, self._connect_timeout).close()
        except psycopg.Error as exc:
            return unavailable(exc)
        waited = self._connect_timeout
        return BackendUnavailable(
            f"database unavailable: no pooled connection within {waited}s ({timeout})"
        )

    def close(self) -> None:
        if self._is_open:
            with self._lock:
                hot = self._hot.clear()
            if hot is not None:
                self._pool.putconn(hot)
            self._pool.close()
            self._is_open = False


def _is_live(conn: Connection) -> bool:
    if conn.closed or conn.broken:
        return False
    if not _has_input(conn.fileno()):
        return True
    try:
        ConnectionPool.check_connection(conn)
    except psycopg.Error:
        return False
    return True


def _has_input(fd: int) -> bool:
    """Unread input or a hang-up on ``fd``, without blocking; True when unsure."""
    try:
        return bool(_ready([fd], 0))
    except (OSError, ValueError):
        return True


def _ready(fds: list[int], timeout: float) -> set[int]:
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


class PostgresListener:
    """LISTEN on the prefix's wake-up channel, on a dedicated connection.

    ``wait`` polls the session's socket and the read end of a socket pair of
    its own, so ``interrupt`` (a byte on the other end, from any thread) ends
    it at once: the claim loop waits here itself (ADR 0132).
    """

    def __init__(self, url: str, channel: str, connect_timeout: float) -> None:
        self._url = url
        self._channel = channel
        self._connect_timeout = connect_timeout
        self._conn: Connection | None = None
        self._interrupts: tuple[socket.socket, socket.socket] | None = None

    def _connection(self) -> Connection:
        if self._conn is None or self._conn.closed:
            conn = connect(self._url, self._connect_timeout)
            conn.execute(psycopg.sql.SQL("LISTEN {}").format(psycopg.sql.Identifier(self._channel)))
            self._conn = conn
        if self._interrupts is None:
            pair = socket.socketpair()
            for end in pair:
                end.setblocking(False)
            self._interrupts = pair
        return self._conn

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` s; False on timeout or ``interrupt``. Reconnects on
        the next call after a broken connection."""
        try:
            with translated_errors():
                conn = self._connection()
                assert self._interrupts is not None  # made with the connection
                interrupts = self._interrupts[0]
                ready = _ready([conn.fileno(), interrupts.fileno()], timeout)
                if interrupts.fileno() in ready:
                    _drain(interrupts)
                if conn.fileno() not in ready:
                    return False
                # Input on an idle LISTEN session: a notification, or the server's
                # goodbye, which notifies() raises as an error.
                return any(True for _ in conn.notifies(timeout=0, stop_after=1))
        except BackendUnavailable:
            self.close()
            raise

    def interrupt(self) -> None:
        pair = self._interrupts
        if pair is None:
            return
        # Full: an interrupt is pending anyway; closed meanwhile: nothing to end.
        with contextlib.suppress(OSError):
            pair[1].send(b"\0")

    def close(self) -> None:
        pair, self._interrupts = self._interrupts, None
        if pair is not None:
            for end in pair:
                end.close()
        if self._conn is not None:
            conn, self._conn = self._conn, None
            try:
                conn.close()
            except psycopg.Error:
                logger.debug("error closing listener connection", exc_info=True)


def _drain(interrupts: socket.socket) -> None:
    # Until nothing is left (BlockingIOError); closed meanwhile, nothing to read.
    with contextlib.suppress(OSError):
        while interrupts.recv(4096):
            pass


class PostgresLeadership:
    """An advisory lock held by a connection of its own, for as long as it lives.

    Two shapes (ADR 0123): a session lock on a direct connection, given up by
    ``advisory_unlock``; or, behind a transaction-mode pooler without a direct
    URL, a transaction lock in a transaction kept open, which pins one server
    session to this connection until the rollback that gives it up. Its
    ``is_held`` ping waits at most ``reply_timeout`` for the reply.
    """

    def __init__(
        self,
        conn: Connection,
        queries: Queries,
        give_up: Callable[[Connection], object],
        watchdog: ReplyWatchdog,
    ) -> None:
        self._conn = conn
        self._queries = queries
        self._give_up = give_up
        self._watchdog = watchdog

    def is_held(self) -> bool:
        try:
            with self._watchdog.bounded(self._conn):
                self._queries.ping.one(self._conn)
        except (psycopg.Error, BackendUnavailable):
            return False
        return True

    def release(self) -> None:
        try:
            if not self._conn.closed:
                self._give_up(self._conn)
        except psycopg.Error:
            logger.debug("could not give the role up; closing the connection does")
        finally:
            self._conn.close()


class AsyncPool:
    """psycopg's ``AsyncConnectionPool``, one per event loop, each opened on first use there.

    An asyncio pool belongs to the loop that opened it (its locks and its
    background tasks live on that loop), and one process may run several
    loops: ``asyncio.run`` twice in a script, a loop per test, a framework
    that runs each async view in a loop of its own. So each loop gets its own
    pool, made the first time async enqueue runs on it; a process that never
    enqueues asynchronously opens none. Checkouts get the same live-session
    check as ``Pool``'s. Closing (ADR 0122): ``aclose`` awaits the pool of the
    running loop; ``close`` (sync) closes every pool from wherever it is
    called, and a pool whose loop no longer runs is closed socket by socket,
    since its own coroutines can no longer run.
    """

    def __init__(
        self,
        url: str,
        *,
        name: str,
        max_size: int,
        connect_timeout: float,
        may_prepare: bool = True,
    ) -> None:
        self._url = url
        self._name = name
        self._max_size = max_size
        self._connect_timeout = connect_timeout
        self._may_prepare = may_prepare
        self._lock = threading.Lock()
        self._pools: dict[asyncio.AbstractEventLoop, _LoopPool] = {}
        #: close() called on a running loop schedules the close; kept so it is not collected.
        self._closing: set[asyncio.Task[None]] = set()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[AsyncConnection]:
        """A live pooled session of this loop's pool; ``BackendUnavailable`` when none comes."""
        pool, conn = await self._take()
        try:
            async with conn:
                yield conn
        finally:
            await pool.give_back(conn)

    async def run(self, action: Callable[[AsyncConnection], Awaitable[T]]) -> T:
        """``await action(conn)`` on a live pooled session: ``Pool.run``, awaited."""
        pool, conn = await self._take()
        try:
            return await action(conn)
        finally:
            await pool.give_back(conn)

    async def _take(self) -> tuple[_LoopPool, AsyncConnection]:
        pool = await self._pool_of_running_loop()
        try:
            return pool, await pool.live_connection()
        except PoolTimeout as exc:
            raise BackendUnavailable(await self._why_unavailable(exc)) from exc

    async def _pool_of_running_loop(self) -> _LoopPool:
        loop = asyncio.get_running_loop()
        with self._lock:
            pool = self._pools.get(loop)
            ended = [p for other, p in self._pools.items() if other.is_closed()]
            self._pools = {other: p for other, p in self._pools.items() if not other.is_closed()}
            if pool is None:
                pool = self._pools[loop] = _LoopPool(
                    self._url,
                    name=f"{self._name}-{len(self._pools)}",
                    max_size=self._max_size,
                    connect_timeout=self._connect_timeout,
                    may_prepare=self._may_prepare,
                )
        for stale in ended:
            stale.close_sockets()
        await pool.open()
        return pool

    async def _why_unavailable(self, timeout: PoolTimeout) -> str:
        """As ``Pool._why_unavailable``: one direct attempt says why."""
        try:
            conn = await psycopg.AsyncConnection.connect(
                self._url, **_connect_kwargs(self._connect_timeout)
            )
            await conn.close()
        except psycopg.Error as exc:
            return f"database unavailable: {str(exc).strip()}"
        waited = self._connect_timeout
        return f"database unavailable: no pooled connection within {waited}s ({timeout})"

    async def aclose(self) -> None:
        """Await the close of the running loop's pool; ``close`` closes the others."""
        loop = asyncio.get_running_loop()
        with self._lock:
            pool = self._pools.pop(loop, None)
        if pool is not None:
            await pool.close()

    def close(self) -> None:
        """Close every loop's pool from sync code; idempotent, never blocks a running loop.

        A pool whose loop runs in another thread is closed there (waited for, up
        to the connect timeout); one whose loop runs in this thread is closed by
        a task on it, which runs as soon as the caller yields to the loop; one
        whose loop no longer runs has its connections closed directly.
        """
        with self._lock:
            pools, self._pools = self._pools, {}
        try:
            current: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
        except RuntimeError:
            current = None
        for loop, pool in pools.items():
            if loop.is_closed() or not loop.is_running():
                pool.close_sockets()
            elif loop is current:
                closing = loop.create_task(pool.close())
                self._closing.add(closing)
                closing.add_done_callback(self._closing.discard)
            else:
                future = asyncio.run_coroutine_threadsafe(pool.close(), loop)
                try:
                    future.result(timeout=self._connect_timeout + 1)
                except TimeoutError:
                    logger.warning("async pool %s did not close in time", pool.pool.name)
                    pool.close_sockets()


class _LoopPool:
    """One loop's pool, and the sessions it opened (to close them once the loop is gone);
    the last session given back is kept hot (``_HotSession``)."""

    def __init__(
        self,
        url: str,
        *,
        name: str,
        max_size: int,
        connect_timeout: float,
        may_prepare: bool = True,
    ) -> None:
        self.sessions: weakref.WeakSet[AsyncConnection] = weakref.WeakSet()
        # min_size 0: with 1, the first checkout came before the pool's first session
        # and grew it by a second attempt, which the loop's end could cancel halfway,
        # leaving a server session that only garbage collection ends.
        self.pool: AsyncConnectionPool[AsyncConnection] = AsyncConnectionPool(
            url,
            min_size=0,
            max_size=max_size,
            kwargs=_connect_kwargs(connect_timeout, may_prepare=may_prepare),
            timeout=connect_timeout,
            open=False,
            name=name,
            configure=self._track,
        )
        self._close_timeout = connect_timeout
        self._is_open = False
        self._guard: asyncio.Task[None] | None = None
        self._hot: _HotSession[AsyncConnection] = _HotSession()

    async def _track(self, conn: AsyncConnection) -> None:
        read_json_with_venturi(conn)
        self.sessions.add(conn)

    async def open(self) -> None:
        if not self._is_open:
            await self.pool.open(wait=False)
            self._is_open = True
            self._guard = asyncio.get_running_loop().create_task(
                self._close_at_loop_shutdown(), name=f"{self.pool.name}-shutdown"
            )

    async def _close_at_loop_shutdown(self) -> None:
        """Close the pool when the loop's end cancels every task (``asyncio.run``, a test
        runner). psycopg_pool's connection attempts take a cancellation for a failed
        connect and schedule another, so a pool still connecting then would leave a
        task that never ends and the loop's shutdown waiting for it forever; closing
        the pool stops its workers, that one included."""
        try:
            await asyncio.get_running_loop().create_future()
        finally:
            if not self.pool.closed:
                await self._close_pool()

    async def close(self) -> None:
        """Close the pool on its own loop (the running one), and end the shutdown guard."""
        await self._close_pool()
        if self._guard is not None:
            self._guard.cancel()

    async def live_connection(self) -> AsyncConnection:
        for _ in range(self.pool.max_size):
            conn = await self._checkout()
            if await _is_live_async(conn):
                return conn
            logger.debug("discarding a pooled connection whose session the server ended")
            self._hot.forget(conn)
            await conn.close()
            await self.pool.putconn(conn)  # closed: the pool drops it and connects anew
        return await self._checkout()

    async def _checkout(self) -> AsyncConnection:
        hot = self._hot.take()
        if hot is not None:
            return hot
        conn: AsyncConnection | None = None
        try:
            conn = await self.pool.getconn()
        finally:
            self._hot.got(conn)
        return conn

    async def give_back(self, conn: AsyncConnection) -> None:
        """Keep ``conn`` hot for the next checkout, or return it to the pool."""
        if not self._hot.keep(conn):
            await self.pool.putconn(conn)

    async def _close_pool(self) -> None:
        """Return the hot session, then close the pool (which closes every session)."""
        hot = self._hot.clear()
        if hot is not None:
            await self.pool.putconn(hot)
        await self.pool.close(timeout=self._close_timeout)

    def close_sockets(self) -> None:
        """End every session of a pool whose loop is gone; libpq's ``finish`` needs no loop."""
        for conn in list(self.sessions):
            if not conn.closed:
                conn.pgconn.finish()


async def _is_live_async(conn: AsyncConnection) -> bool:
    if conn.closed or conn.broken:
        return False
    if not _has_input(conn.fileno()):
        return True
    try:
        await AsyncConnectionPool.check_connection(conn)
    except psycopg.Error:
        return False
    return True


class PollingListener:
    """The listener behind a transaction-mode pooler without a direct URL: LISTEN
    needs a session, so there are no wake-ups and the worker's poll interval is
    the latency of a new job (ADR 0123)."""

    def __init__(self) -> None:
        self._interrupted = threading.Event()
        self._is_closed = False

    def wait(self, timeout: float) -> bool:
        if not self._is_closed:
            self._interrupted.wait(max(0.0, timeout))
            self._interrupted.clear()
        return False

    def interrupt(self) -> None:
        self._interrupted.set()

    def close(self) -> None:
        self._is_closed = True
        self._interrupted.set()


@dataclass
class _Watch:
    conn: Connection
    deadline: float
    is_abandoned: bool = False


class ReplyWatchdog:
    """Abandons a session whose statement gets no reply within ``reply_timeout``.

    TCP keepalives only probe idle sockets, and a peer that acknowledges the
    bytes but never answers (a proxy or pooler that stopped forwarding) passes
    every probe: without this, a worker's renewal or claim would wait forever
    and never rejoin. One thread per backend, started on first use, watches the
    sessions inside ``bounded`` blocks; an overdue one has its socket shut down,
    which wakes the blocked statement with an error, and the block raises
    ``BackendUnavailable`` saying so. The pool then drops the session and
    connects anew. Registering costs a lock and a dict entry, no round trip,
    and wakes the thread only when the new deadline comes before the one it
    sleeps until: every block has the same timeout, so that is only when it
    sleeps with nothing to watch (waking it for every claim cost a thread
    switch per statement: 50 us of a 0.75 ms idle claim, ADR 0132).
    """

    def __init__(self, reply_timeout: float, *, name: str) -> None:
        self.reply_timeout = reply_timeout
        self._name = name
        self._changed = threading.Condition()
        self._watches: dict[int, _Watch] = {}
        self._thread: threading.Thread | None = None
        self._is_stopping = False
        #: When the watching thread looks next (infinity: it waits for a first watch).
        self._looks_at = math.inf

    @contextmanager
    def bounded(self, conn: Connection) -> Iterator[None]:
        watch = _Watch(conn, time.monotonic() + self.reply_timeout)
        key = id(watch)
        with self._changed:
            self._watches[key] = watch
            if self._thread is None and not self._is_stopping:
                self._thread = threading.Thread(target=self._watch, name=self._name, daemon=True)
                self._thread.start()
            if watch.deadline < self._looks_at:
                self._looks_at = watch.deadline
                self._changed.notify()
        try:
            yield
        except psycopg.OperationalError as exc:
            if watch.is_abandoned:
                raise BackendUnavailable(
                    f"database unavailable: no reply within {self.reply_timeout}s; "
                    "the session was abandoned"
                ) from exc
            raise
        finally:
            with self._changed:
                del self._watches[key]

    def _watch(self) -> None:
        with self._changed:
            while not self._is_stopping:
                now = time.monotonic()
                overdue = [
                    w for w in self._watches.values() if w.deadline <= now and not w.is_abandoned
                ]
                for watch in overdue:
                    watch.is_abandoned = True
                    logger.warning(
                        "no reply from the database within %.1fs; abandoning the session",
                        self.reply_timeout,
                    )
                    _shut_down(watch.conn)
                pending = [w.deadline for w in self._watches.values() if not w.is_abandoned]
                self._looks_at = min(pending, default=math.inf)
                self._changed.wait(self._looks_at - now if pending else None)

    def stop(self) -> None:
        """End the watching thread; idempotent. Blocks entered later go unwatched."""
        with self._changed:
            self._is_stopping = True
            thread, self._thread = self._thread, None
            self._changed.notify()
        if thread is not None:
            thread.join(timeout=1.0)


def _shut_down(conn: Connection) -> None:
    """Shut the session's socket down under the thread blocked on it: closing the
    descriptor would not wake that thread, a shutdown does (it reads end of file)."""
    try:
        sock = socket.socket(fileno=os.dup(conn.fileno()))
    except (OSError, psycopg.Error):
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        logger.debug("shutting an abandoned session's socket down failed", exc_info=True)
    finally:
        sock.close()
