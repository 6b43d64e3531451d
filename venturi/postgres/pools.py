"""The pools the adapter's statements run on: lazy, live sessions only, the last one kept hot.

Pooled sessions run in autocommit and hold no session state (ADR 0100); a
pool opens on first use and never hands out a session the server ended.
``Pool`` serves sync callers, ``AsyncPool`` gives each event loop a pool of
its own (ADR 0122).

A pool that has not served a session yet does not make its first caller wait
its whole timeout for a server that is not there: after ``FIRST_WAIT`` one
direct attempt says why (refused, no answer, login refused) at once. Every
pool and session made here is known to ``driver_errors.OWN_POOLS``, which
keeps the driver's warnings about them out of the log (ADR 0118,
"Unreachable at start").
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from typing import Any, TypeVar

import psycopg
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from venturi.errors import BackendUnavailable
from venturi.postgres.driver_errors import OWN_POOLS
from venturi.postgres.hot_session import HotSession, WarmSession
from venturi.postgres.queries import Query, read_json_with_venturi
from venturi.postgres.sessions import (
    SESSIONS_LOGGER,
    AsyncConnection,
    Connection,
    aconnect,
    connect,
    connect_kwargs,
    has_input,
)

__all__ = ["FIRST_WAIT", "AsyncPool", "Pool"]

logger = logging.getLogger(SESSIONS_LOGGER)
T = TypeVar("T")

#: How long the first checkout of a pool that never served a session waits for the
#: pool's own first connection before one direct attempt asks the server itself.
FIRST_WAIT = 0.1


def _configure(conn: Connection, *, then: Callable[[Connection], None] | None) -> None:
    OWN_POOLS.adopt(conn)
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
            kwargs=connect_kwargs(connect_timeout, may_prepare=may_prepare),
            timeout=connect_timeout,
            open=False,
            name=name,
            configure=functools.partial(_configure, then=configure),
        )
        OWN_POOLS.watch(name)
        self._is_open = False
        #: False until a checkout got a session: the first ones ask the server directly.
        self._has_served = False
        self._lock = threading.Lock()
        self._hot: HotSession[Connection] = HotSession()

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
        generator and ``with conn``, for one-statement calls such as ``.delay()``,
        whose Python runs with cold caches after each round trip (ADR 0132; the
        figures: bench/README.md). An autocommit session is idle after
        any statement; one left in a transaction goes back to the pool, which
        rolls it back."""
        conn = self._take()
        try:
            return action(conn)
        finally:
            self._give_back(conn)

    def execute(self, query: Query, params: Mapping[str, Any]) -> None:
        """``query`` (one that returns no rows) with ``params`` on a live pooled session,
        on a cursor of its own that is made once and reused: a new cursor costs a sixth
        of ``.delay()``'s Python (bench/JOURNAL.md, section 21). The hot session with
        no unread input goes straight to its cursor, without the checkout's steps (ADR
        0143); else the checkout's live-session check decides, as for ``run``."""
        with self._lock:
            warm = self._hot.take_warm()
        if warm is not None:
            hot, cursor, poll = warm
            if not poll(0):
                try:
                    query.exec_on(cursor, params)
                finally:
                    self._give_back(hot)
                return
            self._give_back(hot)
        conn = self._take()
        try:
            query.exec_on(self._hot.cursor_of(conn), params)
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
            conn = self._pool.getconn() if self._has_served else self._first_getconn()
        finally:
            with self._lock:
                self._hot.got(conn)
        return conn

    def _first_getconn(self) -> Connection:
        """A checkout before the pool ever served one: the pool's first connection if it
        comes within ``FIRST_WAIT``, else a direct attempt first, which raises at once
        when the server refuses (or after the connect timeout when it never answers)
        instead of waiting the pool's whole timeout while the pool retries."""
        started = time.monotonic()
        try:
            conn = self._pool.getconn(FIRST_WAIT)
        except PoolTimeout:
            connect(self._url, self._connect_timeout).close()
            waited = time.monotonic() - started
            conn = self._pool.getconn(max(FIRST_WAIT, self._connect_timeout - waited))
        self._has_served = True
        return conn

    def _why_unavailable(self, timeout: PoolTimeout) -> BackendUnavailable:
        """The pool only says it timed out; one direct attempt says why (refused, no such db)."""
        try:
            connect(self._url, self._connect_timeout).close()
        except BackendUnavailable as exc:
            return exc
        return _no_pooled_connection(self._connect_timeout, timeout)

    def close(self) -> None:
        if self._is_open:
            with self._lock:
                hot = self._hot.clear()
            if hot is not None:
                self._pool.putconn(hot)
            self._pool.close()
            self._is_open = False
            self._has_served = False


def _no_pooled_connection(waited: float, timeout: PoolTimeout) -> BackendUnavailable:
    """The error of a pool that timed out while the server itself accepted a session."""
    return BackendUnavailable(
        f"database unavailable: no pooled connection within {waited}s ({timeout})"
    )


def _is_live(conn: Connection) -> bool:
    if conn.closed or conn.broken:
        return False
    if not has_input(conn.fileno()):
        return True
    try:
        ConnectionPool.check_connection(conn)
    except psycopg.Error:
        return False
    return True


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

    async def execute(self, query: Query, params: Mapping[str, Any]) -> None:
        """``Pool.execute``, awaited: the running loop's hot session with no unread
        input goes straight to its reused cursor; else the checkout decides."""
        pool = await self._pool_of_running_loop()
        warm = pool.take_warm()
        if warm is not None:
            hot, cursor, poll = warm
            if not poll(0):
                try:
                    await query.aexec_on(cursor, params)
                finally:
                    await pool.give_back(hot)
                return
            await pool.give_back(hot)
        pool, conn = await self._take()
        try:
            await query.aexec_on(pool.cursor_of(conn), params)
        finally:
            await pool.give_back(conn)

    async def _take(self) -> tuple[_LoopPool, AsyncConnection]:
        pool = await self._pool_of_running_loop()
        try:
            return pool, await pool.live_connection()
        except PoolTimeout as exc:
            raise await self._why_unavailable(exc) from exc

    async def _pool_of_running_loop(self) -> _LoopPool:
        loop = asyncio.get_running_loop()
        pools = self._pools
        if len(pools) == 1:  # the common case, where there is nothing to sweep
            pool = pools.get(loop)
            if pool is not None and pool.is_open:
                return pool
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

    async def _why_unavailable(self, timeout: PoolTimeout) -> BackendUnavailable:
        """As ``Pool._why_unavailable``: one direct attempt says why."""
        try:
            await (await aconnect(self._url, self._connect_timeout)).close()
        except BackendUnavailable as exc:
            return exc
        return _no_pooled_connection(self._connect_timeout, timeout)

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
    the last session given back is kept hot (``HotSession``)."""

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
        self._url = url
        self._connect_timeout = connect_timeout
        # min_size 0: with 1, the first checkout came before the pool's first session
        # and grew it by a second attempt, which the loop's end could cancel halfway,
        # leaving a server session that only garbage collection ends.
        self.pool: AsyncConnectionPool[AsyncConnection] = AsyncConnectionPool(
            url,
            min_size=0,
            max_size=max_size,
            kwargs=connect_kwargs(connect_timeout, may_prepare=may_prepare),
            timeout=connect_timeout,
            open=False,
            name=name,
            configure=self._track,
        )
        OWN_POOLS.watch(name)
        self._is_open = False
        #: As ``Pool._has_served``.
        self._has_served = False
        self._guard: asyncio.Task[None] | None = None
        self._hot: HotSession[AsyncConnection] = HotSession()

    async def _track(self, conn: AsyncConnection) -> None:
        OWN_POOLS.adopt(conn)
        read_json_with_venturi(conn)
        self.sessions.add(conn)

    @property
    def is_open(self) -> bool:
        return self._is_open

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
            conn = await (self.pool.getconn() if self._has_served else self._first_getconn())
        finally:
            self._hot.got(conn)
        return conn

    async def _first_getconn(self) -> AsyncConnection:
        """As ``Pool._first_getconn``."""
        started = time.monotonic()
        try:
            conn = await self.pool.getconn(FIRST_WAIT)
        except PoolTimeout:
            await (await aconnect(self._url, self._connect_timeout)).close()
            waited = time.monotonic() - started
            conn = await self.pool.getconn(max(FIRST_WAIT, self._connect_timeout - waited))
        self._has_served = True
        return conn

    def take_warm(self) -> WarmSession[AsyncConnection] | None:
        """As ``HotSession.take_warm``: one loop's pool needs no lock."""
        return self._hot.take_warm()

    def cursor_of(self, conn: AsyncConnection) -> psycopg.AsyncCursor[Any]:
        """As ``HotSession.cursor_of``."""
        cursor: psycopg.AsyncCursor[Any] = self._hot.cursor_of(conn)
        return cursor

    async def give_back(self, conn: AsyncConnection) -> None:
        """Keep ``conn`` hot for the next checkout, or return it to the pool."""
        if not self._hot.keep(conn):
            await self.pool.putconn(conn)

    async def _close_pool(self) -> None:
        """Return the hot session, then close the pool (which closes every session)."""
        hot = self._hot.clear()
        if hot is not None:
            await self.pool.putconn(hot)
        await self.pool.close(timeout=self._connect_timeout)

    def close_sockets(self) -> None:
        """End every session of a pool whose loop is gone; libpq's ``finish`` needs no loop."""
        for conn in list(self.sessions):
            if not conn.closed:
                conn.pgconn.finish()


async def _is_live_async(conn: AsyncConnection) -> bool:
    if conn.closed or conn.broken:
        return False
    if not has_input(conn.fileno()):
        return True
    try:
        await AsyncConnectionPool.check_connection(conn)
    except psycopg.Error:
        return False
    return True
