"""The process's one App of ``settings.VENTURI``, with the kinds of Django's tasks and queues.

Built at the first ``get_app()`` (the app config's ``ready`` calls it, so that
plain ``@venturi.task`` functions enqueue through it); building opens no
connection. ``reset()`` forgets it, for tests that change the settings.

The kinds (``kinds.py``) are registered by the ``TASKS`` backends that are ``QueueBackend``
(``VenturiBackend``, ``backend.py``): this module finds them by that class
and imports none of the modules above it.
"""

from __future__ import annotations

import threading
from typing import Any

from django.conf import settings
from django.utils.module_loading import import_string

from venturi.contrib.django.compat import BaseTaskBackend, task_backends
from venturi.contrib.django.conf import DjangoApp, VenturiSettings, build_app, build_command_app
from venturi.contrib.django.connections import close_stale_connections

__all__ = [
    "QueueBackend",
    "get_app",
    "get_settings",
    "queue_backends",
    "queue_task",
    "register_queues",
    "reset",
]

_lock = threading.RLock()


class QueueBackend(BaseTaskBackend):  # type: ignore[misc]
    """A ``TASKS`` backend whose queues are kinds of the process's App (``VenturiBackend``;
    ``get_app`` finds the configured ones by this class)."""

    def register_queues(self, app: DjangoApp) -> None:
        """Register on ``app`` the kinds of this backend's queues and tasks it does not have yet."""
        raise NotImplementedError


class _Process:
    """What this process has built from the settings."""

    app: DjangoApp | None = None
    settings: VenturiSettings | None = None


_process = _Process()


def get_settings() -> VenturiSettings:
    with _lock:
        if _process.settings is None:
            _process.settings = VenturiSettings.load()
        return _process.settings


def get_app() -> DjangoApp:
    """The App of ``settings.VENTURI``; the kinds of every VenturiBackend's queues, and of
    the tasks declared so far, are its kinds."""
    with _lock:
        if _process.app is None:
            app = build_app(get_settings())
            register_queues(app)
            close_stale_connections(app)
            _process.app = app
        return _process.app


def __getattr__(name: str) -> Any:
    """``command_app``: an App of its own for each ``manage.py venturi`` command, which
    closes it when done (so the process's App, ``get_app()``, stays open)."""
    if name == "command_app":
        app = build_command_app(get_settings(), get_app())
        close_stale_connections(app)
        return app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register_queues(app: DjangoApp) -> None:
    """Register the kinds of every configured ``QueueBackend``'s queues and tasks on ``app``."""
    for backend in queue_backends():
        backend.register_queues(app)


def queue_task(app: DjangoApp, kind: str) -> Any:
    """The venturi task of a Django kind, registering the kinds of backends made since."""
    task = app.registry.tasks.get(kind)
    if task is None:
        with _lock:
            register_queues(app)
        task = app.registry.tasks[kind]
    return task


def queue_backends() -> list[QueueBackend]:
    """The configured ``TASKS`` backends that are QueueBackends (others are not built)."""
    found = []
    for alias, params in getattr(settings, "TASKS", {}).items():
        try:
            cls = import_string(params["BACKEND"])
        except (ImportError, KeyError):
            continue  # not ours; Django reports it when that backend is used
        if isinstance(cls, type) and issubclass(cls, QueueBackend):
            found.append(task_backends[alias])
    return found


def reset() -> None:
    """Close and forget the App and settings (tests that change ``VENTURI``/``TASKS``)."""
    with _lock:
        app, _process.app, _process.settings = _process.app, None, None
    if app is not None:
        app.close()
