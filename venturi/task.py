"""Tasks: the ``@task`` decorator and the ``Task`` that enqueues a handler's calls.

Enqueueing (``delay``, ``apply_async``, ``delay_many``, and their awaited
forms ``adelay``, ``aapply_async``, ``adelay_many``) does every check
*before* any I/O (STYLE R15): the call is bound to the handler's signature
(``venturi.binding``, which also explains the payload's shape), the tier,
delay, expiry and dedup key are checked (``venturi.options``), and the payload is
encoded as strict JSON (``venturi.serialization``). A refused call raises a
typed ``EnqueueError`` and writes nothing.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import (
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    TypeVar,
    overload,
)

from venturi.batches import lazy_batches
from venturi.binding import Binding
from venturi.context import Context
from venturi.errors import ArgumentsMismatch, ConfigurationError, EnqueueError
from venturi.ids import new_id, new_ids
from venturi.job_template import JobTemplate
from venturi.key_options import LINK_ERROR_HEADER, callback_kind, claim_key
from venturi.merge import MergeFunction, keep_existing, resolver
from venturi.options import (
    DEFAULT_BACKOFF,
    DEFAULT_LEASE,
    DEFAULT_MAX_FAILURES,
    TaskOptions,
    check_fair_key_fits,
    to_timedelta,
    validate_dedup_key,
    validate_delay,
    validate_expires,
    validate_fair_key,
    validate_kind,
    validate_priority,
)
from venturi.refs import JobRef
from venturi.registry import AppLike, Registry, current_app
from venturi.task_writes import (
    awrite,
    awrite_alike,
    eager_of,
    with_source,
    write,
    write_alike,
    write_one,
)
from venturi.types import NewJob, Priority
from venturi.workflows import Enqueuer, Signature

__all__ = ["Task", "TaskDecorator", "default_registry", "task"]

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")


class Task(Generic[P, R]):
    """A registered handler and how to enqueue it.

    ``P`` is the handler's parameters without ``ctx``, so type checkers check
    ``delay(...)`` calls against the handler. Calling the task runs the handler
    synchronously in the caller's thread (``ctx`` is a fresh ``Context`` with
    ``job_id=None``); calling an ``async def`` task returns its coroutine.

    Attributes:
        kind: the job kind (``options.kind``, or the handler's module and qualname).
        options: the validated ``TaskOptions``, the one place the task's settings live.
        binding: the handler's signature and the JSON it is stored as (``Binding``).
    """

    def __init__(self, fn: Callable[..., R], options: TaskOptions, *, app: AppLike | None) -> None:
        if not callable(fn):
            raise ConfigurationError(f"a task handler must be callable, got {fn!r}")
        functools.update_wrapper(self, fn)
        self.fn = fn
        #: An ``async def`` handler: a worker awaits it on its event loop (ADR 0126).
        self.is_async: bool = inspect.iscoroutinefunction(fn)
        self.options = options
        self.kind: str = options.kind or validate_kind(
            f"{getattr(fn, '__module__', None)}.{getattr(fn, '__qualname__', repr(fn))}"
        )
        self.binding: Binding[R] = Binding(fn, kind=self.kind, carry=options.carry)
        self._app = app
        if options.schedule is not None and self.binding.required:
            raise ConfigurationError(
                f"task {self.kind!r} has a schedule, so it is enqueued without arguments, but "
                f"its handler requires {', '.join(sorted(self.binding.required))}"
            )
        parameters = list(inspect.signature(fn).parameters.values())
        for option in ("fair_key", "concurrency_key", "rate_key"):
            if getattr(options, option) is not None:
                check_fair_key_fits(
                    getattr(options, option),
                    parameters[1:] if self.binding.takes_context else parameters,
                    self.kind,
                    option,
                )
        if options.on_dead is not None:
            try:
                options.on_dead.binding.bind((), {"job_id": "", "kind": "", "note": None})
            except ArgumentsMismatch as exc:
                raise ConfigurationError(
                    f"on_dead of {self.kind!r}: {options.on_dead.kind!r} is enqueued with "
                    f"job_id, kind and note; its handler must take them ({exc})"
                ) from None
        #: The key function of a keyed task (ADR 0138); None: not keyed.
        self._claim_key = options.concurrency_key or options.rate_key
        #: What the jobs of calls without per-call options share; None: each needs ``new_job``.
        self._template = options.template(self.kind, keyed=self._claim_key is not None)

    def __repr__(self) -> str:
        return f"<Task {self.kind}>"

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the handler now, in this thread; no job is enqueued."""
        if self.binding.takes_context:
            return self.fn(self.binding.fresh_context(), *args, **kwargs)
        return self.fn(*args, **kwargs)

    # -- enqueue -------------------------------------------------------------------

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> JobRef[R]:
        """Enqueue a call with the task's defaults; see ``apply_async`` for the options."""
        template = self._template
        if template is None:
            return self.apply_async(args, kwargs)
        return write_one(self._current_app(), template, new_id(), self._payload(args, kwargs))

    def _payload(self, args: Sequence[Any], kwargs: Mapping[str, Any] | None) -> str:
        """``new_job``'s payload of a call: bound, encoded and checked."""
        binding = self.binding
        return binding.encode_payload(binding.bind(args, kwargs))

    def apply_async(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        countdown: timedelta | float | None = None,
        eta: datetime | None = None,
        priority: Priority | int | None = None,
        dedup_key: str | int | None = None,
        connection: object | None = None,
        expires: datetime | timedelta | float | None = None,
        link_error: Any = None,
    ) -> JobRef[R]:
        """Enqueue one call.

        Options:
            countdown: eligible after this delay (a timedelta or seconds, not negative).
            eta: eligible at this timezone-aware time (not with ``countdown``).
            priority: this job's tier instead of the task's.
            dedup_key: this job's dedup key instead of the task's ``dedup`` function.
            connection: a psycopg connection: enqueue inside the caller's
                transaction; the job exists exactly when it commits.
            expires: a timezone-aware time, or a positive timedelta (or seconds)
                from now, instead of the task's ``expires``: a job not started by
                then ends ``dead``, note ``expired``, and never runs (ADR 0135).
            link_error: a task or its signature (``handler.s()``), enqueued with
                ``job_id``, ``kind`` and ``note`` if this job ends ``dead``, instead
                of the task's ``on_dead`` (ADR 0138).

        Raises ``ArgumentsMismatch``, ``InvalidPayload``, ``InvalidPriority``,
        ``InvalidDelay`` (all ``EnqueueError``), with nothing written.
        """
        job = self.new_job(
            args,
            kwargs,
            countdown=countdown,
            eta=eta,
            priority=priority,
            dedup_key=dedup_key,
            expires=expires,
            link_error=link_error,
        )
        return self._write([job], connection)[0]

    def delay_many(
        self,
        items: Iterable[Mapping[str, Any] | Sequence[Any]],
        *,
        batch_size: int = 5000,
        connection: object | None = None,
    ) -> list[JobRef[R]]:
        """Enqueue many calls, one backend round trip per ``batch_size`` items.

        A mapping item is keyword arguments, a sequence item positional ones.
        Each batch is written atomically: a refused item writes nothing of its
        batch (the items are checked as the batch is sent, so the database
        starts on a large batch before its last item is checked); a refusal in
        a later batch leaves earlier batches enqueued (the error's note says
        how many). For all-or-nothing across batches pass ``connection=``
        inside your own transaction. Returns one ref per item, in order.
        """
        _check_batch_size(batch_size)
        refs: list[JobRef] = []
        template = self._template
        for batch in self._batches(items, batch_size):
            if template is None:
                refs.extend(self._write(batch, connection))
            else:
                refs.extend(self._write_alike(template, batch, connection))
        return refs

    def _batches(
        self, items: Iterable[Mapping[str, Any] | Sequence[Any]], batch_size: int
    ) -> Iterator[Sequence[Any]]:
        """``items`` in batches: of payloads made as the backend reads them when the task
        has a template (the jobs ``_write_alike`` writes), else of ``NewJob``s made whole
        first; the caller writes each before asking for the next, so the items of the
        batches yielded so far are the ones already enqueued."""
        call = f"delay_many({self.kind!r})"
        if self._template is not None:
            yield from lazy_batches(items, batch_size, self._payload_from_item, call)
            return
        for batch in lazy_batches(items, batch_size, self._new_job_from_item, call):
            yield list(batch)

    def _new_job_from_item(self, item: Mapping[str, Any] | Sequence[Any]) -> NewJob:
        if isinstance(item, Mapping):
            return self.new_job((), item)
        if isinstance(item, Sequence) and not isinstance(item, str | bytes | bytearray):
            return self.new_job(item)
        raise _not_an_item(self.kind, item)

    def _payload_from_item(self, item: Mapping[str, Any] | Sequence[Any]) -> str:
        """``new_job``'s payload of one ``delay_many`` item: bound, encoded and checked."""
        if type(item) is dict or isinstance(item, Mapping):
            return self._payload((), item)
        if isinstance(item, Sequence) and not isinstance(item, str | bytes | bytearray):
            return self._payload(item, None)
        raise _not_an_item(self.kind, item)

    def _current_app(self) -> AppLike:
        """The App this task enqueues through now: its own, else the current App."""
        return self._app if self._app is not None else current_app(self.kind)

    def enqueuer(self) -> Enqueuer:
        """Where this task's enqueues go now: an eager session of its App when one is
        active here (ADR 0120), else the App's backend. Part of the ``TaskLike`` seam
        (``venturi.workflows``): a group or workflow enqueues through it."""
        app = self._current_app()
        eager = eager_of(app)
        return eager if eager is not None else app.backend

    def _write(self, jobs: Sequence[NewJob], connection: object | None) -> list[JobRef]:
        return write(self._current_app(), jobs, connection)

    def _write_alike(
        self, template: JobTemplate, payloads: Sequence[str], connection: object | None
    ) -> list[JobRef]:
        """``write_alike`` of ``payloads`` with new ids (one batch's in one go)."""
        ids = new_ids(len(payloads))
        return write_alike(self._current_app(), template, ids, payloads, connection)

    async def _aenqueue(self, jobs: Sequence[NewJob], connection: object | None) -> list[JobRef]:
        return await awrite(self._current_app(), jobs, connection)

    async def _aenqueue_alike(
        self, template: JobTemplate, payloads: Sequence[str], connection: object | None
    ) -> list[JobRef]:
        """``_write_alike``, awaited."""
        ids = new_ids(len(payloads))
        return await awrite_alike(self._current_app(), template, ids, payloads, connection)

    def with_source(self, refs: list[JobRef]) -> list[JobRef]:
        """The refs, able to wait for their results through this task's App (ADR 0124),
        unless their enqueuer gave them a source already (an eager session). Part of
        the ``TaskLike`` seam (``venturi.workflows``)."""
        return with_source(refs, self._current_app())

    def new_job(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        countdown: timedelta | float | None = None,
        eta: datetime | None = None,
        priority: Priority | int | None = None,
        dedup_key: str | int | None = None,
        expires: datetime | timedelta | float | None = None,
        link_error: Any = None,
    ) -> NewJob:
        """Validate and encode one call into a ``NewJob``; no I/O.

        The building block of ``apply_async`` and ``delay_many``, and of
        backends' tests. Raises the same errors as ``apply_async``.
        """
        binding = self.binding
        options = self.options
        arguments = binding.bind(args, kwargs)
        payload = binding.encode_payload(arguments)
        tier = options.priority if priority is None else validate_priority(priority)
        delay, eta = validate_delay(countdown, eta)
        if options.debounce is not None and countdown is None and eta is None:
            delay = options.debounce  # a burst's first job waits too (ADR 0138)
        expires_in, expires_at = validate_expires(
            expires, default=options.expires, delay=delay, eta=eta
        )
        if dedup_key is not None:
            key: str | None = validate_dedup_key(dedup_key, self.kind, "dedup_key")
        elif options.dedup is not None:
            key = validate_dedup_key(
                options.dedup(**binding.with_defaults(arguments)), self.kind, "the dedup function"
            )
        else:
            key = None
        if options.fair_key is not None:
            fair_key = validate_fair_key(
                options.fair_key(**binding.with_defaults(arguments)), self.kind
            )
        elif self._claim_key is not None:
            # A keyed kind's key is stored where a fair kind's is (ADR 0138).
            fair_key = claim_key(self._claim_key, binding.with_defaults(arguments), self.kind)
        else:
            fair_key = None
        return NewJob(
            id=new_id(),
            kind=self.kind,
            payload=payload,
            priority=tier,
            delay=delay,
            eta=eta,
            dedup_key=key,
            merge=(
                resolver(self.options.merge, payload, self.kind, self.binding.encode_combined)
                if key is not None
                else None
            ),
            fair_key=fair_key,
            expires_in=expires_in,
            expires_at=expires_at,
            debounce=options.debounce if key is not None else None,
            headers=None if link_error is None else {LINK_ERROR_HEADER: callback_kind(link_error)},
        )

    # -- async enqueue (ADR 0122) ----------------------------------------------------

    async def adelay(self, *args: P.args, **kwargs: P.kwargs) -> JobRef[R]:
        """``delay``, awaited on the running event loop: ``ref = await send.adelay(...)``."""
        template = self._template
        if template is None:
            return await self.aapply_async(args, kwargs)
        return (await self._aenqueue_alike(template, [self._payload(args, kwargs)], None))[0]

    async def aapply_async(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        countdown: timedelta | float | None = None,
        eta: datetime | None = None,
        priority: Priority | int | None = None,
        dedup_key: str | int | None = None,
        connection: object | None = None,
        expires: datetime | timedelta | float | None = None,
        link_error: Any = None,
    ) -> JobRef[R]:
        """``apply_async``, awaited; ``connection`` is a ``psycopg.AsyncConnection``.

        The call is validated and encoded (``new_job``) before the first
        ``await``, so a refused call raises the same ``EnqueueError`` as
        ``apply_async`` and writes nothing. Without ``connection`` the job is
        written on the App's async pool for the running loop, opened on first
        use. With it, the job exists exactly when the caller's transaction
        commits; rolled back, there is no row and no wake-up.
        """
        job = self.new_job(
            args,
            kwargs,
            countdown=countdown,
            eta=eta,
            priority=priority,
            dedup_key=dedup_key,
            expires=expires,
            link_error=link_error,
        )
        return (await self._aenqueue([job], connection))[0]

    async def adelay_many(
        self,
        items: Iterable[Mapping[str, Any] | Sequence[Any]],
        *,
        batch_size: int = 5000,
        connection: object | None = None,
    ) -> list[JobRef[R]]:
        """``delay_many``, awaited: the same batches, validation and partial-write note."""
        _check_batch_size(batch_size)
        refs: list[JobRef[R]] = []
        template = self._template
        for batch in self._batches(items, batch_size):
            if template is None:
                refs.extend(await self._aenqueue(batch, connection))
            else:
                refs.extend(await self._aenqueue_alike(template, batch, connection))
        return refs

    # -- signatures (SPEC 5.4) --------------------------------------------------------

    def s(self, *args: Any, **kwargs: Any) -> Signature:
        """A deferred call that receives its parent's result as its first positional
        argument; checked against the handler now (``ArgumentsMismatch``, ``InvalidPayload``)."""
        return Signature.build(self, args, kwargs, immutable=False)

    def si(self, *args: Any, **kwargs: Any) -> Signature:
        """An immutable deferred call: it never receives a parent's result; checked now."""
        return Signature.build(self, args, kwargs, immutable=True)

    # -- retries -------------------------------------------------------------------

    def backoff(self, failure_count: int) -> timedelta:
        """The delay before retrying after the ``failure_count``-th failure (ADR 13).

        A backoff function that raises or returns something other than a
        non-negative delay is logged and replaced by the default exponential
        backoff, so a bug there never loses the job.
        """
        try:
            delay = to_timedelta(self.options.backoff(failure_count))
        except Exception:
            logger.exception("backoff of %s raised; using the default", self.kind)
            delay = None
        if delay is None or delay < timedelta(0):
            logger.warning(
                "backoff of %s gave no usable delay for failure %d; using the default",
                self.kind,
                failure_count,
                extra={"kind": self.kind},
            )
            return DEFAULT_BACKOFF(max(failure_count, 1))
        return delay


def _check_batch_size(batch_size: int) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise EnqueueError(f"batch_size must be a positive integer, got {batch_size!r}")


#: The registry of ``@venturi.task``: every App serves these tasks too.
default_registry: Registry[Task[Any, Any]] = Registry()


class TaskDecorator:
    """What ``@task(...)`` (and ``app.task(...)``) with options returns.

    Typed so that the task it makes is ``Task[P, R]`` of the handler's own
    parameters without ``ctx``: type checkers then check ``.delay()`` calls.
    """

    def __init__(
        self,
        options: TaskOptions,
        *,
        registry: Registry[Task[Any, Any]] | None = None,
        app: AppLike | None = None,
    ) -> None:
        self._options = options
        self._registry = default_registry if registry is None else registry
        self._app = app

    @overload
    def __call__(self, fn: Callable[Concatenate[Context, P], R], /) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...
    def __call__(self, fn: Callable[..., Any], /) -> Task[Any, Any]:
        """Build the task and register it; ``app=None`` enqueues through the current App."""
        created: Task[Any, Any] = Task(fn, self._options, app=self._app)
        self._registry.register(created)
        return created


@overload
def task(fn: Callable[Concatenate[Context, P], R], /) -> Task[P, R]: ...
@overload
def task(fn: Callable[P, R], /) -> Task[P, R]: ...
@overload
def task(
    *,
    kind: str | None = None,
    priority: Priority | int = Priority.NORMAL,
    dedup: Callable[..., str | int] | None = None,
    merge: MergeFunction = keep_existing,
    max_failures: int = DEFAULT_MAX_FAILURES,
    backoff: Callable[[int], timedelta] | timedelta | float = DEFAULT_BACKOFF,
    concurrency: int | None = None,
    lease: timedelta | float = DEFAULT_LEASE,
    carry: type | None = None,
    schedule: str | None = None,
    timezone: str = "UTC",
    time_limit: timedelta | float | None = None,
    global_concurrency: int | None = None,
    rate_limit: str | None = None,
    fair_key: Callable[..., str] | None = None,
    expires: timedelta | float | None = None,
    concurrency_key: Callable[..., str | int] | None = None,
    key_concurrency: int | None = None,
    rate_key: Callable[..., str | int] | None = None,
    limits: Sequence[str] = (),
    debounce: timedelta | float | None = None,
    on_dead: Task[Any, Any] | None = None,
) -> TaskDecorator: ...
def task(fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
    """Register a handler in the default registry (``@task`` or ``@task(...)``).

    Like Celery's ``shared_task``: every App serves it, and it enqueues through
    the current App (the most recently created one); before any App exists,
    ``.delay()`` raises ``NoCurrentApp``. Options are documented on
    ``TaskOptions`` and checked here, at decoration. Example::

        @task(kind="mail.send", priority=Priority.HIGH, dedup=lambda to, **_: to)
        def send(ctx: Context, to: str, subject: str) -> str: ...

        send.delay("a@x.org", subject="hi")
    """
    decorator = TaskDecorator(TaskOptions.parse(**options))
    if fn is not None:
        return decorator(fn)
    return decorator


def _not_an_item(kind: str, item: object) -> ArgumentsMismatch:
    return ArgumentsMismatch(
        f"{kind}: each item must be a mapping of keyword arguments or a sequence of "
        f"positional arguments, got {type(item).__qualname__}"
    )
