"""The one place that knows where Django's task framework lives.

Django 6 ships it as ``django.tasks``; Django 5.2 gets it from the
``django-tasks`` backport (``django_tasks``), whose names differ in two places
(``InvalidTaskError`` for ``InvalidTask``) and whose logger is ``django_tasks``.
Everything else in ``venturi.contrib.django`` imports these names from here.
"""

from __future__ import annotations

from typing import Any

try:
    from django.tasks import task_backends
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import (
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
        task,
    )
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    #: The logger Django's task signals log to.
    SIGNALS_LOGGER = "django.tasks"
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import task_backends
    from django_tasks.backends.base import BaseTaskBackend
    from django_tasks.base import (
        DEFAULT_TASK_QUEUE_NAME,
        Task,
        TaskContext,
        TaskError,
        TaskResult,
        TaskResultStatus,
        task,
    )
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_enqueued, task_finished, task_started
    from django_tasks.utils import normalize_json

    SIGNALS_LOGGER = "django_tasks"

__all__ = [
    "DEFAULT_TASK_QUEUE_NAME",
    "SIGNALS_LOGGER",
    "BaseTaskBackend",
    "InvalidTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "exception_class_path",
    "normalize_json",
    "set_field",
    "task",
    "task_backends",
    "task_enqueued",
    "task_finished",
    "task_started",
]


def exception_class_path(exc: BaseException) -> str:
    """``module.QualName`` of the exception's class, as Django's backends record it."""
    cls = type(exc)
    return f"{cls.__module__}.{cls.__qualname__}"


def set_field(result: Any, name: str, value: Any) -> None:
    """Set a field of a (frozen) ``TaskResult``, as Django's own backends do."""
    object.__setattr__(result, name, value)
