"""One attempt of a Django task, as the handlers of its kinds run it (``backend.py``).

A run reads its job back (one read of row and journal, the cost a Django
task pays over a plain venturi task), so that the ``TaskResult`` the signals
and ``TaskContext`` see is the one ``get_result`` would give, this run
included; then it calls the task, and leaves a record of the run (worker,
start, error) as its journal entry's attachment for ``get_result``.

Endings:

- a return value is normalised to JSON as Django's backends do; one that JSON
  cannot hold fails the task at once (retrying would not change it);
- any exception, ``SystemExit`` and ``KeyboardInterrupt`` included, fails this
  attempt: a task runs in a worker thread, where neither is the process being
  told to stop (the worker's own signal handling does that), so the worker
  records them and carries on. An ``asyncio.CancelledError`` (venturi ending
  an async run) is not the task's failure and propagates;
- a failed attempt is retried with venturi's backoff while the task has
  attempts left (``retries.py``), else the task is FAILED (``Fail``).

A failure is logged once, with the task's own frames first (the frames of
this module and of ``Task.call`` that lead to them are cut from the
exception's traceback, which the ``errors`` entry keeps too). The failure
that makes the task FAILED is logged by Django's ``task_finished`` receiver
(``logger.exception`` on Django's tasks logger, the record error trackers
hook into), so the ``Fail`` is raised ``from None`` and venturi's run-end
line carries no traceback of its own; an attempt to be retried is not
finished for Django, so its ``Retry`` is raised from the exception and
venturi's run-end line shows that exception's traceback (executor.py; on a
job's first failure only, ADR 0118).

``task_started`` is sent before the call and ``task_finished`` once the task
is SUCCESSFUL or FAILED (not after an attempt that will be retried), in the
worker, as Django's own backends send them where tasks run.
"""

from __future__ import annotations

import asyncio
import traceback
from datetime import timedelta
from types import TracebackType
from typing import Any

from django.utils import timezone

from venturi import Context, Fail, Retry
from venturi.contrib.django.compat import (
    Task,
    TaskContext,
    TaskError,
    TaskResultStatus,
    exception_class_path,
    normalize_json,
    set_field,
    task_finished,
    task_started,
)
from venturi.contrib.django.results import run_record, to_task_result
from venturi.contrib.django.retries import LOST, policy_of
from venturi.contrib.django.state import get_app
from venturi.errors import ConfigurationError, describe_exception

__all__ = ["arun_attempt", "run_attempt"]

_ATTEMPT_ENDING_ERRORS = (Exception, SystemExit, KeyboardInterrupt)


class _Run:
    """One attempt of one Django task, between its start and its outcome."""

    def __init__(self, ctx: Context, sender: type) -> None:
        if ctx.job_id is None:
            raise ConfigurationError(
                f"{ctx.kind} runs Django tasks of stored jobs; call the Django task itself instead"
            )
        detail = get_app().job(ctx.job_id, fresh=True)
        self.result: Any = to_task_result(detail)
        self.worker_id = detail.job.claimed_by or "unknown"
        self.started_at = timezone.now()
        set_field(self.result, "status", TaskResultStatus.RUNNING)
        set_field(self.result, "last_attempted_at", self.started_at)
        if self.result.started_at is None:
            set_field(self.result, "started_at", self.started_at)
        self.ctx = ctx
        self.sender = sender
        self.task = self.result.task
        self.call_args = list(self.result.args)
        if self.task.takes_context:
            self.call_args.insert(0, TaskContext(task_result=self.result))
        task_started.send(sender=sender, task_result=self.result)

    def succeeded(self, raw: Any) -> Any:
        try:
            value = normalize_json(raw)
        except (TypeError, ValueError) as exc:
            return self.failed(exc, final=True)
        self._finish(TaskResultStatus.SUCCESSFUL)
        set_field(self.result, "_return_value", value)
        self.ctx.set_attachment(run_record(self.worker_id, self.started_at))
        task_finished.send(sender=self.sender, task_result=self.result)
        return value

    def failed(self, exc: BaseException, *, final: bool = False) -> Any:
        exc.__traceback__ = _from_the_tasks_frames(exc.__traceback__)
        error = TaskError(
            exception_class_path=exception_class_path(exc),
            traceback="".join(traceback.format_exception(exc)),
        )
        self.result.errors.append(error)
        self.ctx.set_attachment(run_record(self.worker_id, self.started_at, error))
        policy = policy_of(self.task)
        raised = sum(1 for e in self.result.errors if e.exception_class_path != LOST)
        if final or raised >= policy.max_attempts:
            self._finish(TaskResultStatus.FAILED)
            task_finished.send(sender=self.sender, task_result=self.result)
            raise Fail(describe_exception(exc)) from None  # logged by task_finished's receiver
        set_field(self.result, "status", TaskResultStatus.READY)
        delay: timedelta | None = policy.delay(raised)
        raise Retry(describe_exception(exc), delay=delay) from exc

    def _finish(self, status: Any) -> None:
        set_field(self.result, "status", status)
        set_field(self.result, "finished_at", timezone.now())


def _from_the_tasks_frames(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` without the leading frames of the calls into the task (the last frame kept)."""
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code in _CALLING_CODE:
        tb = tb.tb_next
    return tb


def run_attempt(ctx: Context, *, sender: type) -> Any:
    """One attempt of the plain-function task of ``ctx``'s job; the signals name ``sender``."""
    run = _Run(ctx, sender)
    try:
        raw = run.task.call(*run.call_args, **run.result.kwargs)
    except _ATTEMPT_ENDING_ERRORS as exc:
        return run.failed(exc)
    return run.succeeded(raw)


async def arun_attempt(ctx: Context, *, sender: type) -> Any:
    """One attempt of the coroutine task of ``ctx``'s job; the signals name ``sender``."""
    run = await asyncio.to_thread(_Run, ctx, sender)
    try:
        raw = await run.task.acall(*run.call_args, **run.result.kwargs)
    except _ATTEMPT_ENDING_ERRORS as exc:
        return run.failed(exc)
    return run.succeeded(raw)


#: The frames between venturi's handler and the task's function.
_CALLING_CODE = frozenset(
    {run_attempt.__code__, arun_attempt.__code__, Task.call.__code__, Task.acall.__code__}
)
