"""``VenturiBackend``: Django's task backend interface over a venturi queue.

::

    TASKS = {
        "default": {
            "BACKEND": "venturi.contrib.django.VenturiBackend",
            "QUEUES": ["default", "emails"],
            "OPTIONS": {"MAX_ATTEMPTS": 1, "BACKOFF": None},   # retries.py
        }
    }

``enqueue`` writes one venturi job of the queue's kind (``kinds.py``), with
``run_after`` as its ``eta`` and the priority folded onto a tier. With
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
from inspect import iscoroutinefunction
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from django.utils import timezone

from venturi.contrib.django import compat, kinds, state
from venturi.contrib.django.results import is_django_job, to_task_result
from venturi.contrib.django.retries import RetryPolicy
from venturi.errors import JobNotFound
from venturi.types import Status


class VenturiBackend(compat.BaseTaskBackend):  # type: ignore[misc]
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

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        self.validate_task(task)
        app = state.get_app()
        run_after = task.run_after
        if run_after is not None and timezone.is_naive(run_after):
            run_after = timezone.make_aware(run_after)
        result = compat.TaskResult(
            task=task,
            id="",
            status=compat.TaskResultStatus.READY,
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
        kind = kinds.queue_kind(task.queue_name, is_async=iscoroutinefunction(task.func))
        payload = {
            "task": task.module_path,
            "args": result.args,
            "kwargs": result.kwargs,
            "priority": task.priority,
            "queue_name": task.queue_name,
            "backend": self.alias,
            "run_after": run_after.isoformat() if run_after is not None else None,
        }
        ref = state.queue_task(app, kind).apply_async(
            kwargs=payload,
            eta=run_after,
            priority=kinds.tier(task.priority),
            connection=django_connection(),
        )
        compat.set_field(result, "id", ref.id)
        compat.set_field(result, "enqueued_at", timezone.now())
        compat.task_enqueued.send(sender=type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> Any:
        app = state.get_app()
        try:
            detail = app.job(result_id)
        except JobNotFound:
            raise compat.TaskResultDoesNotExist(result_id) from None
        if not is_django_job(detail):
            raise compat.TaskResultDoesNotExist(result_id)
        value = app.result(detail.job.id) if detail.job.status is Status.COMPLETED else None
        return to_task_result(detail, value)


def django_connection() -> object | None:
    """The raw psycopg 3 connection of the ``VENTURI["DATABASE"]`` alias; None for a URL."""
    config = state.get_settings()
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
