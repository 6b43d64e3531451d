"""Cron arithmetic for Beat: pure functions of an expression, a time zone and ``now``.

Nothing here reads a clock (STYLE R7): every function takes the instant it
reasons about, aware datetimes in, UTC datetimes out, so the same answer comes
back in tests (freezegun or explicit values) and in production. croniter does
the calendar arithmetic on *naive local wall-clock times*, where no daylight
saving exists; this module alone decides how a wall-clock time becomes an
instant, because croniter's own handling of aware datetimes around DST has
changed between releases.

Expressions:
    Five fields ``minute hour day-of-month month day-of-week`` as in Vixie
    cron (names like ``MON`` and ``JAN`` work; day-of-month and day-of-week are
    OR-ed when both are restricted), six fields with *seconds first*
    (``second minute hour dom month dow``, as Quartz, Spring and robfig/cron
    write it), or an alias: ``@yearly`` ``@annually`` ``@monthly`` ``@weekly``
    ``@daily`` ``@midnight`` ``@hourly``. Anything else, including croniter's
    seven-field "year" form and ``H`` hashing, and an expression that matches
    no date at all (``0 0 31 2 *``), is refused with ``InvalidSchedule``.

Daylight saving (the contract; tested for Europe/Paris):
    The expression names wall-clock times in the schedule's time zone. Twice a
    year a wall-clock time is missing (spring forward: 02:00-02:59 does not
    exist in Paris on the last Sunday of March) or happens twice (fall back:
    02:00-02:59 happens in CEST, then again in CET, on the last Sunday of
    October). Following cronie (Vixie cron), the answer depends on the kind of
    expression:

    * A *fixed-time* expression (minute and hour fields both without ``*``,
      e.g. ``30 2 * * *`` or ``@daily``) follows the calendar: each day it
      names runs exactly once. A time in the spring gap runs once at the first
      valid instant after the gap (``30 2 * * *`` runs at 03:00 CEST; several
      such times collapse into that one run); a time in the autumn overlap runs
      once, at its first occurrence (02:30 CEST, not 02:30 CET).
    * An *interval* expression (minute or hour field starting with ``*``,
      e.g. ``*/15 * * * *``, ``0 * * * *``, ``@hourly``) follows real time: an
      instant is a tick exactly when its local wall-clock time matches. Times
      in the spring gap do not exist and are skipped (the rhythm continues on
      the real clock); times in the autumn overlap run at both occurrences, so
      ``*/15 * * * *`` never falls silent for an hour.

    Either way the ticks form one fixed, ordered set of instants, and
    ``next_tick``/``previous_tick`` are "the first member after" and "the last
    member at or before": asking again with a later ``after`` never returns a
    tick already passed, which is what makes Beat's at-most-once argument hold.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter

from venturi.errors import InvalidSchedule

__all__ = [
    "next_tick",
    "previous_tick",
    "ticks",
    "validate_schedule",
    "zone",
]

_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIVE_FIELDS = 5
_SIX_FIELDS = 6
#: Each field's name and range, to say which one is out of range and what fits.
_FIELD_RANGES = (
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 7),
)
_SECOND_RANGE = ("second", 0, 59)
_NUMBER = re.compile(r"[0-9]+")

#: Wider than any UTC-offset change a zone has ever made (Samoa skipped a whole
#: day in 2011): the scans below bound wall-clock times by the offsets seen
#: within this distance of the instant they start from.
_MARGIN = timedelta(hours=26)
_SAMPLE_STEP = timedelta(hours=1)
_ZERO = timedelta(0)
_SECOND = timedelta(seconds=1)

#: A fixed reference for "does this expression match any date at all?".
_PROBE = datetime(2000, 1, 1)


@dataclass(frozen=True, slots=True)
class _Expression:
    fields: str
    has_seconds: bool
    #: Interval expression (see the module docstring): follows real time across DST.
    follows_real_time: bool

    def walls(self, start: datetime) -> croniter:
        """Naive local wall-clock times matching the expression, around ``start``."""
        return croniter(self.fields, start, second_at_beginning=self.has_seconds)


def validate_schedule(expression: str, timezone: str) -> None:
    """Raise ``InvalidSchedule`` unless ``expression`` and ``timezone`` can schedule work.

    Called when a schedule is declared (``@task(schedule=...)``,
    ``app.periodic``), so a typo fails at import time, not at 3 a.m.
    """
    _parse(expression)
    zone(timezone)


def zone(timezone: str) -> ZoneInfo:
    """The IANA time zone named ``timezone``; ``InvalidSchedule`` if there is none."""
    if not isinstance(timezone, str) or not timezone:
        raise InvalidSchedule(f"invalid time zone {timezone!r}: give an IANA name such as 'UTC'")
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:  # OSError: a directory name
        raise InvalidSchedule(
            f"unknown time zone {timezone!r}: give an IANA name such as 'Europe/Paris' or 'UTC'"
        ) from exc


def next_tick(expression: str, tz: ZoneInfo, *, after: datetime) -> datetime:
    """The first tick strictly after ``after`` (aware), in UTC.

    Raises ``InvalidSchedule`` for a bad expression and ``ValueError`` for a
    naive ``after``.
    """
    spec = _parse(expression)
    after = _utc(after, "after")
    # An instant t > after whose wall-clock time t + offset(t) is earlier than
    # after's must lie within (after, after + swing]: the scan starts at the
    # lowest wall-clock time those instants can show.
    swing = max(_ZERO, _offset(tz, after) - _offset_bounds(tz, after, after + _MARGIN)[0])
    low, _ = _offset_bounds(tz, after, after + swing)
    walls = spec.walls(_naive(after + low) - _SECOND)
    best: datetime | None = None
    stop_after: datetime | None = None
    while True:
        wall = _step(spec, walls, forward=True)
        if stop_after is not None and wall > stop_after:
            assert best is not None
            return best
        for instant in _instants(wall, tz, follows_real_time=spec.follows_real_time):
            if instant > after and (best is None or instant < best):
                best = instant
                # An instant in (after, best) shows a wall-clock time below
                # best + high: once the scan passes that, nothing can beat ``best``.
                _, high = _offset_bounds(tz, max(after, best - _MARGIN), best)
                stop_after = _naive(best + high)


def previous_tick(expression: str, tz: ZoneInfo, *, until: datetime) -> datetime:
    """The last tick at or before ``until`` (aware), in UTC.

    Used for the catch-up policy: "the most recent tick that should have run".
    """
    spec = _parse(expression)
    until = _utc(until, "until")
    swing = max(_ZERO, _offset_bounds(tz, until - _MARGIN, until)[1] - _offset(tz, until))
    _, high = _offset_bounds(tz, until - swing, until)
    walls = spec.walls(_naive(until + high) + _SECOND)
    best: datetime | None = None
    stop_before: datetime | None = None
    while True:
        wall = _step(spec, walls, forward=False)
        if stop_before is not None and wall < stop_before:
            assert best is not None
            return best
        for instant in _instants(wall, tz, follows_real_time=spec.follows_real_time):
            if instant <= until and (best is None or instant > best):
                best = instant
                low, _ = _offset_bounds(tz, best, min(until, best + _MARGIN))
                stop_before = _naive(best + low)


def ticks(expression: str, tz: ZoneInfo, *, after: datetime, until: datetime) -> list[datetime]:
    """Every tick in ``(after, until]``, in order, in UTC."""
    found: list[datetime] = []
    tick = next_tick(expression, tz, after=after)
    while tick <= until:
        found.append(tick)
        tick = next_tick(expression, tz, after=tick)
    return found


@functools.lru_cache(maxsize=256)
def _parse(expression: str) -> _Expression:
    if not isinstance(expression, str):
        raise InvalidSchedule(f"invalid cron expression {expression!r}: must be a string")
    text = " ".join(expression.split())
    text = _ALIASES.get(text.lower(), text)
    fields = text.split(" ")
    if len(fields) not in (_FIVE_FIELDS, _SIX_FIELDS) or not croniter.is_valid(
        text, second_at_beginning=len(fields) == _SIX_FIELDS
    ):
        reason = _out_of_range(fields) or (
            "expected 'minute hour day-of-month month day-of-week' (5 fields), 6 fields "
            f"with seconds first, or an alias such as @daily (got {len(fields)} field(s))"
        )
        raise InvalidSchedule(f"invalid cron expression {expression!r}: {reason}")
    has_seconds = len(fields) == _SIX_FIELDS
    minute, hour = fields[1:3] if has_seconds else fields[0:2]
    spec = _Expression(
        fields=text,
        has_seconds=has_seconds,
        follows_real_time=minute.startswith("*") or hour.startswith("*"),
    )
    try:
        spec.walls(_PROBE).get_next(datetime)
    except CroniterError as exc:
        raise InvalidSchedule(
            f"invalid cron expression {expression!r}: it matches no date"
        ) from exc
    return spec


def _out_of_range(fields: list[str]) -> str:
    """``"minute 61 is out of range 0-59"`` for the first number outside its field's
    range, else ``""`` (names, ``L``, ``#`` and the like are left to croniter)."""
    if len(fields) not in (_FIVE_FIELDS, _SIX_FIELDS):
        return ""
    ranges = (_SECOND_RANGE, *_FIELD_RANGES) if len(fields) == _SIX_FIELDS else _FIELD_RANGES
    for field, (name, low, high) in zip(fields, ranges, strict=True):
        for part in field.split(","):
            values = part.partition("/")[0]
            for number in values.split("-"):
                if _NUMBER.fullmatch(number) and not low <= int(number) <= high:
                    return f"{name} {number} is out of range {low}-{high}"
    return ""


def _step(spec: _Expression, walls: croniter, *, forward: bool) -> datetime:
    try:
        wall: datetime = walls.get_next(datetime) if forward else walls.get_prev(datetime)
    except CroniterError as exc:  # croniter gives up after 50 years without a match
        raise InvalidSchedule(
            f"cron expression {spec.fields!r} has no tick within 50 years"
        ) from exc
    return wall


def _instants(wall: datetime, tz: ZoneInfo, *, follows_real_time: bool) -> list[datetime]:
    """The instants (UTC) at which the naive local ``wall`` time is a tick."""
    first = wall.replace(tzinfo=tz, fold=0).astimezone(UTC)
    second = wall.replace(tzinfo=tz, fold=1).astimezone(UTC)
    first_exists = _naive_local(first, tz) == wall
    second_exists = _naive_local(second, tz) == wall
    if first_exists and second_exists:
        if first == second or not follows_real_time:
            return [first]
        return [first, second]  # the autumn overlap: fold=0 is the earlier occurrence
    if first_exists or second_exists:
        return [first if first_exists else second]
    if follows_real_time:
        return []
    # The spring gap: fold=1 (post-transition offset) lands before the transition,
    # fold=0 after it; the first instant whose wall-clock time is not earlier than
    # ``wall`` is the end of the gap.
    return [_first_instant_at_or_after(wall, tz, low=second, high=first)]


def _first_instant_at_or_after(
    wall: datetime, tz: ZoneInfo, *, low: datetime, high: datetime
) -> datetime:
    """Binary search (to the second) in ``(low, high]`` for the gap's end."""
    lo, hi = int(low.timestamp()), int(high.timestamp())
    while hi - lo > 1:
        middle = (lo + hi) // 2
        if _naive_local(datetime.fromtimestamp(middle, UTC), tz) >= wall:
            hi = middle
        else:
            lo = middle
    return datetime.fromtimestamp(hi, UTC)


def _offset_bounds(tz: ZoneInfo, start: datetime, end: datetime) -> tuple[timedelta, timedelta]:
    """The smallest and largest UTC offset ``tz`` uses between two instants (hourly samples)."""
    offsets = set()
    moment = start
    while moment < end:
        offsets.add(_offset(tz, moment))
        moment += _SAMPLE_STEP
    offsets.add(_offset(tz, end))
    return min(offsets), max(offsets)


def _offset(tz: ZoneInfo, moment: datetime) -> timedelta:
    offset = moment.astimezone(tz).utcoffset()
    assert offset is not None
    return offset


def _naive_local(moment: datetime, tz: ZoneInfo) -> datetime:
    return moment.astimezone(tz).replace(tzinfo=None)


def _naive(moment: datetime) -> datetime:
    return moment.replace(tzinfo=None)


def _utc(moment: datetime, name: str) -> datetime:
    if moment.tzinfo is None or moment.utcoffset() is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got {moment!r}")
    return moment.astimezone(UTC)
