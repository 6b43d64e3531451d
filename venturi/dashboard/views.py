"""What the pages show, computed from the App's answers: rows, charts and labels.

Kept apart from the HTTP layer so the arithmetic (chart buckets, unserved
kinds, ages) is plain functions over venturi's own types.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson

from venturi.errors import JobNotFound, ResultUnavailable
from venturi.types import (
    Leader,
    MinuteCounts,
    Stats,
    Status,
    StepState,
    Throughput,
    WorkerInfo,
    Workflow,
    WorkflowStep,
)

__all__ = [
    "CHART_MINUTES",
    "MAX_PARENTS_SHOWN",
    "MAX_RESULT_SHOWN",
    "MAX_STEPS_IN_PANEL",
    "MAX_STEPS_SHOWN",
    "MAX_TRACEBACK_SHOWN",
    "Bar",
    "BeatRow",
    "Chart",
    "KindRow",
    "ResultPanel",
    "StepRow",
    "WorkerRow",
    "beat_row",
    "bounded_steps",
    "bounded_traceback",
    "chart",
    "format_age",
    "format_json",
    "format_time",
    "kind_rows",
    "result_panel",
    "state_counts",
    "step_rows",
    "totals",
    "worker_rows",
]

#: The chart's span: this minute and the 59 before it.
CHART_MINUTES = 60
#: Characters of one traceback a page shows at most. Workers bound what they store
#: (ADR 0121), but the column itself is unbounded text, so the page bounds it too.
MAX_TRACEBACK_SHOWN = 20_000
#: Characters of one result's pretty JSON a page shows at most: a stored result may be
#: up to ``result_max_bytes`` (1 MiB by default, ADR 0124), more than a page should carry.
MAX_RESULT_SHOWN = 50_000
#: Steps the workflow page lists at most, and the job page's workflow panel; the
#: parents one step lists (a chord's callback waits for every member).
MAX_STEPS_SHOWN = 500
MAX_STEPS_IN_PANEL = 20
MAX_PARENTS_SHOWN = 10


@dataclass(frozen=True, slots=True)
class Bar:
    """One minute of the chart, already scaled to the chart's height."""

    x: float
    minute: datetime
    completed: int
    dead: int
    completed_height: float
    dead_height: float


@dataclass(frozen=True, slots=True)
class Chart:
    bars: tuple[Bar, ...]
    width: float
    height: float
    bar_width: float
    peak: int
    completed: int
    dead: int


@dataclass(frozen=True, slots=True)
class KindRow:
    kind: str
    counts: Mapping[Status, int]
    scheduled: int
    oldest_eligible_age: timedelta | None
    is_served: bool
    #: Due pending jobs and no live worker serving the kind (``App.unserved_kinds``).
    has_no_live_worker: bool
    chart: Chart

    @property
    def is_unserved_with_pending(self) -> bool:
        """Pending work that no task of this App can run: a typo, or a task module gone."""
        return not self.is_served and self.counts.get(Status.PENDING, 0) > 0


@dataclass(frozen=True, slots=True)
class BeatRow:
    """The active beat as the schedules page shows it; ``age`` as of the page's render."""

    leader: Leader
    host: str
    pid: str
    age: timedelta | None


@dataclass(frozen=True, slots=True)
class ResultPanel:
    """What the job page says about the job's result.

    ``text`` is the stored result as indented JSON, bounded (``None``: nothing is
    stored); ``why`` says why nothing is stored, or what a JSON ``null`` means.
    """

    text: str | None
    why: str


@dataclass(frozen=True, slots=True)
class StepRow:
    """A workflow step with its parents resolved to steps (for their positions)."""

    step: WorkflowStep
    parents: tuple[WorkflowStep, ...]


@dataclass(frozen=True, slots=True)
class WorkerRow:
    """A live worker as the workers page shows it; ages are as of the page's render."""

    info: WorkerInfo
    host: str
    pid: str
    uptime: timedelta
    heartbeat_age: timedelta


def chart(counts: Iterable[MinuteCounts], current_minute: datetime, *, height: float = 40) -> Chart:
    """Stacked bars per minute, oldest left; minutes with nothing finished stay empty."""
    first = current_minute - timedelta(minutes=CHART_MINUTES - 1)
    done = [0] * CHART_MINUTES
    dead = [0] * CHART_MINUTES
    for item in counts:
        index = int((item.minute - first).total_seconds() // 60)
        if 0 <= index < CHART_MINUTES:
            done[index] += item.completed
            dead[index] += item.dead
    peak = max((c + d for c, d in zip(done, dead, strict=True)), default=0)
    bar_width = 4.0
    scale = height / peak if peak else 0.0
    bars = tuple(
        Bar(
            x=i * bar_width,
            minute=first + timedelta(minutes=i),
            completed=done[i],
            dead=dead[i],
            completed_height=round(done[i] * scale, 2),
            dead_height=round(dead[i] * scale, 2),
        )
        for i in range(CHART_MINUTES)
    )
    return Chart(bars, CHART_MINUTES * bar_width, height, bar_width, peak, sum(done), sum(dead))


def kind_rows(
    stats: Stats,
    throughput: Throughput,
    served: Collection[str],
    without_worker: Collection[str],
) -> list[KindRow]:
    """Every kind with rows or a task; kinds this App has no task for come first, then
    kinds no live worker serves."""
    by_kind = {k.kind: k for k in stats.kinds}
    rows = []
    for kind in sorted(set(by_kind) | set(served)):
        found = by_kind.get(kind)
        rows.append(
            KindRow(
                kind=kind,
                counts=found.counts if found is not None else {},
                scheduled=found.scheduled if found is not None else 0,
                oldest_eligible_age=found.oldest_eligible_age if found is not None else None,
                is_served=kind in served,
                has_no_live_worker=kind in without_worker,
                chart=chart(
                    (m for m in throughput.minutes if m.kind == kind), throughput.current_minute
                ),
            )
        )
    rows.sort(key=lambda row: (not row.is_unserved_with_pending, not row.has_no_live_worker))
    return rows


def worker_rows(workers: Iterable[WorkerInfo], now: datetime) -> list[WorkerRow]:
    """The registry's entries with host and pid split out of the id (``host:pid[#n]``)."""
    rows = []
    for info in workers:
        host, pid = _host_and_pid(info.claimed_by)
        rows.append(
            WorkerRow(
                info=info,
                host=host,
                pid=pid,
                uptime=now - info.started_at,
                heartbeat_age=now - info.heartbeat_at,
            )
        )
    return rows


def beat_row(leader: Leader | None, now: datetime) -> BeatRow | None:
    """The active beat with host and pid split out of its holder (``host:pid``)."""
    if leader is None:
        return None
    host, pid = _host_and_pid(leader.holder) if leader.holder else ("", "")
    age = now - leader.since if leader.since is not None else None
    return BeatRow(leader=leader, host=host, pid=pid, age=age)


def _host_and_pid(identity: str) -> tuple[str, str]:
    host, _, pid = identity.rpartition(":")
    return (host, pid) if host else (identity, "")


def step_rows(workflow: Workflow) -> list[StepRow]:
    """The steps in position order, each with the steps it waits for; a parent no
    longer in the workflow (cleaned up) is left out."""
    by_id = {step.id: step for step in workflow.steps}
    return [
        StepRow(step, tuple(by_id[p] for p in step.parents if p in by_id))
        for step in workflow.steps
    ]


def bounded_steps(
    rows: list[StepRow], limit: int, current: str | None = None
) -> tuple[list[StepRow], int]:
    """At most ``limit`` rows in position order, the ``current`` step's among them (a
    chord may have 10,000 members); returns them and how many were left out."""
    shown = rows[:limit]
    if current is not None and all(row.step.id != current for row in shown):
        shown = shown[: limit - 1] + [row for row in rows if row.step.id == current]
    return shown, len(rows) - len(shown)


def state_counts(workflow: Workflow) -> dict[StepState, int]:
    """How many steps are in each state, every state listed."""
    counts = dict.fromkeys(StepState, 0)
    for step in workflow.steps:
        counts[step.state] += 1
    return counts


def bounded_traceback(text: str) -> str:
    """At most ``MAX_TRACEBACK_SHOWN`` characters, keeping the end (innermost frames and
    the exception, what one reads first), as the workers bound what they store."""
    if len(text) <= MAX_TRACEBACK_SHOWN:
        return text
    omitted = len(text) - MAX_TRACEBACK_SHOWN
    return f"[{omitted} characters of outer frames not shown]\n{text[-MAX_TRACEBACK_SHOWN:]}"


def result_panel(status: Status, read: Callable[[], Any]) -> ResultPanel:
    """The result panel of a job in ``status``; ``read`` returns the decoded result of a
    completed job (``App.result(id, timeout=0)``) and is called only for one."""
    if status is Status.DEAD:
        return ResultPanel(None, "No result: the job ended dead (the journal says why).")
    if status is not Status.COMPLETED:
        return ResultPanel(None, "No result yet: the job has not finished.")
    try:
        value = read()
    except ResultUnavailable:
        return ResultPanel(
            None,
            "No result stored: the return value was over the backend's result_max_bytes "
            "(the journal's last note says how large), or the job completed before "
            "results were stored.",
        )
    except JobNotFound:
        return ResultPanel(None, "No result stored: the job was cleaned up meanwhile.")
    text = format_json(value)
    if len(text) > MAX_RESULT_SHOWN:
        omitted = len(text) - MAX_RESULT_SHOWN
        text = f"{text[:MAX_RESULT_SHOWN]}\n[{omitted} more characters not shown]"
    why = "The handler returned None." if value is None else ""
    return ResultPanel(text, why)


def totals(stats: Stats) -> dict[Status, int]:
    total = dict.fromkeys(Status, 0)
    for kind in stats.kinds:
        for status, count in kind.counts.items():
            total[status] += count
    return total


def format_age(age: timedelta | None) -> str:
    """A short human age: ``42s``, ``3m 5s``, ``2h 10m``, ``4d 1h``; an em dash for none."""
    if age is None:
        return "\u2014"
    seconds = max(0, int(age.total_seconds()))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m {seconds}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes}m"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h"


def format_time(value: datetime | None) -> str:
    """UTC, to the second: one clock for everyone reading the same screen."""
    if value is None:
        return "\u2014"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S")


def format_json(value: Any, *, indent: bool = True) -> str:
    """JSON of decoded values, indented unless asked not to; text the database kept
    raw (not decodable) is shown as it is."""
    if isinstance(value, str) and type(value) is not str:
        return str(value)
    option = orjson.OPT_SORT_KEYS | (orjson.OPT_INDENT_2 if indent else 0)
    try:
        return orjson.dumps(value, option=option).decode()
    except TypeError:
        return repr(value)
