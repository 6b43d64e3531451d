"""A venturi job, read back as Django's ``TaskResult``.

============================  ==================================================
TaskResult field              from
============================  ==================================================
``status``                    the row: pending READY, claimed RUNNING,
                              completed SUCCESSFUL, dead FAILED
``enqueued_at``               the row's ``created_at`` (database clock)
``started_at``                the first run's start, ``last_attempted_at`` the
                              latest run's start: each run's journal entry
                              carries its start (worker clock) in its
                              attachment; the run still in progress has no
                              entry yet, so while RUNNING these name the
                              previous runs (None on the first)
``finished_at``               the row's ``finished_at`` (database clock)
``return_value``              the stored result (ADR 0124)
``errors``                    one per failed run, oldest first: the exception's
                              class path and traceback; a run lost with its
                              worker (lease expired) is ``WorkerLost``, a run
                              venturi ended itself (cancelled) ``JobFailed``
                              with the journal note as its traceback
``worker_ids``                one per run, oldest first (``host:pid``), the
                              run in progress included, so
                              ``TaskContext.attempt`` counts this run
============================  ==================================================
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.utils.module_loading import import_string

from venturi.contrib.django.compat import (
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    set_field,
)
from venturi.contrib.django.kinds import is_queue_kind
from venturi.errors import JobFailed
from venturi.types import JobDetail, JournalEntry, OutcomeKind, Status

__all__ = [
    "RUN_KEY",
    "Run",
    "WorkerLost",
    "is_django_job",
    "run_record",
    "runs",
    "task_of",
    "to_task_result",
]

#: The attachment key of a run's record.
RUN_KEY = "django"
_STATUS = {
    Status.PENDING: TaskResultStatus.READY,
    Status.CLAIMED: TaskResultStatus.RUNNING,
    Status.COMPLETED: TaskResultStatus.SUCCESSFUL,
    Status.DEAD: TaskResultStatus.FAILED,
}
_LEASE_NOTE = "lease of "
_RUN_ENDINGS = frozenset(
    {OutcomeKind.COMPLETED, OutcomeKind.RETRIED, OutcomeKind.DEAD, OutcomeKind.STALE_RECOVERED}
)


class WorkerLost(Exception):
    """The ``errors`` entry of a run whose worker died (its lease expired)."""


@dataclass(frozen=True, slots=True)
class Run:
    """What the journal says about one run."""

    worker_id: str | None
    started_at: datetime | None
    error: Any  # TaskError | None


def run_record(worker_id: str, started_at: datetime, error: Any = None) -> dict[str, Any]:
    """The attachment a run leaves on its journal entry (read back by ``runs``)."""
    record: dict[str, Any] = {"worker_id": worker_id, "started_at": started_at.isoformat()}
    if error is not None:
        record["error"] = {
            "exception_class_path": error.exception_class_path,
            "traceback": error.traceback,
        }
    return {RUN_KEY: record}


def _run_of(entry: JournalEntry) -> Run | None:
    attachment = entry.attachment
    if isinstance(attachment, dict) and isinstance(attachment.get(RUN_KEY), dict):
        record = attachment[RUN_KEY]
        error = record.get("error")
        return Run(
            worker_id=record.get("worker_id"),
            started_at=datetime.fromisoformat(record["started_at"]),
            error=TaskError(**error) if error else None,
        )
    note = entry.note or ""
    if entry.outcome not in _RUN_ENDINGS:
        return None
    if note.startswith(_LEASE_NOTE) or note.startswith("cancelled (lease of "):
        owner = note.split(_LEASE_NOTE, 1)[1].split(" expired", 1)[0]
        return Run(owner, None, _error(WorkerLost, note))
    if entry.outcome is OutcomeKind.DEAD:
        return Run(None, None, _error(JobFailed, note))
    return None


def _error(cls: type[BaseException], text: str) -> Any:
    return TaskError(exception_class_path=f"{cls.__module__}.{cls.__qualname__}", traceback=text)


def runs(detail: JobDetail) -> list[Run]:
    return [run for run in map(_run_of, detail.journal) if run is not None]


def is_django_job(detail: JobDetail) -> bool:
    """A job of a Django task: of its own kind (which its payload names) or of a queue's."""
    kind, payload = detail.job.kind, detail.job.payload
    return isinstance(payload, dict) and (is_queue_kind(kind) or payload.get("task") == kind)


def task_of(payload: dict[str, Any]) -> Any:
    """The Django ``Task`` the job was enqueued from, with its enqueue-time options."""
    found = import_string(payload["task"])
    if not isinstance(found, Task):
        raise TaskResultDoesNotExist(f"{payload['task']} is no longer a task")
    run_after = payload.get("run_after")
    return found.using(
        priority=payload["priority"],
        queue_name=payload["queue_name"],
        backend=payload["backend"],
        run_after=datetime.fromisoformat(run_after) if run_after else None,
    )


def to_task_result(detail: JobDetail, return_value: Any = None) -> Any:
    """``detail`` as a ``TaskResult`` (``return_value``: the stored result, when completed)."""
    job = detail.job
    payload = job.payload
    history = runs(detail)
    worker_ids = [run.worker_id or "unknown" for run in history]
    if job.status is Status.CLAIMED and job.claimed_by is not None:
        worker_ids.append(job.claimed_by)
    starts = [run.started_at for run in history if run.started_at is not None]
    result = TaskResult(
        task=task_of(payload),
        id=job.id,
        status=_STATUS[job.status],
        enqueued_at=job.created_at,
        started_at=starts[0] if starts else None,
        last_attempted_at=starts[-1] if starts else None,
        finished_at=job.finished_at,
        args=payload["args"],
        kwargs=payload["kwargs"],
        backend=payload["backend"],
        errors=[run.error for run in history if run.error is not None],
        worker_ids=worker_ids,
    )
    if job.status is Status.COMPLETED:
        set_field(result, "_return_value", return_value)
    return result
