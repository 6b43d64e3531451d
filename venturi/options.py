"""Task options and every check a task's configuration or a call's options must pass.

``TaskOptions.parse`` checks ``@task(...)`` at decoration; the ``validate_*``
functions check what ``apply_async`` takes per call (tier, delay, expiry, dedup key).
Both fail before any I/O (STYLE R15) with a typed error naming the bad value.

Limits that protect the database's btree indexes (an index entry must stay
under ~2.7 kB): a kind is at most ``MAX_KIND_BYTES`` and a dedup key at most
``MAX_DEDUP_KEY_BYTES`` bytes of UTF-8.

A fair key (ADR 0129) is checked twice: the function's signature against the
handler's at decoration (``check_fair_key_fits``), its value at every enqueue
(``validate_fair_key``); it is at most ``MAX_FAIR_KEY_BYTES``, since it sits in
the fair claim's index beside the kind.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields, is_dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from venturi.backoff import Exponential, Fixed
from venturi.errors import (
    ConfigurationError,
    InvalidDelay,
    InvalidKind,
    InvalidPayload,
    InvalidPriority,
)
from venturi.job_template import JobTemplate
from venturi.key_options import parse_key_options
from venturi.merge import MergeFunction, keep_existing
from venturi.serialization import is_storable_text
from venturi.types import Priority, RateLimit

__all__ = [
    "DEFAULT_BACKOFF",
    "DEFAULT_LEASE",
    "DEFAULT_MAX_FAILURES",
    "MAX_DEDUP_KEY_BYTES",
    "MAX_FAIR_KEY_BYTES",
    "MAX_KIND_BYTES",
    "TaskOptions",
    "check_fair_key_fits",
    "parse_rate_limit",
    "to_timedelta",
    "validate_age_after",
    "validate_dedup_key",
    "validate_delay",
    "validate_expires",
    "validate_fair_key",
    "validate_kind",
    "validate_priority",
]

MAX_KIND_BYTES: Final = 255
MAX_DEDUP_KEY_BYTES: Final = 1024
MAX_FAIR_KEY_BYTES: Final = 255

#: The backstop of a task that declares none (ADR 13).
DEFAULT_MAX_FAILURES: Final = 20
#: How long a claim holds when the task declares no ``lease`` (ADR 19).
DEFAULT_LEASE: Final = timedelta(minutes=1)
#: The retry delay of a task that declares no ``backoff``, and the fallback of a broken one.
DEFAULT_BACKOFF: Final = Exponential()

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_ZERO: Final = timedelta(0)


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
        time_limit: the longest a run may take (a positive timedelta or
            seconds); past it the worker records the run ``retried`` (``dead``
            at the backstop) with note ``time limit exceeded`` and discards
            the handler's late outcome (ADR 0121). ``None`` (default): no limit.
        global_concurrency: at most this many jobs of the kind claimed at once
            across every worker of the prefix (ADR 0128); ``None`` (default): none.
        rate_limit: at most this many starts per period across every worker of
            the prefix, ``"<n>/s"``, ``"<n>/m"`` or ``"<n>/h"`` (ADR 0128).
        fair_key: ``f(**arguments) -> str``: the key (a tenant, an account) a
            call's claims rotate by within the kind, so one key's backlog never
            starves another key's jobs (ADR 0129). Called like ``dedup``, so it
            must accept the handler's arguments by name (``lambda tenant, **_:
            tenant``), checked at decoration. ``None`` (default): plain claims.
        expires: the default expiry of the task's jobs, a positive timedelta (or
            seconds) counted from when each job is due (its ``eta``, or the end
            of its countdown): a job not started by then ends ``dead``, note
            ``expired``, and never runs (ADR 0135). A call's ``expires=``
            replaces it. ``None`` (default): jobs never expire.
        concurrency_key: ``f(**arguments) -> str | int``: the key (a tenant, an
            account) ``key_concurrency`` counts by (ADR 0138); called like ``dedup``.
        key_concurrency: at most this many jobs of one key claimed at once across
            every worker of the prefix (default 1 with ``concurrency_key``).
        rate_key: ``f(**arguments) -> str | int``: ``rate_limit`` holds per key.
        limits: names of shared limits (``app.limit(name, ...)``) the jobs count against.
        debounce: with ``dedup``, an enqueue merging into a pending sibling moves its
            start to now + ``debounce`` (and a new job starts ``debounce`` from now).
        on_dead: a task enqueued with ``job_id``, ``kind`` and ``note`` when a job of
            this task ends ``dead``, in the transaction that records the death.
    """

    kind: str | None = None
    priority: Priority = Priority.NORMAL
    dedup: Callable[..., object] | None = None
    merge: MergeFunction = keep_existing
    max_failures: int = DEFAULT_MAX_FAILURES
    backoff: Callable[[int], timedelta] = DEFAULT_BACKOFF
    concurrency: int | None = None
    lease: timedelta = DEFAULT_LEASE
    carry: type | None = None
    schedule: str | None = None
    timezone: str = "UTC"
    time_limit: timedelta | None = None
    global_concurrency: int | None = None
    rate_limit: RateLimit | None = None
    fair_key: Callable[..., object] | None = None
    expires: timedelta | None = None
    concurrency_key: Callable[..., object] | None = None
    key_concurrency: int | None = None
    rate_key: Callable[..., object] | None = None
    limits: tuple[str, ...] = ()
    debounce: timedelta | None = None
    on_dead: Any = None

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
            values["lease"] = _positive_delay("lease", options["lease"])
        if options.get("carry") is not None:
            values["carry"] = _carry_option(options["carry"])
        if "timezone" in options:
            if not isinstance(options["timezone"], str):
                raise ConfigurationError(f"timezone must be a string, got {options['timezone']!r}")
            values["timezone"] = options["timezone"]
        if options.get("time_limit") is not None:
            values["time_limit"] = _positive_delay("time_limit", options["time_limit"])
        if options.get("expires") is not None:
            values["expires"] = _positive_delay("expires", options["expires"])
            if _is_beyond_year_9999(values["expires"]):
                raise ConfigurationError("expires reaches beyond the year 9999")
        if options.get("global_concurrency") is not None:
            values["global_concurrency"] = _positive_int(
                "global_concurrency", options["global_concurrency"]
            )
        if options.get("rate_limit") is not None:
            values["rate_limit"] = parse_rate_limit(options["rate_limit"])
        if options.get("fair_key") is not None:
            values["fair_key"] = _fair_key_option(options["fair_key"], values)
        parse_key_options(options, values)
        if options.get("schedule") is not None:
            values["schedule"] = _schedule_option(
                options["schedule"], values.get("timezone", "UTC")
            )
        return cls(**values)

    def template(self, kind: str, *, keyed: bool) -> JobTemplate | None:
        """The job template of this task's calls that take every default: the tier,
        delay and expiry ``Task.new_job`` gives such a call; None when the options need
        each call's arguments (a dedup, fair key or claim key function: ``keyed``)."""
        if self.dedup is not None or self.fair_key is not None or keyed:
            return None
        delay, eta = validate_delay(None, None)
        expires_in, _ = validate_expires(None, default=self.expires, delay=delay, eta=eta)
        return JobTemplate(kind, self.priority, delay, expires_in)


def validate_kind(kind: object) -> str:
    """A kind is stored verbatim and never spliced into SQL; it only has to be sane text."""
    if not isinstance(kind, str) or not kind:
        raise InvalidKind(kind, "must be a non-empty string")
    if _CONTROL.search(kind):
        raise InvalidKind(kind, "must not contain control characters")
    if not is_storable_text(kind):
        raise InvalidKind(kind, "must be valid UTF-8 (no lone surrogates)")
    if len(kind.encode()) > MAX_KIND_BYTES:
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


def validate_delay(countdown: object, eta: object) -> tuple[timedelta, datetime | None]:
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
    delay = to_timedelta(countdown)
    if delay is None:
        raise InvalidDelay(
            None, f"countdown must be a timedelta or a finite number of seconds, got {countdown!r}"
        )
    if delay < _ZERO:
        raise InvalidDelay(delay, "countdown must not be negative")
    if delay > _ZERO and _is_beyond_year_9999(delay):
        raise InvalidDelay(delay, "countdown reaches beyond the year 9999")
    return delay, None


def validate_expires(
    expires: object, *, default: timedelta | None, delay: timedelta, eta: datetime | None
) -> tuple[timedelta | None, datetime | None]:
    """A call's validated expiry as ``(expires_in, expires_at)`` for a ``NewJob`` (ADR 0135).

    ``expires`` is a timezone-aware time, or a positive timedelta (or seconds)
    from the enqueue, as Celery's; ``None`` takes the task's ``default``, which
    counts from when the job is due: its (validated) ``eta``, else the end of
    its ``delay``. ``InvalidDelay`` for anything else.
    """
    if expires is None:
        if default is None:
            return None, None
        if eta is None:
            return delay + default, None
        try:
            return None, eta + default
        except OverflowError:
            raise InvalidDelay(eta, "eta plus the task's expires is beyond the year 9999") from None
    if isinstance(expires, datetime):
        if expires.utcoffset() is None:
            raise InvalidDelay(
                expires, "expires must be timezone-aware (e.g. datetime.now(UTC) + ...)"
            )
        try:
            expires.astimezone(UTC)
        except OverflowError:
            raise InvalidDelay(
                expires, "expires is outside the years 1-9999 once converted to UTC"
            ) from None
        return None, expires
    expires_in = to_timedelta(expires)
    if expires_in is None:
        raise InvalidDelay(
            None,
            "expires must be a datetime, a timedelta or a finite number of seconds, "
            f"got {expires!r}",
        )
    if expires_in <= _ZERO:
        raise InvalidDelay(expires_in, "expires must be positive (a time from now)")
    if _is_beyond_year_9999(expires_in):
        raise InvalidDelay(expires_in, "expires reaches beyond the year 9999")
    return expires_in, None


def _is_beyond_year_9999(delay: timedelta) -> bool:
    """Whether now + ``delay`` is past what a datetime (and so the database) can hold."""
    try:
        datetime.now(UTC) + delay
    except OverflowError:
        return True
    return False


def validate_dedup_key(value: object, kind: str, source: str) -> str:
    """A dedup key from ``source`` (named in the error): text of at most ``MAX_DEDUP_KEY_BYTES``."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise InvalidPayload(
            f"{source} of {kind!r} must give a str (or int) dedup key, got {value!r}"
        )
    key = value if isinstance(value, str) else str(value)
    if _CONTROL.search(key):
        raise InvalidPayload(f"dedup key {key!r} of {kind!r} contains control characters")
    if not is_storable_text(key):
        raise InvalidPayload(f"dedup key {key!r} of {kind!r} is not valid UTF-8")
    size = len(key.encode())
    if size > MAX_DEDUP_KEY_BYTES:
        raise InvalidPayload(
            f"dedup key of {kind!r} is {size} bytes, over {MAX_DEDUP_KEY_BYTES}; "
            "hash it (e.g. sha256) to shorten it"
        )
    return key


def validate_fair_key(value: object, kind: str) -> str:
    """The fair key a task's ``fair_key`` function gave: non-empty text of at most
    ``MAX_FAIR_KEY_BYTES``, no control characters (``InvalidPayload`` otherwise)."""
    if not isinstance(value, str):
        raise InvalidPayload(
            f"the fair_key function of {kind!r} must return a str, got {value!r}"
            " (convert it, e.g. str(tenant_id))"
        )
    if not value:
        raise InvalidPayload(f"the fair_key function of {kind!r} returned an empty string")
    if _CONTROL.search(value):
        raise InvalidPayload(f"fair key {value!r} of {kind!r} contains control characters")
    if not is_storable_text(value):
        raise InvalidPayload(f"fair key {value!r} of {kind!r} is not valid UTF-8")
    size = len(value.encode())
    if size > MAX_FAIR_KEY_BYTES:
        raise InvalidPayload(
            f"fair key of {kind!r} is {size} bytes, over {MAX_FAIR_KEY_BYTES}; "
            "use a shorter key (a tenant id rather than a name)"
        )
    return value


def check_fair_key_fits(
    fair_key: Callable[..., object],
    parameters: Sequence[inspect.Parameter],
    kind: str,
    option: str = "fair_key",
) -> None:
    """At decoration: ``fair_key`` (or the key function ``option`` names) must accept,
    by name, every argument the handler's calls can pass it (``ConfigurationError``
    naming what it must accept otherwise)."""
    try:
        accepted = inspect.signature(fair_key)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(
            f"cannot read the signature of {option} {fair_key!r}: {exc}"
        ) from exc
    names = [p.name for p in parameters if p.kind is not p.VAR_KEYWORD]
    takes_extras = any(p.kind is p.VAR_KEYWORD for p in parameters)
    wanted = f"({', '.join([*names, '**_'] if takes_extras else names)})"
    hint = (
        f"{option} of {kind!r} is called with the handler's arguments by name, "
        f"{wanted}; accept them, e.g. lambda {', '.join([*names[:1], '**_'])}: ..."
    )
    try:
        accepted.bind(**dict.fromkeys(names))
    except TypeError as exc:
        raise ConfigurationError(f"{hint} ({exc})") from None
    if takes_extras and not any(p.kind is p.VAR_KEYWORD for p in accepted.parameters.values()):
        raise ConfigurationError(f"{hint} (the handler takes **kwargs, so {option} must too)")


def to_timedelta(value: object) -> timedelta | None:
    """A timedelta from a timedelta or a finite number of seconds; None if it is neither."""
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        try:
            return timedelta(seconds=value)
        except OverflowError:
            return None
    return None


def validate_age_after(value: object) -> timedelta | None:
    """``App(age_after=)``: None, or a positive timedelta (or seconds)."""
    if value is None:
        return None
    age_after = to_timedelta(value)
    if age_after is None or age_after <= _ZERO:
        raise ConfigurationError(
            f"age_after must be a positive timedelta (or seconds), got {value!r}"
        )
    return age_after


_RATE = re.compile(r"([0-9]+)/([smh])")
_PERIODS: Final = {"s": timedelta(seconds=1), "m": timedelta(minutes=1), "h": timedelta(hours=1)}


def parse_rate_limit(value: object) -> RateLimit:
    """``"<n>/s"``, ``"<n>/m"`` or ``"<n>/h"`` with n at least 1 (a RateLimit passes as is)."""
    if isinstance(value, RateLimit):
        return value
    match = _RATE.fullmatch(value.strip()) if isinstance(value, str) else None
    if match is None or int(match.group(1)) < 1:
        raise ConfigurationError(
            f"rate_limit must be '<n>/s', '<n>/m' or '<n>/h' with n at least 1"
            f" (e.g. '100/s'), got {value!r}"
        )
    return RateLimit(int(match.group(1)), _PERIODS[match.group(2)])


def _callable_option(name: str, value: object) -> Callable[..., Any]:
    if not callable(value):
        raise ConfigurationError(f"{name} must be callable, got {value!r}")
    return value


def _fair_key_option(value: object, values: dict[str, Any]) -> Callable[..., object]:
    """Callable, and not beside a global cap or rate limit: the two claim paths are not
    combined (ADR 0129)."""
    fair_key = _callable_option("fair_key", value)
    limited = [name for name in ("global_concurrency", "rate_limit") if name in values]
    if limited:
        raise ConfigurationError(
            f"fair_key cannot be combined with {' or '.join(limited)} on one task yet;"
            " declare either fair claims or limits across workers"
        )
    return fair_key


def _positive_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be an integer of at least 1, got {value!r}")
    return value


def _positive_delay(name: str, value: object) -> timedelta:
    """``lease``, ``time_limit``, ``expires``: a positive timedelta, or seconds."""
    delay = to_timedelta(value)
    if delay is None or delay <= _ZERO:
        raise ConfigurationError(f"{name} must be a positive timedelta (or seconds), got {value!r}")
    return delay


def _backoff_option(value: object) -> Callable[[int], timedelta]:
    if isinstance(value, timedelta | int | float) and not isinstance(value, bool):
        delay = to_timedelta(value)
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
