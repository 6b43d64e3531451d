"""Loads ``queries.sql`` once and runs its named statements.

Each statement is introduced by ``-- name: <name> :one|:many|:exec|:copy``,
optionally followed by ``:replan``; the cardinality is enforced here so a
statement cannot silently return more (or other) than its caller expects. A
``:replan`` statement is never prepared: PostgreSQL plans it with its actual
parameters at every execution, for statements whose generic plan is bad (the
statement's comment says why). The prefix is substituted once, at load, from a
validated ``Prefix``; values only ever travel as ``%(name)s`` parameters.

Each ``Query`` runs on a ``psycopg.Connection`` (``one``, ``many``, ``exec``,
``copy``) or, awaited, on a ``psycopg.AsyncConnection`` (``aone``, ``amany``,
``aexec``, ``acopy``): one file, one loader, the same statements for both.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from dataclasses import dataclass, field
from importlib.resources import files
from typing import Any, Literal, cast

import orjson
import psycopg
from psycopg.adapt import AdaptersMap
from psycopg.pq import Format
from psycopg.rows import dict_row
from psycopg.types.json import set_json_loads

from venturi.naming import Prefix

__all__ = [
    "Queries",
    "Query",
    "QueryFileError",
    "UndecodableJSON",
    "parse_queries",
    "read_json_with_venturi",
]

Cardinality = Literal["one", "many", "exec", "copy"]
_HEADER = re.compile(
    r"^-- name: (?P<name>[a-z_]+) :(?P<card>one|many|exec|copy)(?P<replan> :replan)?\s*$",
    re.MULTILINE,
)


class UndecodableJSON(str):
    """Stored JSON that Python cannot decode (e.g. ``1e400`` or very deep nesting).

    PostgreSQL accepts such values, so a row written by hand can hold one. It
    comes back as its raw text instead of failing the whole statement: a
    payload that is not an object then ends its job ``dead`` with a note, and
    operations can still list and cancel the row.
    """


def _loads(data: bytes | bytearray | memoryview | str) -> object:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return UndecodableJSON(bytes(data).decode() if not isinstance(data, str) else data)


class QueryFileError(Exception):
    """queries.sql is malformed (a packaging bug, not a user error)."""


def read_json_with_venturi(conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any]) -> None:
    """Decode JSON on ``conn`` as venturi does, once (its pools' ``configure``): the
    statements' cursors then skip registering it each time (bench/README.md)."""
    set_json_loads(_loads, conn)


def _venturi_jsonb_loader() -> type[Any] | None:
    probe = AdaptersMap(psycopg.adapters)
    set_json_loads(_loads, probe)
    return probe.get_loader(_JSONB_OID, Format.TEXT)


_JSONB_OID = psycopg.adapters.types["jsonb"].oid
_JSONB_LOADER = _venturi_jsonb_loader()


def _decode_json_as_venturi(
    conn: psycopg.Connection[Any] | psycopg.AsyncConnection[Any],
    cursor: psycopg.Cursor[Any] | psycopg.AsyncCursor[Any],
) -> None:
    """venturi's JSON loads on ``cursor``, unless its session has them (a pooled one):
    a caller's own connection (``connection=``) keeps its own loads."""
    if conn.adapters.get_loader(_JSONB_OID, Format.TEXT) is not _JSONB_LOADER:
        set_json_loads(_loads, cursor)


@dataclass(frozen=True, slots=True)
class Query:
    name: str
    cardinality: Cardinality
    sql: str
    replan: bool = False
    #: psycopg's ``prepare=``: False never prepares (``replan``), None leaves it to psycopg.
    _prepare: bool | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_prepare", False if self.replan else None)

    def one(self, conn: psycopg.Connection[Any], **params: Any) -> dict[str, Any] | None:
        """At most one row (``None`` when there is none)."""
        self._expect("one")
        with conn.cursor(row_factory=dict_row) as cur:
            _decode_json_as_venturi(conn, cur)
            cur.execute(self.sql, params, prepare=self._prepare)
            return cur.fetchone()

    def many(self, conn: psycopg.Connection[Any], **params: Any) -> list[dict[str, Any]]:
        self._expect("many")
        with conn.cursor(row_factory=dict_row) as cur:
            _decode_json_as_venturi(conn, cur)
            cur.execute(self.sql, params, prepare=self._prepare)
            return cur.fetchall()

    def exec(self, conn: psycopg.Connection[Any], **params: Any) -> int:
        """Run for effect; returns the affected row count."""
        self._expect("exec")
        with conn.cursor() as cur:
            cur.execute(self.sql, params, prepare=self._prepare)
            return cur.rowcount

    def exec_on(self, cursor: psycopg.Cursor[Any], params: Mapping[str, Any]) -> int:
        """``exec`` on a cursor the caller reuses (``Pool.execute``)."""
        self._expect("exec")
        cursor.execute(self.sql, params, prepare=self._prepare)
        return cursor.rowcount

    def copy(self, cursor: psycopg.Cursor[Any]) -> AbstractContextManager[psycopg.Copy]:
        """A ``COPY ... FROM STDIN`` on ``cursor``, to ``write_row`` into."""
        self._expect("copy")
        return cursor.copy(self.sql)

    async def aone(
        self, conn: psycopg.AsyncConnection[Any], **params: Any
    ) -> dict[str, Any] | None:
        """``one``, on an async connection."""
        self._expect("one")
        async with conn.cursor(row_factory=dict_row) as cur:
            _decode_json_as_venturi(conn, cur)
            await cur.execute(self.sql, params, prepare=self._prepare)
            return await cur.fetchone()

    async def amany(
        self, conn: psycopg.AsyncConnection[Any], **params: Any
    ) -> list[dict[str, Any]]:
        """``many``, on an async connection."""
        self._expect("many")
        async with conn.cursor(row_factory=dict_row) as cur:
            _decode_json_as_venturi(conn, cur)
            await cur.execute(self.sql, params, prepare=self._prepare)
            return await cur.fetchall()

    async def aexec(self, conn: psycopg.AsyncConnection[Any], **params: Any) -> int:
        """``exec``, on an async connection."""
        self._expect("exec")
        async with conn.cursor() as cur:
            await cur.execute(self.sql, params, prepare=self._prepare)
            return cur.rowcount

    async def aexec_on(self, cursor: psycopg.AsyncCursor[Any], params: Mapping[str, Any]) -> int:
        """``exec_on``, on an async cursor."""
        self._expect("exec")
        await cursor.execute(self.sql, params, prepare=self._prepare)
        return cursor.rowcount

    def acopy(
        self, cursor: psycopg.AsyncCursor[Any]
    ) -> AbstractAsyncContextManager[psycopg.AsyncCopy]:
        """``copy``, on an async cursor: ``await copy.write_row(...)`` inside it."""
        self._expect("copy")
        return cursor.copy(self.sql)

    def _expect(self, cardinality: Cardinality) -> None:
        if self.cardinality != cardinality:
            raise QueryFileError(
                f"query {self.name} is declared :{self.cardinality}, called as :{cardinality}"
            )


def parse_queries(text: str) -> dict[str, Query]:
    """Split a query file into named statements, refusing duplicates and empty bodies."""
    headers = list(_HEADER.finditer(text))
    if not headers:
        raise QueryFileError("no '-- name:' headers found")
    queries: dict[str, Query] = {}
    for index, header in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
        body = text[header.end() : end]
        sql = "\n".join(
            line
            for line in body.splitlines()
            if line.strip() and not line.lstrip().startswith("--")
        ).strip()
        name = header["name"]
        if not sql:
            raise QueryFileError(f"query {name} has no SQL")
        if name in queries:
            raise QueryFileError(f"query {name} is defined twice")
        queries[name] = Query(
            name, cast(Cardinality, header["card"]), sql, replan=header["replan"] is not None
        )
    return queries


class Queries:
    """Every runtime statement, prefix substituted, as attributes by name."""

    def __init__(self, prefix: Prefix) -> None:
        text = files("venturi.postgres").joinpath("queries.sql").read_text(encoding="utf-8")
        self._queries = parse_queries(prefix.substitute(text))
        clashes = sorted(set(self._queries) & set(dir(type(self))))
        if clashes:
            raise QueryFileError(f"statement names clash with Queries' own: {clashes}")
        # Each statement an attribute of its own: ``__getattr__`` runs only after the
        # ordinary lookup has failed, which costs an exception on every statement run.
        vars(self).update(self._queries)

    def __getattr__(self, name: str) -> Query:
        """The statements are instance attributes; this is reached for an unknown name."""
        raise AttributeError(f"queries.sql has no statement named {name!r}")

    def names(self) -> set[str]:
        return set(self._queries)
