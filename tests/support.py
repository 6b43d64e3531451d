"""Helpers shared by test modules (importable as ``support``: pytest's pythonpath)."""

from __future__ import annotations

import contextlib
import re
import secrets
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import tuple_row

import venturi

#: A URL nothing listens on (port 1 on loopback): a test that should never touch
#: the database fails loudly, with ``BackendUnavailable``, if it does.
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/none"


def prefix_tables(conn: psycopg.Connection[Any], prefix: str) -> list[str]:
    """Every table of ``prefix`` in the current schema, read from the catalog.

    Whichever migration (or test) made a table, it is found here, so a new
    migration's tables need no list. A longer prefix that starts with this one
    (``p_x`` beside ``p``) keeps its tables: its history table, ``p_x_migrations``,
    marks it.
    """
    with conn.cursor(row_factory=tuple_row) as cur:
        names = [
            name
            for (name,) in cur.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                " AND starts_with(tablename, %s) ORDER BY tablename",
                [f"{prefix}_"],
            ).fetchall()
        ]
    longer = {n.removesuffix("_migrations") for n in names if n.endswith("_migrations")}
    longer.discard(prefix)
    return [n for n in names if not any(n.startswith(f"{other}_") for other in longer)]


def drop_prefix_tables(conn: psycopg.Connection[Any], prefix: str) -> None:
    """Drop every table of ``prefix`` (``prefix_tables``) in one statement."""
    tables = prefix_tables(conn, prefix)
    if tables:
        names = sql.SQL(", ").join(sql.Identifier(table) for table in tables)
        conn.execute(sql.SQL("DROP TABLE IF EXISTS {} CASCADE").format(names))
    # V13's functions (its trigger goes with the jobs table).
    for function in ("enqueue_on_dead", "new_id"):
        conn.execute(
            sql.SQL("DROP FUNCTION IF EXISTS {}()").format(sql.Identifier(f"{prefix}_{function}"))
        )


def drop_prefix(database_url: str, prefix: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        drop_prefix_tables(conn, prefix)


def empty_prefix(conn: psycopg.Connection[Any], prefix: str) -> None:
    """Empty every table of ``prefix`` but its migration history and its worker
    registry (the tests that read the registry empty it themselves)."""
    kept = {f"{prefix}_migrations", f"{prefix}_workers"}
    names = [sql.Identifier(table) for table in prefix_tables(conn, prefix) if table not in kept]
    conn.execute(sql.SQL("TRUNCATE {}").format(sql.SQL(", ").join(names)))


MIGRATIONS = Path(__file__).resolve().parents[1] / "migrations"


def migration_tables() -> tuple[str, ...]:
    """The tables the migration files create, newest file first, as suffixes of a prefix."""
    files = sorted(MIGRATIONS.glob("V*__*.sql"), key=lambda f: int(f.name[1:].split("__")[0]))
    return tuple(
        name
        for file in reversed(files)
        for name in re.findall(r"CREATE TABLE \{\{prefix\}\}_(\w+)", file.read_text())
    )


#: Every table a migrated prefix has (the migrations' and the history), read from
#: the migration files: ``test_prefix_tables`` holds the catalog read of
#: ``prefix_tables`` equal to it. To drop a prefix, use ``drop_prefix_tables``.
PREFIX_TABLES = (*migration_tables(), "migrations")


@contextlib.contextmanager
def migrated_prefix(database_url: str) -> Iterator[str]:
    """A fresh prefix, migrated (its tables never analyzed); dropped afterwards."""
    value = f"t_{secrets.token_hex(5)}"
    app = venturi.App(database_url, prefix=value, set_as_current=False)
    app.migrate()
    app.close()
    try:
        yield value
    finally:
        drop_prefix(database_url, value)


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, *, every: float = 0.02) -> Any:
    """Poll ``predicate`` until it is truthy; a bound against hanging, not a timing assert."""
    deadline = time.monotonic() + timeout
    pause = threading.Event()
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        pause.wait(every)


class TcpProxy:
    """Forwards TCP to the database, and fails on demand.

    ``stop()``: every connection through it breaks and new ones are refused,
    until ``start()``. ``cut()``: every connection breaks and new ones are
    accepted and closed at once (the port stays bound), until ``restore()``.
    ``blackhole()``: a silent partition: every socket stays open, new
    connections are accepted, but no byte is forwarded either way (each
    direction holds what it read), until ``restore()`` delivers it and resumes.
    The peers' TCP stacks see nothing wrong: keepalive probes are answered.
    """

    @classmethod
    def in_front_of(cls, database_url: str) -> TcpProxy:
        """A proxy to the server ``database_url`` names."""
        server = conninfo_to_dict(database_url)
        return cls(str(server.get("host") or "127.0.0.1"), int(server.get("port") or 5432))

    def url(self, database_url: str, **params: Any) -> str:
        """``database_url`` (with ``params`` added) through this proxy."""
        return make_conninfo(database_url, host="127.0.0.1", port=str(self.port), **params)

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._server: socket.socket | None = None
        self._is_up = threading.Event()
        self._is_up.set()
        self._is_forwarding = threading.Event()
        self._is_forwarding.set()
        self.port = 0
        self.start()

    def start(self) -> None:
        server = socket.create_server(("127.0.0.1", self.port))
        server.settimeout(0.1)
        self.port = server.getsockname()[1]
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def _accept(self, server: socket.socket) -> None:
        while self._server is server:
            try:
                client, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            if not self._is_up.is_set():
                client.close()
                continue
            upstream = socket.create_connection(self._target)
            with self._lock:
                self._sockets += [client, upstream]
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := source.recv(65536):
                self._is_forwarding.wait()
                sink.sendall(data)
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def stop(self) -> None:
        """Close the listening socket (new connections are refused) and break every
        connection in flight."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        self._break_connections()

    def cut(self) -> None:
        self._is_up.clear()
        self._break_connections()

    def blackhole(self) -> None:
        self._is_forwarding.clear()

    def restore(self) -> None:
        self._is_up.set()
        self._is_forwarding.set()

    def _break_connections(self) -> None:
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()


class Database:
    """Plain SQL for assertions: tests check the rows, not only return values."""

    def __init__(self, conn: psycopg.Connection[dict[str, Any]], prefix: str) -> None:
        self.conn = conn
        self.prefix = prefix

    def _sql(self, sql: str) -> str:
        return sql.replace("{{prefix}}", self.prefix)

    def all(self, sql: str, params: Any = None) -> list[dict[str, Any]]:
        return self.conn.execute(self._sql(sql), params).fetchall()

    def one(self, sql: str, params: Any = None) -> dict[str, Any]:
        row = self.conn.execute(self._sql(sql), params).fetchone()
        assert row is not None, sql
        return row

    def scalar(self, sql: str, params: Any = None) -> Any:
        return next(iter(self.one(sql, params).values()))

    def execute(self, sql: str, params: Any = None) -> None:
        self.conn.execute(self._sql(sql), params)

    def jobs(self) -> list[dict[str, Any]]:
        return self.all("SELECT * FROM {{prefix}}_jobs ORDER BY created_at, id")

    def journal(self, job_id: str | None = None) -> list[dict[str, Any]]:
        if job_id is None:
            return self.all("SELECT * FROM {{prefix}}_journal ORDER BY id")
        return self.all("SELECT * FROM {{prefix}}_journal WHERE job_id = %s ORDER BY id", (job_id,))

    def outcomes(self, job_id: str) -> list[str]:
        """The outcomes of ``job_id``'s journal entries, oldest first."""
        return [entry["outcome"] for entry in self.journal(job_id)]


def row(db: Database, job_id: str) -> dict[str, Any]:
    """The job's row, every column."""
    return db.one("SELECT * FROM {{prefix}}_jobs WHERE id = %s", (job_id,))


def count(db: Database, where: str, params: Any = None) -> int:
    """How many jobs match ``where`` (SQL, with ``params``)."""
    return int(db.scalar(f"SELECT count(*) FROM {{{{prefix}}}}_jobs WHERE {where}", params))


def entries(db: Database, job_id: str) -> list[tuple[str, int, str | None]]:
    """The job's journal as (outcome, run, note), oldest first."""
    return [(e["outcome"], e["run_no"], e["note"]) for e in db.journal(job_id)]


def status_is(db: Database, job_id: str, status: str) -> Callable[[], bool]:
    """A predicate for ``wait_until``: the job's row has ``status``."""
    return lambda: row(db, job_id)["status"] == status


def duplicate_ticks(db: Database) -> list[dict[str, Any]]:
    """Beat rows written twice for one schedule and tick (must be none)."""
    return db.all(
        "SELECT dedup_key, visible_at, count(*) AS rows FROM {{prefix}}_jobs "
        "WHERE dedup_key LIKE 'beat:%%' GROUP BY dedup_key, visible_at HAVING count(*) > 1"
    )


def index_names(plan: Any) -> list[str]:
    """Every index a JSON ``EXPLAIN`` plan node and its children read."""
    found = [plan["Index Name"]] if "Index Name" in plan else []
    for child in plan.get("Plans", []):
        found += index_names(child)
    return found
