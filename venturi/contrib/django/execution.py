"""The venturi handlers that run Django tasks (one per kind, ``kinds.py``).

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

``task_started`` is sent before the call and ``task_finished`` once the task
is SUCCESSFUL or FAILED (not after an attempt that will be retried), in the
worker, as Django's own backends send them where tasks run.
"""

from __future__ import annotations

import asyncio
import traceback
from datetime import timedelta
from typing import Any

from django.utils import timezone

from venturi import Context, Fail, Retry
from venturi.contrib.django import compat, retries, state
from venturi.contrib.django.results import run_record, to_task_result
from venturi.errors import ConfigurationError, describe_exception

_ATTEMPT_ENDING_ERRORS = (Exception, SystemExit, KeyboardInterrupt)


class _Run:
    """One attempt of one Django task, between its start and its outcome."""

    def __init__(self, ctx: Context) -> None:
        if ctx.job_id is None:
            raise ConfigurationError(
                f"{ctx.kind} runs Django tasks of stored jobs; call the Django task itself instead"
            )
        detail = state.get_app().job(ctx.job_id)
        self.result: Any = to_task_result(detail)
        self.worker_id = detail.job.claimed_by or "unknown"
        self.started_at = timezone.now()
        compat.set_field(self.result, "status", compat.TaskResultStatus.RUNNING)
        compat.set_field(self.result, "last_attempted_at", self.started_at)
        if self.result.started_at is None:
            compat.set_field(self.result, "started_at", self.started_at)
        self.ctx = ctx
        self.task = self.result.task
        self.call_args = list(self.result.args)
        if self.task.takes_context:
            self.call_args.insert(0, compat.TaskContext(task_result=self.result))
        compat.task_started.send(sender=state.backend_class(), task_result=self.result)

    def succeeded(self, raw: Any) -> Any:
        try:
            value = compat.normalize_json(raw)
        except (TypeError, ValueError) as exc:
            return self.failed(exc, final=True)
        self._finish(compat.TaskResultStatus.SUCCESSFUL)
        compat.set_field(self.result, "_return_value", value)
        self.ctx.set_attachment(run_record(self.worker_id, self.started_at))
        compat.task_finished.send(sender=state.backend_class(), task_result=self.result)
        return value

    def failed(self, exc: BaseException, *, final: bool = False) -> Any:
        error = compat.TaskError(
            exception_class_path=compat.exception_class_path(exc),
            traceback="".join(traceback.format_exception(exc)),
        )
        self.result.errors.append(error)
        self.ctx.set_attachment(run_record(self.worker_id, self.started_at, error))
        policy = retries.policy_of(self.task)
        raised = sum(1 for e in self.result.errors if e.exception_class_path != retries.LOST)
        if final or raised >= policy.max_attempts:
            self._finish(compat.TaskResultStatus.FAILED)
            compat.task_finished.send(sender=state.backend_class(), task_result=self.result)
            raise Fail(describe_exception(exc)) from None
        compat.set_field(self.result, "status", compat.TaskResultStatus.READY)
        delay: timedelta | None = policy.delay(raised)
        raise Retry(describe_exception(exc), delay=delay) from None

    def _finish(self, status: Any) -> None:
        compat.set_field(self.result, "status", status)
        compat.set_field(self.result, "finished_at", timezone.now())


def run_task(
    ctx: Context,
    *,
    task: str,
    args: list[Any],
    kwargs: dict[str, Any],
    priority: int,
    queue_name: str,
    backend: str,
    run_after: str | None = None,
) -> Any:
    """The handler of ``django:<queue>``: one attempt of a plain-function task.

    The parameters are the payload ``VenturiBackend.enqueue`` writes, so that
    venturi checks a stored job against them before the run; the run itself
    reads the call from the ``TaskResult`` (the same payload, read back).
    """
    run = _Run(ctx)
    try:
        raw = run.task.call(*run.call_args, **run.result.kwargs)
    except _ATTEMPT_ENDING_ERRORS as exc:
        return run.failed(exc)
    return run.succeeded(raw)


async def arun_task(
    ctx: Context,
    *,
    task: str,
    args: list[Any],
    kwargs: dict[str, Any],
    priority: int,
    queue_name: str,
    backend: str,
    run_after: str | None = None,
) -> Any:
    """The handler of ``django:<queue>:async``: one attempt of a coroutine task."""
    run = await asyncio.to_thread(_Run, ctx)
    try:
        raw = await run.task.acall(*run.call_args, **run.result.kwargs)
    except _ATTEMPT_ENDING_ERRORS as exc:
        return run.failed(exc)
    return run.succeeded(raw)
