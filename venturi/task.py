"""Tasks: the ``@task`` decorator, options checked at decoration, and enqueueing.

A ``Task`` wraps a handler. Enqueueing (``delay``, ``apply_async``,
``delay_many``) binds the call to the handler's signature, checks the tier and
the delay, and encodes the payload *before* any I/O (STYLE R15): a refused
call raises a typed ``EnqueueError`` and writes nothing.

The payload of a job is a JSON object of the *named* arguments that were
passed (defaults are not stored, so a default changed in code applies to jobs
already queued). Positional-only parameters are stored by name too; a
``*args`` parameter is stored under its name as an array; extra keyword
arguments of a ``**kwargs`` parameter are stored at the top level, beside the
named ones (an extra keyword that collides with a parameter name is refused).

Limits that protect the database's btree indexes (an index entry must stay
under ~2.7 kB): a kind is at most ``MAX_KIND_BYTES`` and a dedup key at most
``MAX_DEDUP_KEY_BYTES`` bytes of UTF-8.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
import re
import reprlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, is_dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Concatenate, Final, Generic, ParamSpec, TypeVar, overload

from ulid import ULID

from venturi.backend import Backend
from venturi.backoff import Exponential
from venturi.context import Context
from venturi.errors import (
    ArgumentsMismatch,
    ConfigurationError,
    EnqueueError,
    InvalidDelay,
    InvalidKind,
    InvalidPayload,
    InvalidPriority,
)
from venturi.merge import Merge, MergeFunction, keep_existing
from venturi.registry import AppLike, Registry, current_app, default_registry
from venturi.serialization import (
    Converter,
    converter_for,
    decode_json,
    encode_json,
    resolve_annotations,
)
from venturi.types import JobRef, MergeAction, MergeDecision, MergeResolver, NewJob, Priority

logger = logging.getLogger(__name__)

P = ParamSpec("P")
R = TypeVar("R")

MAX_KIND_BYTES: Final = 255
MAX_DEDUP_KEY_BYTES: Final = 1024

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_ZERO: Final = timedelta(0)
_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
_CONTEXT_NAMES = frozenset({"Context", "venturi.Context", "venturi.context.Context"})
_DEFAULT_BACKOFF: Final = Exponential()


@dataclass(frozen=True, slots=True)
class Fixed:
    """A constant retry delay, from ``@task(backoff=timedelta(...))`` or a number of seconds."""

    delay: timedelta

    def __call__(self, failure_count: int) -> timedelta:
        return self.delay


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """A task's options, each validated by ``parse`` when the decorator runs.

    Options:
        kind: the job kind; default ``"<module>.<qualname>"`` of the handler.
            Non-empty, no control characters, at most 255 bytes (``InvalidKind``).
        priority: default tier, ``Priority.NORMAL`` (``InvalidPriority`` otherwise).
        dedup: ``f(**arguments) -> str`` (an int is accepted): the dedup key of
            a call, from its named arguments (defaults applied). ``None``: no dedup.
        merge: ``f(existing, incoming) -> Merge`` for a pending sibling with the
            same key (ADR 10); default: keep the existing job.
        max_failures: the backstop (ADR 13): the failure that reaches it goes
            ``dead``; default 20, at least 1.
        backoff: retry delay after the n-th failure: an ``Exponential``, any
            ``f(n) -> timedelta``, or a fixed ``timedelta``/seconds; default
            ``Exponential()`` (1 s doubling, equal jitter, capped at 1 h).
        concurrency: at most this many run at once per worker process (ADR 23);
            ``None`` (default) for no cap.
        lease: how long a claim holds before another worker may recover it
            (renewed while the handler runs, ADR 19); default one minute.
        carry: a dataclass type ``ctx.carry`` is decoded into (ADR 15).
        schedule: a cron expression; beat enqueues one job per tick (the
            handler must then need no arguments besides ``ctx``).
        timezone: the IANA zone ``schedule`` is read in; default ``"UTC"``.
    """

    kind: str | None = None
    priority: Priority = Priority.NORMAL
    dedup: Callable[..., object] | None = None
    merge: MergeFunction = keep_existing
    max_failures: int = 20
    backoff: Callable[[int], timedelta] = _DEFAULT_BACKOFF
    concurrency: int | None = None
    lease: timedelta = timedelta(minutes=1)
    carry: type | None = None
    schedule: str | None = None
    timezone: str = "UTC"

    @classmethod
    def parse(cls, **options: Any) -> TaskOptions:
        """Validate ``@task(...)`` options; raises a ``ConfigurationError`` (or
        ``InvalidKind`` / ``InvalidPriority``) naming the bad option."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(options.keys() - known)
        if unknown:
            raise ConfigurationError(
                f"unknown task option(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}"
            )
        values: dict[str, Any] = {}
        if options.get("kind") is not None:
            values["kind"] = validate_kind(options["kind"])
        if "priority" in options:
            values["priority"] = validate_priority(options["priority"])
        if options.get("dedup") is not None:
            values["dedup"] = _callable_option("dedup", options["dedup"])
        if "merge" in options:
            values["merge"] = _callable_option("merge", options["merge"])
        if "max_failures" in options:
            values["max_failures"] = _positive_int("max_failures", options["max_failures"])
        if "backoff" in options:
            values["backoff"] = _backoff_option(options["backoff"])
        if options.get("concurrency") is not None:
            values["concurrency"] = _positive_int("concurrency", options["concurrency"])
        if "lease" in options:
            values["lease"] = _lease_option(options["lease"])
        if options.get("carry") is not None:
            values["carry"] = _carry_option(options["carry"])
        if "timezone" in options:
            if not isinstance(options["timezone"], str):
                raise ConfigurationError(f"timezone must be a string, got {options['timezone']!r}")
            values["timezone"] = options["timezone"]
        if options.get("schedule") is not None:
            values["schedule"] = _schedule_option(
                options["schedule"], values.get("timezone", "UTC")
            )
        return cls(**values)


def validate_kind(kind: object) -> str:
    """A kind is stored verbatim and never spliced into SQL; it only has to be sane text."""
    if not isinstance(kind, str) or not kind:
        raise InvalidKind(kind, "must be a non-empty string")
    if _CONTROL.search(kind):
        raise InvalidKind(kind, "must not contain control characters")
    try:
        size = len(kind.encode())
    except UnicodeEncodeError:
        raise InvalidKind(kind, "must be valid UTF-8 (no lone surrogates)") from None
    if size > MAX_KIND_BYTES:
        raise InvalidKind(kind, f"must be at most {MAX_KIND_BYTES} bytes of UTF-8")
    return kind


def validate_priority(priority: object) -> Priority:
    """One of the three tiers (ADR 22): a ``Priority`` or the int 0, 1 or 2."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise InvalidPriority(priority)
    try:
        return Priority(priority)
    except ValueError:
        raise InvalidPriority(priority) from None


def _callable_option(name: str, value: object) -> Callable[..., Any]:
    if not callable(value):
        raise ConfigurationError(f"{name} must be callable, got {value!r}")
    return value


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be an integer of at least 1, got {value!r}")
    return value


def _seconds(value: object) -> timedelta | None:
    """A timedelta from a timedelta or a finite number of seconds; None if it is neither."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        try:
            return timedelta(seconds=value)
        except OverflowError:
            return None
    return None


def _lease_option(value: object) -> timedelta:
    lease = _seconds(value)
    if lease is None or lease <= _ZERO:
        raise ConfigurationError(f"lease must be a positive timedelta (or seconds), got {value!r}")
    return lease


def _backoff_option(value: object) -> Callable[[int], timedelta]:
    if isinstance(value, timedelta | int | float) and not isinstance(value, bool):
        delay = _seconds(value)
        if delay is None or delay < _ZERO:
            raise ConfigurationError(f"a fixed backoff must be a delay of 0 or more, got {value!r}")
        return Fixed(delay)
    if not callable(value):
        raise ConfigurationError(
            f"backoff must be Exponential(...), a callable failure_count -> timedelta, "
            f"or a fixed timedelta; got {value!r}"
        )
    return value


def _carry_option(value: object) -> type:
    if not (isinstance(value, type) and is_dataclass(value)):
        raise ConfigurationError(f"carry must be a dataclass type, got {value!r}")
    return value


def _schedule_option(schedule: object, timezone: str) -> str:
    if not isinstance(schedule, str):
        raise ConfigurationError(f"schedule must be a cron expression string, got {schedule!r}")
    from venturi.cron import validate_schedule

    validate_schedule(schedule, timezone)
    return schedule


def _is_context_annotation(annotation: object) -> bool:
    if annotation is Context:
        return True
    # A string under ``from __future__ import annotations`` (quoted once more if the
    # source quoted it); resolving it could fail at decoration, so match the name.
    return isinstance(annotation, str) and annotation.strip("'\"") in _CONTEXT_NAMES


class _Unquoted(str):
    """Shows a string annotation (``from __future__ import annotations``) as written."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


class Task(Generic[P, R]):
    """A registered handler and how to enqueue it.

    ``P`` is the handler's parameters without ``ctx``, so type checkers check
    ``delay(...)`` calls against the handler. Calling the task runs the handler
    synchronously in the caller's thread (``ctx`` is a fresh ``Context`` with
    ``job_id=None``).
    """

    def __init__(self, fn: Callable[..., R], options: TaskOptions, *, app: AppLike | None) -> None:
        if not callable(fn):
            raise ConfigurationError(f"a task handler must be callable, got {fn!r}")
        if inspect.iscoroutinefunction(fn):
            raise ConfigurationError(
                f"{fn!r} is a coroutine function; async handlers are not supported yet"
            )
        functools.update_wrapper(self, fn)
        self.fn = fn
        self.options = options
        self.kind: str = options.kind or validate_kind(
            f"{getattr(fn, '__module__', None)}.{getattr(fn, '__qualname__', repr(fn))}"
        )
        self.priority: Priority = options.priority
        self.max_failures: int = options.max_failures
        self.concurrency: int | None = options.concurrency
        self.lease: timedelta = options.lease
        self.carry_type: type | None = options.carry
        self.schedule: str | None = options.schedule
        self.timezone: str = options.timezone
        self._app = app
        self._dedup = options.dedup
        self._merge = options.merge
        self._backoff = options.backoff
        self._what = f"payload of {self.kind!r}"

        try:
            parameters = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"cannot read the signature of {fn!r}: {exc}") from exc
        first = parameters[0] if parameters else None
        self.takes_context: bool = (
            first is not None
            and first.kind in _POSITIONAL
            and (first.name == "ctx" or _is_context_annotation(first.annotation))
        )
        if self.takes_context:
            parameters = parameters[1:]
        self._parameters = parameters
        self._signature = inspect.Signature(parameters)
        self._parameter_names = frozenset(p.name for p in parameters)
        self._names = frozenset(
            p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        )
        self._required = frozenset(
            p.name
            for p in parameters
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        )
        self._defaults = {p.name: p.default for p in parameters if p.default is not p.empty}
        self._is_simple = all(p.kind in _NAMED for p in parameters)
        self._positional_names = tuple(p.name for p in parameters if p.kind in _POSITIONAL)
        self._var_keyword = next((p.name for p in parameters if p.kind is p.VAR_KEYWORD), None)
        self._var_positional = next(
            (p.name for p in parameters if p.kind is p.VAR_POSITIONAL), None
        )
        self._converters: dict[str, Converter] | None = None
        if self.schedule is not None and self._required:
            raise ConfigurationError(
                f"task {self.kind!r} has a schedule, so it is enqueued without arguments, but "
                f"its handler requires {', '.join(sorted(self._required))}"
            )

    def __repr__(self) -> str:
        return f"<Task {self.kind}>"

    def _shown_signature(self) -> str:
        """The signature (without ctx) for messages, string annotations unquoted."""
        return str(
            self._signature.replace(
                parameters=[
                    p.replace(annotation=_Unquoted(p.annotation))
                    if isinstance(p.annotation, str)
                    else p
                    for p in self._parameters
                ]
            )
        )

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        """Run the handler now, in this thread; no job is enqueued."""
        if self.takes_context:
            return self.fn(self._fresh_context(), *args, **kwargs)
        return self.fn(*args, **kwargs)

    def _fresh_context(self) -> Context:
        return Context(job_id=None, kind=self.kind, run_count=0, failure_count=0)

    # -- enqueue -------------------------------------------------------------------

    def delay(self, *args: P.args, **kwargs: P.kwargs) -> JobRef:
        """Enqueue a call with the task's defaults; see ``apply_async`` for the options."""
        return self.apply_async(args, kwargs)

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
    ) -> JobRef:
        """Enqueue one call.

        Options:
            countdown: eligible after this delay (a timedelta or seconds, not negative).
            eta: eligible at this timezone-aware time (not with ``countdown``).
            priority: this job's tier instead of the task's.
            dedup_key: this job's dedup key instead of the task's ``dedup`` function.
            connection: a psycopg connection: enqueue inside the caller's
                transaction; the job exists exactly when it commits.

        Raises ``ArgumentsMismatch``, ``InvalidPayload``, ``InvalidPriority``,
        ``InvalidDelay`` (all ``EnqueueError``), with nothing written.
        """
        job = self.new_job(
            args, kwargs, countdown=countdown, eta=eta, priority=priority, dedup_key=dedup_key
        )
        return self._backend().enqueue([job], connection=connection)[0]

    def delay_many(
        self,
        items: Iterable[Mapping[str, Any] | Sequence[Any]],
        *,
        batch_size: int = 5000,
        connection: object | None = None,
    ) -> list[JobRef]:
        """Enqueue many calls, one backend round trip per ``batch_size`` items.

        A mapping item is keyword arguments, a sequence item positional ones.
        Each batch is validated whole before it is written, and each batch is
        written atomically; a refusal in a later batch leaves earlier batches
        enqueued (the error's note says how many). For all-or-nothing across
        batches pass ``connection=`` inside your own transaction.
        Returns one ref per item, in order.
        """
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise EnqueueError(f"batch_size must be a positive integer, got {batch_size!r}")
        backend = self._backend()
        refs: list[JobRef] = []
        batch: list[NewJob] = []
        for index, item in enumerate(items):
            try:
                batch.append(self._new_job_from_item(item))
            except EnqueueError as exc:
                exc.add_note(
                    f"item {index} of delay_many({self.kind!r}); "
                    f"{len(refs)} job(s) of earlier batches were already enqueued"
                )
                raise
            if len(batch) == batch_size:
                refs.extend(backend.enqueue(batch, connection=connection))
                batch = []
        if batch:
            refs.extend(backend.enqueue(batch, connection=connection))
        return refs

    def _new_job_from_item(self, item: Mapping[str, Any] | Sequence[Any]) -> NewJob:
        if isinstance(item, Mapping):
            return self.new_job((), item)
        if isinstance(item, Sequence) and not isinstance(item, str | bytes | bytearray):
            return self.new_job(item)
        raise ArgumentsMismatch(
            f"{self.kind}: each item must be a mapping of keyword arguments or a sequence of "
            f"positional arguments, got {type(item).__qualname__}"
        )

    def _backend(self) -> Backend:
        app = self._app if self._app is not None else current_app(self.kind)
        return app.backend

    def new_job(
        self,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        *,
        countdown: timedelta | float | None = None,
        eta: datetime | None = None,
        priority: Priority | int | None = None,
        dedup_key: str | int | None = None,
    ) -> NewJob:
        """Validate and encode one call into a ``NewJob``; no I/O.

        The building block of ``apply_async`` and ``delay_many``, and of
        backends' tests. Raises the same errors as ``apply_async``.
        """
        arguments = self._bind(args, kwargs)
        payload = encode_json(arguments, what=self._what)
        tier = self.priority if priority is None else validate_priority(priority)
        delay, eta = _delay(countdown, eta)
        if dedup_key is not None:
            key: str | None = _dedup_key(dedup_key, self.kind, "dedup_key")
        elif self._dedup is not None:
            key = _dedup_key(
                self._dedup(**{**self._defaults, **arguments}), self.kind, "the dedup function"
            )
        else:
            key = None
        return NewJob(
            id=str(ULID()),
            kind=self.kind,
            payload=payload,
            priority=tier,
            delay=delay,
            eta=eta,
            dedup_key=key,
            merge=self._resolver(payload) if key is not None else None,
        )

    def _bind(self, args: Sequence[Any], kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
        """The call as named arguments (the payload), or ``ArgumentsMismatch``."""
        if type(args) is not tuple and (
            isinstance(args, str | bytes) or not isinstance(args, Sequence)
        ):
            raise ArgumentsMismatch(f"{self.kind}: args must be a list or tuple, got {args!r}")
        if kwargs is None:
            kwargs = {}
        elif type(kwargs) is not dict and not isinstance(kwargs, Mapping):
            raise ArgumentsMismatch(f"{self.kind}: kwargs must be a mapping, got {kwargs!r}")
        if self._is_simple:
            # The hot path: named parameters only, so binding is zip + checks; any
            # doubt goes to inspect's bind, which also words the error.
            arguments = dict(zip(self._positional_names, args, strict=False))
            if len(args) <= len(self._positional_names) and not (kwargs.keys() & arguments.keys()):
                arguments.update(kwargs)
                if self._required <= arguments.keys() <= self._names:
                    return arguments
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise ArgumentsMismatch(
                f"{self.kind}{self._shown_signature()} cannot take this call: {exc}"
            ) from None
        if self._is_simple:
            return bound.arguments
        arguments = {}
        for name, value in bound.arguments.items():
            if name == self._var_positional:
                arguments[name] = list(value)
                continue
            if name != self._var_keyword:
                arguments[name] = value
                continue
            for key, extra in value.items():
                if key in self._parameter_names or key in arguments:
                    raise ArgumentsMismatch(
                        f"{self.kind}: keyword {key!r} collides with a parameter name; "
                        "it could not be told apart in the stored payload"
                    )
                arguments[key] = extra
        return arguments

    def _resolver(self, payload: str) -> MergeResolver:
        """The closure the backend calls, under its dedup lock, with the sibling's payload."""
        merge = self._merge

        def resolve(existing: Mapping[str, Any]) -> MergeDecision:
            if merge is keep_existing:
                return MergeDecision(MergeAction.KEEP)
            decision = merge(dict(existing), decode_json(payload))
            if not isinstance(decision, Merge):
                raise EnqueueError(
                    f"the merge function of {self.kind!r} returned {decision!r}; return "
                    "Merge.keep(), Merge.replace(), Merge.combine(payload) or Merge.independent()"
                )
            if decision.action is MergeAction.REPLACE:
                return MergeDecision(MergeAction.REPLACE, payload)
            if decision.action is MergeAction.COMBINE:
                return MergeDecision(MergeAction.COMBINE, self._encode_combined(decision.payload))
            return MergeDecision(decision.action)

        return resolve

    def _encode_combined(self, payload: Mapping[str, Any] | None) -> str:
        if not isinstance(payload, Mapping):
            raise InvalidPayload(
                f"Merge.combine of {self.kind!r} needs a mapping of named arguments, "
                f"got {payload!r}"
            )
        self._rebuild(payload)
        return encode_json(dict(payload), what=f"combined payload of {self.kind!r}")

    # -- run -----------------------------------------------------------------------

    def invoke(self, ctx: Context | None, payload: object) -> R:
        """Call the handler with a stored payload (the worker's entry point).

        Rebuilds the arguments, converts values by the handler's annotations
        (see ``venturi.serialization``), and raises ``ArgumentsMismatch``
        *before* calling the handler when the payload no longer fits (code
        changed since enqueue). Whatever the handler raises propagates as is;
        use ``prepare`` to tell a mismatch from an ``ArgumentsMismatch`` the
        handler itself raised (e.g. from a bad ``.delay()`` of another task).
        """
        return self.prepare(ctx, payload)()

    def prepare(self, ctx: Context | None, payload: object) -> Callable[[], R]:
        """The handler bound to a stored payload, ready to call; ``ArgumentsMismatch`` if
        the payload no longer fits. ``ctx=None`` gives a handler that takes one a fresh
        context."""
        if not isinstance(payload, Mapping):
            shown = reprlib.repr(payload)
            raise ArgumentsMismatch(f"{self.kind}: the payload is not a JSON object: {shown}")
        args, kwargs = self._rebuild(payload)
        if self.takes_context:
            context = ctx if ctx is not None else self._fresh_context()
            return functools.partial(self.fn, context, *args, **kwargs)
        return functools.partial(self.fn, *args, **kwargs)

    def _rebuild(self, payload: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """Positional and keyword arguments from named ones, checked against the signature."""
        values = self._convert(payload)
        if self._is_simple:
            keys = values.keys()
            if self._required <= keys <= self._names:
                return [], values
            missing = sorted(self._required - keys)
            unexpected = sorted(keys - self._names)
            raise ArgumentsMismatch(
                f"{self.kind}{self._shown_signature()} does not fit the payload"
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; unexpected {', '.join(unexpected)}" if unexpected else "")
            )
        args, kwargs = self._split(values)
        try:
            self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise ArgumentsMismatch(
                f"{self.kind}{self._shown_signature()} does not fit the payload: {exc}"
            ) from None
        return args, kwargs

    def _split(self, values: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        remaining = dict(values)
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        # With values for *args, every parameter before it must be passed positionally.
        var_positional = self._var_positional
        as_positional = var_positional is not None and bool(remaining.get(var_positional))
        for p in self._parameters:
            if p.kind is p.POSITIONAL_ONLY or (p.kind is p.POSITIONAL_OR_KEYWORD and as_positional):
                if p.name in remaining:
                    args.append(remaining.pop(p.name))
                elif p.default is not p.empty:
                    args.append(p.default)
                else:
                    raise ArgumentsMismatch(f"{self.kind}: the payload is missing {p.name!r}")
            elif p.kind in _NAMED:
                if p.name in remaining:
                    kwargs[p.name] = remaining.pop(p.name)
            elif p.kind is p.VAR_POSITIONAL:
                extra = remaining.pop(p.name, [])
                if not isinstance(extra, list | tuple):
                    raise ArgumentsMismatch(f"{self.kind}: *{p.name} must be stored as an array")
                args.extend(extra)
        if remaining:
            if self._var_keyword is None:
                raise ArgumentsMismatch(
                    f"{self.kind}: unexpected argument(s) {', '.join(sorted(remaining))}"
                )
            kwargs.update(remaining)
        return args, kwargs

    def _convert(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        values = dict(payload)
        converters = self._converters
        if converters is None:
            converters = self._converters = self._build_converters()
        for name, convert in converters.items():
            if name in values:
                try:
                    values[name] = convert(values[name])
                except (TypeError, ValueError) as exc:
                    raise ArgumentsMismatch(
                        f"{self.kind}: argument {name!r} does not fit its annotation: {exc}"
                    ) from None
        return values

    def _build_converters(self) -> dict[str, Converter]:
        """Converters for named parameters, resolved on first use (names may be defined later)."""
        named = {
            p.name: p.annotation
            for p in self._parameters
            if p.annotation is not p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        }
        hints = resolve_annotations(self.fn, named)
        built = {name: converter_for(hint) for name, hint in hints.items()}
        return {name: c for name, c in built.items() if c is not None}

    # -- retries -------------------------------------------------------------------

    def backoff(self, failure_count: int) -> timedelta:
        """The delay before retrying after the ``failure_count``-th failure (ADR 13).

        A backoff function that raises or returns something other than a
        non-negative delay is logged and replaced by the default exponential
        backoff, so a bug there never loses the job.
        """
        try:
            delay = _seconds(self._backoff(failure_count))
        except Exception:
            logger.exception("backoff of %s raised; using the default", self.kind)
            delay = None
        if delay is None or delay < _ZERO:
            logger.warning(
                "backoff of %s gave no usable delay for failure %d; using the default",
                self.kind,
                failure_count,
                extra={"kind": self.kind},
            )
            return _DEFAULT_BACKOFF(max(failure_count, 1))
        return delay


def _delay(countdown: object, eta: object) -> tuple[timedelta, datetime | None]:
    """Validated ``(delay, eta)`` for a ``NewJob`` (ADR 12)."""
    if countdown is not None and eta is not None:
        raise InvalidDelay(countdown, "give either countdown or eta, not both")  # type: ignore[arg-type]
    if eta is not None:
        if not isinstance(eta, datetime):
            raise InvalidDelay(None, f"eta must be a datetime, got {eta!r}")
        if eta.utcoffset() is None:
            raise InvalidDelay(eta, "eta must be timezone-aware (e.g. datetime.now(UTC) + ...)")
        try:
            eta.astimezone(UTC)
        except OverflowError:
            raise InvalidDelay(
                eta, "eta is outside the years 1-9999 once converted to UTC"
            ) from None
        return _ZERO, eta
    if countdown is None:
        return _ZERO, None
    delay = _seconds(countdown)
    if delay is None:
        raise InvalidDelay(
            None, f"countdown must be a timedelta or a finite number of seconds, got {countdown!r}"
        )
    if delay < _ZERO:
        raise InvalidDelay(delay, "countdown must not be negative")
    if delay > _ZERO:
        try:
            datetime.now(UTC) + delay
        except OverflowError:
            raise InvalidDelay(delay, "countdown reaches beyond the year 9999") from None
    return delay, None


def _dedup_key(value: object, kind: str, source: str) -> str:
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidPayload(
            f"{source} of {kind!r} must give a str (or int) dedup key, got {value!r}"
        )
    key = value if isinstance(value, str) else str(value)
    if _CONTROL.search(key):
        raise InvalidPayload(f"dedup key {key!r} of {kind!r} contains control characters")
    try:
        size = len(key.encode())
    except UnicodeEncodeError:
        raise InvalidPayload(f"dedup key {key!r} of {kind!r} is not valid UTF-8") from None
    if size > MAX_DEDUP_KEY_BYTES:
        raise InvalidPayload(
            f"dedup key of {kind!r} is {size} bytes, over {MAX_DEDUP_KEY_BYTES}; "
            "hash it (e.g. sha256) to shorten it"
        )
    return key


def make_task(
    fn: Callable[..., Any], options: TaskOptions, *, registry: Registry, app: AppLike | None
) -> Task[Any, Any]:
    """Build a task and register it; ``app=None`` enqueues through the current App."""
    created: Task[Any, Any] = Task(fn, options, app=app)
    registry.register(created)
    return created


class TaskDecorator:
    """What ``@task(...)`` (and ``app.task(...)``) with options returns.

    Typed so that the task it makes is ``Task[P, R]`` of the handler's own
    parameters without ``ctx``: type checkers then check ``.delay()`` calls.
    """

    def __init__(
        self,
        options: TaskOptions,
        *,
        registry: Registry = default_registry,
        app: AppLike | None = None,
    ) -> None:
        self._options = options
        self._registry = registry
        self._app = app

    @overload
    def __call__(self, fn: Callable[Concatenate[Context, P], R], /) -> Task[P, R]: ...
    @overload
    def __call__(self, fn: Callable[P, R], /) -> Task[P, R]: ...
    def __call__(self, fn: Callable[..., Any], /) -> Task[Any, Any]:
        return make_task(fn, self._options, registry=self._registry, app=self._app)


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
    max_failures: int = 20,
    backoff: Callable[[int], timedelta] | timedelta | float = ...,
    concurrency: int | None = None,
    lease: timedelta | float = timedelta(minutes=1),
    carry: type | None = None,
    schedule: str | None = None,
    timezone: str = "UTC",
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
