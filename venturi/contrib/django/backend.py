"""``VenturiBackend``: Django's task backend interface over a venturi queue.

::

    TASKS = {
        "default": {
            "BACKEND": "venturi.contrib.django.VenturiBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"MAX_ATTEMPTS": 1, "BACKOFF": None},   # retries.py
        }
    }

``enqueue`` writes one venturi job of the task's own kind, its module path
(``kinds.py``: the queue's kind when it goes to a queue other than its own),
with ``run_after`` as its ``eta`` and the priority folded onto a tier. Each
task's kind is registered when Django validates its declaration
(``validate_task``), each queue's kinds when the App is built. With
``VENTURI["DATABASE"]`` a Django alias the job is written on that alias's own
Django connection, inside whatever transaction it is in: in
``transaction.atomic()`` the job exists exactly when the block commits, and a
rolled-back block leaves no job and wakes no worker. With a URL, venturi's own
pool writes it at once, committed whatever the caller's transaction does
later; ``enqueue_on_commit`` defers such an enqueue to Django's
``transaction.on_commit``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from django.utils import timezone

from venturi import Context
from venturi.contrib.django.compat import (
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    set_field,
    task_enqueued,
)
from venturi.contrib.django.conf import DjangoApp
from venturi.contrib.django.execution import arun_attempt, run_attempt
from venturi.contrib.django.kinds import declare, declared, kind_of, queue_kind, tier
from venturi.contrib.django.results import is_django_job, to_task_result
from venturi.contrib.django.retries import BACKSTOP, RetryPolicy
from venturi.contrib.django.state import QueueBackend, get_app, get_settings, queue_task
from venturi.errors import JobNotFound
from venturi.types import Status

__all__ = ["VenturiBackend", "arun_task", "connection", "enqueue_on_commit", "run_task"]


class VenturiBackend(QueueBackend):
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def __init__(self, alias: str, params: Mapping[str, Any]) -> None:
        super().__init__(alias, params)
        if not self.queues:
            raise ImproperlyConfigured(
                f"TASKS[{alias!r}]['QUEUES'] must name the queues: each is a venturi kind "
                "that workers serve, so 'any queue' cannot be served"
            )
        self.retry_policy = RetryPolicy.from_options(self.options)

    def validate_task(self, task: Any) -> None:
        """Django's checks; a task's declaration also registers its kind (``kinds.py``)."""
        super().validate_task(task)
        if declare(task) is not None:
            self.register_queues(get_app())

    def register_queues(self, app: DjangoApp) -> None:
        """The kinds of this backend's queues and of the tasks declared on it, handled by
        ``run_task`` or ``arun_task`` with this backend's retries and lease."""
        options: dict[str, Any] = {"max_failures": BACKSTOP}
        if self.retry_policy.backoff is not None:
            options["backoff"] = self.retry_policy.delay
        if "LEASE" in self.options:
            options["lease"] = self.options["LEASE"]
        kinds = [
            (queue_kind(queue, is_async=is_async), is_async)
            for queue in sorted(self.queues)
            for is_async in (False, True)
        ]
        kinds += [(task.kind, task.is_async) for task in declared(self.alias)]
        for kind, is_async in kinds:
            if kind not in app.registry.tasks:
                app.task(kind=kind, **options)(arun_task if is_async else run_task)

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        app = get_app()
        run_after = task.run_after
        if run_after is not None and timezone.is_naive(run_after):
            run_after = timezone.make_aware(run_after)
        result = TaskResult(
            task=task,
            id="",
            status=TaskResultStatus.READY,
            enqueued_at=None,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        kind = kind_of(task)
        payload = {
            "task": task.module_path,
            "args": result.args,
            "kwargs": result.kwargs,
            "priority": task.priority,
            "queue_name": task.queue_name,
            "backend": self.alias,
            "run_after": run_after.isoformat() if run_after is not None else None,
        }
        ref = queue_task(app, kind).apply_async(
            kwargs=payload,
            eta=run_after,
            priority=tier(task.priority),
            connection=connection(),
        )
        set_field(result, "id", ref.id)
        set_field(result, "enqueued_at", timezone.now())
        task_enqueued.send(sender=type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        app = get_app()
        try:
            detail = app.job(result_id, fresh=True)
        except JobNotFound:
            raise TaskResultDoesNotExist(result_id) from None
        if not is_django_job(detail):
            raise TaskResultDoesNotExist(result_id)
        value = app.result(detail.job.id) if detail.job.status is Status.COMPLETED else None
        return to_task_result(detail, value)


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
    """The handler of a plain-function task's kind, and of ``django:<queue>``: one attempt
    of the task the payload names (``execution.py``).

    The parameters are the payload ``VenturiBackend.enqueue`` writes, so that
    venturi checks a stored job against them before the run; the run itself
    reads the call from the ``TaskResult`` (the same payload, read back).
    """
    return run_attempt(ctx, sender=VenturiBackend)


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
    """The handler of a coroutine task's kind, and of ``django:<queue>:async``."""
    return await arun_attempt(ctx, sender=VenturiBackend)


def connection() -> object | None:
    """Django's own psycopg 3 connection of the ``VENTURI["DATABASE"]`` alias (None for
    a URL): ``enqueue`` writes on it, and so does
    ``task.apply_async(..., connection=venturi_django.connection())`` of plain
    venturi tasks inside ``transaction.atomic()``."""
    config = get_settings()
    if config.is_url:
        return None
    wrapper = connections[config.database]
    wrapper.ensure_connection()
    raw: object = wrapper.connection
    if type(raw).__module__.split(".")[0] != "psycopg":
        raise ImproperlyConfigured(
            f"VENTURI['DATABASE'] = {config.database!r} uses {type(raw).__module__}; "
            "enqueueing on Django's connection needs psycopg 3 (pip install 'psycopg>=3.2'), "
            "or set VENTURI['DATABASE'] to a URL"
        )
    return raw


def enqueue_on_commit(task: Any, *args: Any, using: str | None = None, **kwargs: Any) -> None:
    """``task.enqueue(*args, **kwargs)`` once the current transaction of ``using`` commits.

    For ``VENTURI["DATABASE"]`` a URL, whose enqueues commit on their own: this
    keeps a rolled-back request from leaving a job behind (and a crash
    between commit and enqueue loses it: the price of two databases).
    """
    transaction.on_commit(lambda: task.enqueue(*args, **kwargs), using=using)
