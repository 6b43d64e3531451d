"""App: configuration, the task registry, backend ownership, and operations.

The composition root: the only product-layer module that builds the default
PostgreSQL adapter, lazily, so that constructing an App at import time of a
user's module opens no connection.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, overload

from venturi.backend import Backend
from venturi.errors import JobNotFound
from venturi.registry import Registry, default_registry, set_current_app
from venturi.schedule import Schedule
from venturi.task import Task, TaskOptions, make_task
from venturi.types import AppliedMigration, Cursor, JobDetail, JobRow, Page, Stats, Status

logger = logging.getLogger(__name__)

DATABASE_URL_ENV = "VENTURI_DATABASE_URL"


class App:
    """One queue: a database (URL or embedded server), a prefix, and tasks.

    Options:
        database_url: a libpq URL. ``None`` reads ``$VENTURI_DATABASE_URL``,
            and without it starts (or joins) the embedded server under
            ``./.venturi/`` (needs the ``embedded`` extra).
        prefix: the table-name prefix (ADR 6), validated here, before any SQL.
        backend: a ready ``Backend`` (tests, other adapters); overrides the two above.
        set_as_current: make this the App that default-registry tasks
            (``@venturi.task``) enqueue through, like Celery's ``current_app``.

    Example::

        app = venturi.App("postgresql://localhost/mydb")
        app.migrate()
    """

    def __init__(
        self,
        database_url: str | None = None,
        prefix: str = "venturi",
        *,
        backend: Backend | None = None,
        set_as_current: bool = True,
    ) -> None:
        from venturi.postgres.naming import Prefix

        self.prefix = Prefix.parse(prefix).value
        self.database_url = database_url
        self.registry = Registry()
        self._schedules: list[Schedule] = []
        self._backend = backend
        if set_as_current:
            set_current_app(self)

    @property
    def backend(self) -> Backend:
        if self._backend is None:
            from venturi.postgres import PostgresBackend
            from venturi.postgres.embedded import embedded_database_url

            url = self.database_url or os.environ.get(DATABASE_URL_ENV) or embedded_database_url()
            self._backend = PostgresBackend(url, prefix=self.prefix)
        return self._backend

    @overload
    def task(self, fn: Callable[..., Any], /) -> Task[Any, Any]: ...
    @overload
    def task(self, /, **options: Any) -> Callable[[Callable[..., Any]], Task[Any, Any]]: ...
    def task(
        self, fn: Callable[..., Any] | None = None, /, **options: Any
    ) -> Task[Any, Any] | Callable[[Callable[..., Any]], Task[Any, Any]]:
        """Register a task on this App only (``@venturi.task`` registers on every App)."""
        opts = TaskOptions.parse(**options)
        if fn is not None:
            return make_task(fn, opts, registry=self.registry, app=self)
        return lambda f: make_task(f, opts, registry=self.registry, app=self)

    def tasks(self) -> Mapping[str, Task[Any, Any]]:
        """Every task this App serves: its own plus the default registry's."""
        return {**default_registry.tasks, **self.registry.tasks}

    def periodic(
        self,
        cron: str,
        task: Task[Any, Any],
        *,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        name: str | None = None,
        timezone: str = "UTC",
        catch_up: bool = False,
    ) -> Schedule:
        """Declare one more schedule of ``task`` (several may share a task)."""
        schedule = Schedule.declare(
            cron, task, args=args, kwargs=kwargs, name=name, timezone=timezone, catch_up=catch_up
        )
        self._schedules.append(schedule)
        return schedule

    def schedules(self) -> list[Schedule]:
        """Schedules from ``app.periodic`` plus those declared with ``@task(schedule=...)``."""
        declared = [Schedule.from_task(t) for t in self.tasks().values() if t.schedule]
        return declared + list(self._schedules)

    def migrate(self) -> list[AppliedMigration]:
        """Bring the schema up to date (ADR 24); safe to call from many processes at once."""
        return self.backend.migrate()

    def job(self, job_id: str) -> JobDetail:
        """The row and its journal timeline, oldest entry first."""
        detail = self.backend.get_job(job_id)
        if detail is None:
            raise JobNotFound(job_id)
        return detail

    def jobs(
        self,
        *,
        status: Status | str | None = None,
        kind: str | None = None,
        limit: int = 50,
        after: Cursor | None = None,
    ) -> Page:
        """One page of jobs, newest first; pass ``page.next`` as ``after`` for the next one."""
        return self.backend.list_jobs(
            status=Status(status) if status is not None else None,
            kind=kind,
            limit=limit,
            after=after,
        )

    def retry(self, job_id: str) -> JobRow:
        """Make a ``dead`` job pending again, eligible now."""
        return self.backend.retry_job(job_id)

    def cancel(self, job_id: str) -> JobRow:
        """Turn a ``pending`` job ``dead`` with the note ``cancelled``."""
        return self.backend.cancel_job(job_id)

    def cleanup(
        self, *, older_than: timedelta, status: Status | str | None = None, batch_size: int = 1000
    ) -> int:
        """Delete terminal jobs finished before ``now() - older_than``; returns how many."""
        return self.backend.cleanup(
            older_than=older_than,
            status=Status(status) if status is not None else None,
            batch_size=batch_size,
        )

    def stats(self) -> Stats:
        return self.backend.stats()

    def close(self) -> None:
        if self._backend is not None:
            self._backend.close()
