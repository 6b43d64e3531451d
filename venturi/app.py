"""App: configuration, the task registry, backend ownership, and operations.

The composition root: the only product-layer module that builds the default
PostgreSQL adapter, lazily, so that constructing an App at import time of a
user's module opens no connection.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import timedelta
from typing import Any, Concatenate, ParamSpec, TypeVar, overload

from venturi.app_limits import SharedLimits
from venturi.backend import Backend
from venturi.context import Context
from venturi.durable_app import DurableMethods
from venturi.errors import ConfigurationError, InvalidArgument, JobNotFound, WorkflowNotFound
from venturi.events import Events
from venturi.kind_control import KindControlMethods
from venturi.naming import BEAT_ROLE, DEFAULT_PREFIX, Prefix
from venturi.options import TaskOptions, validate_age_after
from venturi.reads import ReadRouting, ReplicaBackend
from venturi.registry import Registry, set_current_app
from venturi.results import (
    DEFAULT_RESULT_MAX_BYTES,
    status_of,
    validate_result_max_bytes,
    wait_for_result,
)
from venturi.schedule import Schedule
from venturi.schedule_control import ScheduleControlMethods
from venturi.serialization import is_storable_text
from venturi.task import Task, TaskDecorator, default_registry
from venturi.types import (
    AppliedMigration,
    Cursor,
    JobDetail,
    JobRow,
    Leader,
    Page,
    Stats,
    Status,
    SummaryPage,
    Throughput,
    WorkerInfo,
    Workflow,
    WorkflowSummary,
)

__all__ = ["App"]

logger = logging.getLogger(__name__)

DATABASE_URL_ENV = "VENTURI_DATABASE_URL"
DIRECT_DATABASE_URL_ENV = "VENTURI_DIRECT_DATABASE_URL"
TRANSACTION_POOLING_ENV = "VENTURI_TRANSACTION_POOLING"
MAX_PAGE_SIZE = 1000

P = ParamSpec("P")
R = TypeVar("R")


def _job_id(job_id: str) -> str:
    """The canonical (upper-case) form of an id; one the database cannot even hold
    names no job and is refused before any SQL.

    ULIDs are case-insensitive (ADR 2 stores them upper-case), so an id typed or
    pasted in lower case finds its job.
    """
    if not isinstance(job_id, str) or not is_storable_text(job_id):
        raise JobNotFound(job_id)
    return job_id.upper()


def _status(value: Status | str | None) -> Status | None:
    if value is None or isinstance(value, Status):
        return value
    try:
        return Status(value)
    except ValueError:
        allowed = ", ".join(s.value for s in Status)
        raise InvalidArgument(f"unknown status {value!r}; use one of {allowed}") from None


class App(ReadRouting, SharedLimits, KindControlMethods, ScheduleControlMethods, DurableMethods):
    """One queue: a database (URL or embedded server), a prefix, and tasks.

    Control at run time (pausing kinds, overriding limits, stored schedules; ADR
    0139) comes from the two mixins, ``kind_control`` and ``schedule_control``.

    Options:
        database_url: a libpq URL. ``None`` reads ``$VENTURI_DATABASE_URL``,
            and without it starts (or joins) the embedded server under
            the user data dir, ``~/.local/share/venturi/`` (needs the ``embedded`` extra).
        prefix: the table-name prefix (ADR 6), validated here, before any SQL.
        direct_url: the server's own URL when ``database_url`` is a
            transaction-mode pooler such as PgBouncer (ADR 0123): LISTEN,
            leadership and migrations use it. ``None`` reads
            ``$VENTURI_DIRECT_DATABASE_URL``.
        transaction_pooling: ``database_url`` is a transaction-mode pooler;
            default: exactly when a direct URL is given, or
            ``$VENTURI_TRANSACTION_POOLING=1``. Without a direct URL, workers
            then poll for new jobs (every ``poll_interval``) instead of listening.
        backend: a ready ``Backend`` (tests, other adapters); overrides the settings above.
        set_as_current: make this the App that default-registry tasks
            (``@venturi.task``) enqueue through, like Celery's ``current_app``.
        result_max_bytes: the largest result (UTF-8 bytes of its JSON) stored,
            whatever the backend (ADR 0124; default 1 MiB); a larger one is
            not stored, the job still completes and its note says so.
        age_after: priority aging: its workers promote a pending job to HIGH
            once it has been visible this long (a timedelta or seconds), so a
            stream of HIGH work never starves a LOW job. ``None`` (default):
            claim order is tier then age, exactly.
        read_url: a read replica of the server: job and stats reads that may lag go
            there, nothing else does (``venturi.reads``, ADR 0140). ``None`` reads
            ``$VENTURI_READ_DATABASE_URL``; without it every read goes to the primary.

    Example::

        app = venturi.App("postgresql://localhost/mydb")
        app.migrate()
    """

    def __init__(
        self,
        database_url: str | None = None,
        prefix: str = DEFAULT_PREFIX,
        *,
        direct_url: str | None = None,
        transaction_pooling: bool | None = None,
        backend: Backend | None = None,
        set_as_current: bool = True,
        result_max_bytes: int = DEFAULT_RESULT_MAX_BYTES,
        age_after: timedelta | float | None = None,
        read_url: str | None = None,
    ) -> None:
        self.prefix = Prefix.parse(prefix).value
        self.result_max_bytes = validate_result_max_bytes(result_max_bytes)
        self.age_after = validate_age_after(age_after)
        #: The URL given, then the one resolved (``database_url``).
        self._database_url = database_url
        self._database_url_lock = threading.Lock()
        self.direct_url = direct_url
        self.transaction_pooling = transaction_pooling
        self.registry: Registry[Task[Any, Any]] = Registry()
        self._declared_limits = {}
        self._schedules: list[Schedule] = []
        self._backend = backend
        self._backend_lock = threading.Lock()
        #: Events of this App's jobs, workers and beat (``venturi.events``, ADR 0127).
        self.events = Events()
        self._init_reads(read_url)
        if set_as_current:
            set_current_app(self)

    def override(
        self,
        *,
        database_url: str | None = None,
        prefix: str | None = None,
        direct_url: str | None = None,
        transaction_pooling: bool | None = None,
        read_url: str | None = None,
    ) -> None:
        """Point this App at other settings (the CLI's ``--database-url``, ``--prefix``,
        ``--direct-url``, ``--transaction-pooling``, ``--read-url``).

        Only before its backend exists: once built, connections are open on the old ones.
        """
        if self._backend is not None or self._replica is not None:
            raise ConfigurationError(
                "cannot change database_url/prefix of an App whose backend already exists "
                "(built with backend=, or used before the override)"
            )
        if prefix is not None:
            self.prefix = Prefix.parse(prefix).value
        if database_url is not None:
            self._database_url = database_url
        if direct_url is not None:
            self.direct_url = direct_url
        if transaction_pooling is not None:
            self.transaction_pooling = transaction_pooling
        if read_url is not None:
            self._read_url = read_url

    @property
    def database_url(self) -> str:
        """The libpq URL this App connects to; read-only (``override`` changes it while
        the backend does not exist yet).

        The URL given (``App(database_url)``, ``override``), else
        ``$VENTURI_DATABASE_URL``, else the embedded server's. The first read (or the
        backend's first use) resolves it, and later reads and the backend use that
        one: with neither a URL nor the variable, that first read starts (or joins)
        the embedded server (the ``embedded`` extra), as the backend's first use
        would. An App built with ``backend=`` and no URL has none: reading it raises
        ``ConfigurationError``.
        """
        url = self._database_url
        if not url:
            with self._database_url_lock:
                url = self._database_url
                if not url:
                    if self._backend is not None:
                        raise ConfigurationError(
                            "this App was built with backend= and no database_url: it has no URL"
                        )
                    from venturi.postgres.embedded import embedded_database_url

                    url = os.environ.get(DATABASE_URL_ENV) or embedded_database_url()
                    self._database_url = url
        return url

    @property
    def backend(self) -> Backend:
        """Built on first use; the lock keeps threads racing to first use on one pool."""
        if self._backend is None:
            with self._backend_lock:
                if self._backend is None:
                    self._backend = self._build_backend()
        return self._backend

    def _build_backend(self) -> Backend:
        from venturi.postgres import PostgresBackend

        url = self.database_url
        direct_url = self.direct_url or os.environ.get(DIRECT_DATABASE_URL_ENV) or None
        pooling = self.transaction_pooling
        if pooling is None and os.environ.get(TRANSACTION_POOLING_ENV):
            pooling = os.environ[TRANSACTION_POOLING_ENV].strip().lower() in ("1", "true", "yes")
        return PostgresBackend(
            url,
            prefix=self.prefix,
            direct_url=direct_url,
            transaction_pooling=pooling,
        )

    def _connect_replica(self, url: str) -> tuple[ReplicaBackend, str]:
        from venturi.postgres import PostgresBackend
        from venturi.postgres.driver_errors import server_address

        return PostgresBackend(url, prefix=self.prefix, pool_size=4), server_address(url)

    @overload
    def task(self, fn: Callable[Concatenate[Context, P], R], /) -> Task[P, R]: ...
    @overload
    def task(self, fn: Callable[P, R], /) -> Task[P, R]: ...
    @overload
    def task(self, /, **options: Any) -> TaskDecorator: ...
    def task(
        self, fn: Callable[..., Any] | None = None, /, **options: Any
    ) -> Task[Any, Any] | TaskDecorator:
        """Register a task on this App only (``@venturi.task`` registers on every App)."""
        parsed = TaskOptions.parse(**options)
        self._check_limits_declared(parsed)
        decorator = TaskDecorator(parsed, registry=self.registry, app=self)
        return decorator(fn) if fn is not None else decorator

    def tasks(self) -> Mapping[str, Task[Any, Any]]:
        """Every task this App serves: its own plus the default registry's."""
        return {**default_registry.tasks, **self.registry.tasks}

    def served_kinds(self, kinds: Collection[str] | None, *, who: str) -> list[str]:
        """The kinds ``who`` (a worker, a drain) serves, sorted: every task's, or ``kinds``.

        An unknown kind is a ``ConfigurationError``: a typo would otherwise serve nothing.
        """
        known = self.tasks()
        if kinds is None:
            return sorted(known)
        unknown = sorted(set(kinds) - set(known))
        if unknown:
            raise ConfigurationError(
                f"{who} was asked for kinds no task declares: {', '.join(unknown)}"
            )
        return sorted(set(kinds))

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
        declared = [Schedule.from_task(t) for t in self.tasks().values() if t.options.schedule]
        return declared + list(self._schedules)

    def migrate(self) -> list[AppliedMigration]:
        """Bring the schema up to date (ADR 24); safe to call from many processes at once."""
        return self.backend.migrate()

    def job(self, job_id: str, *, fresh: bool = False) -> JobDetail:
        """The row and its journal timeline, oldest entry first, and a durable job's
        recorded steps and the events sent to it (ADR 0137): from the read replica when
        there is one, unless ``fresh`` (then from the primary, as of now)."""
        reads = self.backend if fresh else self.reads
        detail = reads.get_job(_job_id(job_id))
        if detail is None:
            raise JobNotFound(job_id)
        return self._with_steps(detail)

    def jobs(
        self,
        *,
        status: Status | str | None = None,
        kind: str | None = None,
        limit: int = 50,
        after: Cursor | None = None,
    ) -> Page:
        """One page of jobs, newest first; pass ``page.next`` as ``after`` for the next one."""
        if kind is not None and not is_storable_text(kind):
            raise InvalidArgument(f"kind {kind!r} is not text PostgreSQL can hold")
        if not 1 <= limit <= MAX_PAGE_SIZE:
            raise InvalidArgument(f"limit must be between 1 and {MAX_PAGE_SIZE}, got {limit}")
        return self.reads.list_jobs(status=_status(status), kind=kind, limit=limit, after=after)

    def retry(self, job_id: str, *, reset_steps: bool = False) -> JobRow:
        """Make a ``dead`` job (cancelled ones too) pending again, eligible now, with a
        fresh failure budget and no cancellation request.

        A durable job resumes after its last recorded step; ``reset_steps=True``
        deletes its recorded steps in the same transaction, so it starts over (the
        events sent to it are kept; ADR 0137)."""
        if reset_steps:
            return self._retry_from_start(_job_id(job_id))
        return self.backend.retry_job(_job_id(job_id))

    def cancel(self, job_id: str) -> JobRow:
        """Cancel a job: a ``pending`` one turns ``dead`` at once (note ``cancelled``).

        A ``claimed`` (running) one gets a cancellation request and is returned
        still claimed, ``cancel_requested_at`` set: its worker learns of it at
        its next lease renewal (within a third of the task's lease), the
        handler sees ``ctx.is_cancelled()``, and the run ends ``dead``, note
        ``cancelled``, by the handler or, one renewal interval later, by the
        worker (ADR 0121). A run that completes before that stays completed.
        Raises ``InvalidState`` for a terminal job, ``JobNotFound``.
        """
        return self.backend.cancel_job(_job_id(job_id))

    def cleanup(
        self, *, older_than: timedelta, status: Status | str | None = None, batch_size: int = 1000
    ) -> int:
        """Delete terminal jobs finished before ``now() - older_than``; returns how many."""
        parsed = _status(status)
        if parsed is not None and not parsed.is_terminal:
            raise InvalidArgument(f"cleanup deletes terminal jobs only, not {parsed.value!r} ones")
        if older_than < timedelta(0):
            raise InvalidArgument(f"older_than must not be negative, got {older_than}")
        if batch_size < 1:
            raise InvalidArgument(f"batch_size must be at least 1, got {batch_size}")
        return self.backend.cleanup(older_than=older_than, status=parsed, batch_size=batch_size)

    def stats(self) -> Stats:
        return self.reads.stats()

    def close(self) -> None:
        """Close the backend's pools, the async enqueue pools included (ADR 0122).

        From sync code this closes everything before it returns. Called on a
        running event loop it cannot wait for that loop's async pool, which then
        closes as soon as the caller yields: in async code, ``await app.aclose()``.
        """
        if self._backend is not None:
            self._backend.close()
        self._close_replica()

    async def aclose(self) -> None:
        """``close`` for async code: awaits the running loop's async pool, then the rest
        (in a thread, so the loop is never blocked)."""
        if self._backend is not None:
            await self._backend.aclose()
        await self._aclose_replica()

    def check_schema(self) -> str:
        """Fail now, with one clear error, if this App's queue cannot work (ADR 0118).

        Raises ``SchemaMissing`` for an unmigrated prefix, ``DatabaseRefused``
        for a database that does not exist or a login refused, and
        ``BackendUnavailable`` for an outage. Returns where the database is
        (``host:port/dbname``, no password). ``Worker`` and ``Beat`` call it as
        they start.
        """
        return self.backend.check_schema()

    def throughput(self, window: timedelta = timedelta(hours=1)) -> Throughput:
        """Completed and dead jobs per kind and minute over the last ``window`` (1 min to 1 day)."""
        if not timedelta(minutes=1) <= window <= timedelta(days=1):
            raise InvalidArgument(f"window must be between 1 minute and 1 day, got {window}")
        return self.reads.throughput(window)

    def job_summaries(
        self,
        *,
        status: Status | str | None = None,
        kind: str | None = None,
        note: str | None = None,
        limit: int = 50,
        after: Cursor | None = None,
    ) -> SummaryPage:
        """Like ``jobs``, each with its last journal entry; ``note`` keeps jobs whose last
        note contains that text (case-insensitive)."""
        parsed = _status(status)
        kind, note = _filter_text("kind", kind), _filter_text("note", note)
        if not 1 <= limit <= MAX_PAGE_SIZE:
            raise InvalidArgument(f"limit must be between 1 and {MAX_PAGE_SIZE}, got {limit}")
        return self.reads.list_job_summaries(
            status=parsed, kind=kind, note=note, limit=limit, after=after
        )

    def count_jobs(
        self,
        *,
        status: Status | str | None = None,
        kind: str | None = None,
        note: str | None = None,
    ) -> int:
        """How many jobs ``job_summaries`` with these filters would list, over all pages."""
        parsed = _status(status)
        kind, note = _filter_text("kind", kind), _filter_text("note", note)
        return self.reads.count_jobs(status=parsed, kind=kind, note=note)

    def retry_matching(
        self, *, kind: str | None = None, note: str | None = None, batch_size: int = 1000
    ) -> int:
        """``retry`` every dead job matching the filters, in batches; returns how many."""
        return _change_matching(self.backend.retry_matching, kind, note, batch_size)

    def cancel_matching(
        self, *, kind: str | None = None, note: str | None = None, batch_size: int = 1000
    ) -> int:
        """``cancel`` every pending job matching the filters, in batches; returns how many."""
        return _change_matching(self.backend.cancel_matching, kind, note, batch_size)

    def workers(self) -> list[WorkerInfo]:
        """The live workers of this prefix, newest started first (ADR 0119).

        Each running Worker registers at start, heartbeats on its lease
        renewal cadence and deregisters at stop; one that died without
        deregistering drops out of this list once its entry expires (one
        shortest lease of its kinds after its last heartbeat, at least 2 s).
        """
        return self.backend.list_workers()

    def unserved_kinds(self) -> list[str]:
        """Kinds with due pending jobs that no live worker serves, sorted (ADR 0119).

        Such jobs wait until a worker that knows their kind runs: a task
        module not imported by any worker, or a ``--kinds`` list that leaves
        the kind out. Workers warn about them in their log too.
        """
        return self.backend.unserved_kinds()

    # -- results (ADR 0124) ---------------------------------------------------------

    def result(self, job_id: str, timeout: float | None = 0) -> Any:
        """The result of job ``job_id``, waiting up to ``timeout`` s for it to end
        (0: do not wait; None: no limit).

        Raises ``JobFailed`` (it ended dead: its id and note), ``ResultTimeout``
        (a ``TimeoutError``: not terminal in time), ``JobNotFound`` (no such job,
        or cleaned up), ``ResultUnavailable`` (completed over ``result_max_bytes``).
        """
        return wait_for_result(self.backend, _job_id(job_id), timeout)

    async def aresult(self, job_id: str, timeout: float | None = 0) -> Any:
        """``result``, awaited: the wait runs in a thread of the loop's default executor,
        so the event loop is never blocked."""
        return await asyncio.to_thread(self.result, job_id, timeout)

    def status(self, job_id: str) -> Status:
        """The job's status now; ``JobNotFound`` when there is no such job."""
        return status_of(self.backend, _job_id(job_id))

    # -- workflows (ADR 0125) -------------------------------------------------------

    def workflow(self, workflow_id: str) -> Workflow:
        """Every step of a workflow (``ref.id`` of a chain's or chord's ``delay()``), in
        position order, each with its state and parents; ``WorkflowNotFound`` when it
        has no step left (no such workflow, or every step cleaned up)."""
        if not isinstance(workflow_id, str) or not is_storable_text(workflow_id):
            raise WorkflowNotFound(workflow_id)
        found = self.reads.get_workflow(workflow_id.upper())
        if found is None:
            raise WorkflowNotFound(workflow_id)
        return found

    # -- the active beat (ADR 0131) ---------------------------------------------------

    def active_beat(self) -> Leader | None:
        """The Beat that is the active scheduler of this prefix now, or None when no
        Beat runs (then no schedule is enqueued): its ``host:pid``, since when, and
        its database session. Read from the leadership lock itself, so a Beat that
        died is not shown once its session ended."""
        return self.backend.leader(BEAT_ROLE)

    # -- recent workflows (ADR 0131) ----------------------------------------------------

    def workflows(self, *, limit: int = 50, before: str | None = None) -> list[WorkflowSummary]:
        """The newest workflows first, each with its steps counted by state; pass the
        last one's ``id`` as ``before`` for the next page."""
        if not 1 <= limit <= MAX_PAGE_SIZE:
            raise InvalidArgument(f"limit must be between 1 and {MAX_PAGE_SIZE}, got {limit}")
        if before is not None:
            before = _filter_text("before", before)
        return self.reads.list_workflows(limit=limit, before=before)

    def workflow_of(self, job_id: str) -> Workflow | None:
        """The workflow job ``job_id`` (or a step not yet a job) is a step of; None for a
        plain job or an unknown id."""
        if not isinstance(job_id, str) or not is_storable_text(job_id):
            return None
        workflow_id = self.reads.workflow_id_of(job_id.upper())
        if workflow_id is None:
            return None
        return self.reads.get_workflow(workflow_id)


def _filter_text(name: str, value: str | None) -> str | None:
    """A filter value PostgreSQL can compare; an empty one would match everything silently."""
    if value is None:
        return None
    if not isinstance(value, str) or not value or not is_storable_text(value):
        raise InvalidArgument(f"{name} filter {value!r} must be non-empty text without NUL")
    return value


def _change_matching(
    change: Callable[..., int], kind: str | None, note: str | None, batch_size: int
) -> int:
    """A bulk change by filter, validated before any SQL, one bounded transaction at a
    time until a batch comes back short."""
    kind, note = _filter_text("kind", kind), _filter_text("note", note)
    if batch_size < 1:
        raise InvalidArgument(f"batch_size must be at least 1, got {batch_size}")
    total = 0
    while True:
        changed = change(kind=kind, note=note, batch_size=batch_size)
        total += changed
        if changed < batch_size:
            return total
