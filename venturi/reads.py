"""Where an App's reads go: a read replica for what may lag, the primary for the rest
(SPEC 6.4, ADR 0140).

``App(url, read_url=...)`` (or ``$VENTURI_READ_DATABASE_URL``) names a replica of
``url``'s server (a streaming standby, a managed read replica). Then the reads a
person looks at, and which may be a few seconds old, are sent to it: ``app.job``,
``jobs``, ``job_summaries``, ``count_jobs``, ``stats``, ``throughput``, ``backlog``,
``workflows``, ``workflow`` and ``workflow_of``, so the dashboard, ``venturi
stats`` and ``venturi jobs list|show`` load the replica, not the primary. Nothing
else is: claims, enqueues, every change, leases and the worker registry, the
active beat (a lock only the primary holds), ``result`` and ``status`` (a waiter
needs the answer the primary has now), ``check_schema`` and ``pending_migrations``.

The replica's backend is built on the first read, with sessions of its own; a
worker never makes one. When it cannot be reached, those reads raise
``ReplicaUnavailable`` (a ``BackendUnavailable``) naming its address, never its
password, while everything on the primary goes on.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Protocol

from venturi.backend import Backend
from venturi.errors import BackendUnavailable, ReplicaUnavailable
from venturi.types import (
    AppliedMigration,
    Cursor,
    JobDetail,
    Page,
    Stats,
    Status,
    SummaryPage,
    Throughput,
    Workflow,
    WorkflowSummary,
)

__all__ = [
    "READ_DATABASE_URL_ENV",
    "ReadRouting",
    "Reads",
    "ReplicaBackend",
    "ReplicaReads",
]

READ_DATABASE_URL_ENV = "VENTURI_READ_DATABASE_URL"


class Reads(Protocol):
    """The backend verbs whose answers may come from a replica."""

    def get_job(self, job_id: str) -> JobDetail | None: ...

    def list_jobs(
        self, *, status: Status | None, kind: str | None, limit: int, after: Cursor | None
    ) -> Page: ...

    def list_job_summaries(
        self,
        *,
        status: Status | None,
        kind: str | None,
        note: str | None,
        limit: int,
        after: Cursor | None,
    ) -> SummaryPage: ...

    def count_jobs(self, *, status: Status | None, kind: str | None, note: str | None) -> int: ...

    def stats(self) -> Stats: ...

    def throughput(self, window: timedelta) -> Throughput: ...

    def backlog(self, kind: str | None) -> int: ...

    def get_workflow(self, workflow_id: str) -> Workflow | None: ...

    def list_workflows(self, *, limit: int, before: str | None) -> list[WorkflowSummary]: ...

    def workflow_id_of(self, job_id: str) -> str | None: ...


class ReplicaBackend(Reads, Protocol):
    """A backend on the replica: its reads, and its own lifecycle."""

    def close(self) -> None: ...

    async def aclose(self) -> None: ...


class ReplicaReads:
    """``Reads`` on the replica's backend; an outage there is ``ReplicaUnavailable``."""

    def __init__(self, backend: ReplicaBackend, address: str) -> None:
        self.backend = backend
        self.address = address

    @contextmanager
    def _replica(self) -> Iterator[None]:
        try:
            yield
        except ReplicaUnavailable:
            raise
        except BackendUnavailable as exc:
            reason = str(exc).removeprefix("database unavailable: ")
            raise ReplicaUnavailable(self.address, reason) from exc

    def get_job(self, job_id: str) -> JobDetail | None:
        with self._replica():
            return self.backend.get_job(job_id)

    def list_jobs(
        self, *, status: Status | None, kind: str | None, limit: int, after: Cursor | None
    ) -> Page:
        with self._replica():
            return self.backend.list_jobs(status=status, kind=kind, limit=limit, after=after)

    def list_job_summaries(
        self,
        *,
        status: Status | None,
        kind: str | None,
        note: str | None,
        limit: int,
        after: Cursor | None,
    ) -> SummaryPage:
        with self._replica():
            return self.backend.list_job_summaries(
                status=status, kind=kind, note=note, limit=limit, after=after
            )

    def count_jobs(self, *, status: Status | None, kind: str | None, note: str | None) -> int:
        with self._replica():
            return self.backend.count_jobs(status=status, kind=kind, note=note)

    def stats(self) -> Stats:
        with self._replica():
            return self.backend.stats()

    def throughput(self, window: timedelta) -> Throughput:
        with self._replica():
            return self.backend.throughput(window)

    def backlog(self, kind: str | None) -> int:
        with self._replica():
            return self.backend.backlog(kind)

    def get_workflow(self, workflow_id: str) -> Workflow | None:
        with self._replica():
            return self.backend.get_workflow(workflow_id)

    def list_workflows(self, *, limit: int, before: str | None) -> list[WorkflowSummary]:
        with self._replica():
            return self.backend.list_workflows(limit=limit, before=before)

    def workflow_id_of(self, job_id: str) -> str | None:
        with self._replica():
            return self.backend.workflow_id_of(job_id)


class ReadRouting:
    """The App's mixin that owns the replica's backend and says where each read goes.

    ``App`` supplies the two hooks: its own ``backend`` and how a backend on the
    replica is built (``_connect_replica``, the composition root's job).
    """

    _read_url: str | None
    _replica: ReplicaReads | None
    _replica_lock: threading.Lock

    def _init_reads(self, read_url: str | None) -> None:
        self._read_url = read_url
        self._replica = None
        self._replica_lock = threading.Lock()

    @property
    def backend(self) -> Backend:
        raise NotImplementedError

    def _connect_replica(self, url: str) -> tuple[ReplicaBackend, str]:
        """A backend on ``url`` and its address (``host:port``) for errors."""
        raise NotImplementedError

    @property
    def read_url(self) -> str | None:
        """The replica's URL: ``read_url=`` given, else ``$VENTURI_READ_DATABASE_URL``, else
        None (every read goes to the primary)."""
        return self._read_url or os.environ.get(READ_DATABASE_URL_ENV) or None

    @property
    def reads(self) -> Reads:
        """Where reads that may lag go: the replica's backend (built on first use) when
        there is a ``read_url``, else the App's own backend."""
        replica = self._replica
        if replica is not None:
            return replica
        url = self.read_url
        if url is None:
            return self.backend
        with self._replica_lock:
            if self._replica is None:
                backend, address = self._connect_replica(url)
                self._replica = ReplicaReads(backend, address)
            return self._replica

    def _close_replica(self) -> None:
        if self._replica is not None:
            self._replica.backend.close()

    async def _aclose_replica(self) -> None:
        if self._replica is not None:
            await self._replica.backend.aclose()

    def backlog(self, kind: str | None = None) -> int:
        """Due pending jobs (``visible_at <= now()``), of ``kind`` when given: what an
        autoscaler scales on (``venturi stats --backlog``, ADR 0136). From the replica
        when there is one."""
        return self.reads.backlog(kind)

    def pending_migrations(self) -> tuple[list[AppliedMigration], str]:
        """What ``migrate`` would apply now, in order, and the SQL it would run for them
        (``venturi migrate --sql``, ``--check``); applies nothing. Always the primary."""
        return self.backend.pending_migrations()
