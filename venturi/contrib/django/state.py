"""The process's one App of ``settings.VENTURI``, with the kinds of Django's queues.

Built at the first ``get_app()`` (the app config's ``ready`` calls it, so that
plain ``@venturi.task`` functions enqueue through it); building opens no
connection. ``reset()`` forgets it, for tests that change the settings.
"""

from __future__ import annotations

import threading
from typing import Any

from venturi.contrib.django.conf import DjangoApp, VenturiSettings, build_app, build_command_app
from venturi.contrib.django.connections import close_stale_connections

_lock = threading.RLock()


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
    """The App of ``settings.VENTURI``; every VenturiBackend's queues are its kinds."""
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
    from venturi.contrib.django import execution, kinds, retries

    for backend in venturi_backends():
        backoff = backend.retry_policy.backoff
        options: dict[str, Any] = {"max_failures": retries.BACKSTOP}
        if backoff is not None:
            options["backoff"] = backend.retry_policy.delay
        if "LEASE" in backend.options:
            options["lease"] = backend.options["LEASE"]
        for queue in sorted(backend.queues):
            for is_async, handler in ((False, execution.run_task), (True, execution.arun_task)):
                kind = kinds.queue_kind(queue, is_async=is_async)
                if kind not in app.registry.tasks:
                    app.task(kind=kind, **options)(handler)


def queue_task(app: DjangoApp, kind: str) -> Any:
    """The venturi task of a queue kind, registering the queues of backends made since."""
    task = app.registry.tasks.get(kind)
    if task is None:
        with _lock:
            register_queues(app)
        task = app.registry.tasks[kind]
    return task


def venturi_backends() -> list[Any]:
    """The configured ``TASKS`` backends that are VenturiBackends (others are not built)."""
    from django.conf import settings
    from django.utils.module_loading import import_string

    from venturi.contrib.django.backend import VenturiBackend
    from venturi.contrib.django.compat import task_backends

    found = []
    for alias, params in getattr(settings, "TASKS", {}).items():
        try:
            cls = import_string(params["BACKEND"])
        except (ImportError, KeyError):
            continue  # not ours; Django reports it when that backend is used
        if isinstance(cls, type) and issubclass(cls, VenturiBackend):
            found.append(task_backends[alias])
    return found


def backend_class() -> type:
    """The sender of Django's task signals."""
    from venturi.contrib.django.backend import VenturiBackend

    return VenturiBackend


def reset() -> None:
    """Close and forget the App and settings (tests that change ``VENTURI``/``TASKS``)."""
    with _lock:
        app, _process.app, _process.settings = _process.app, None, None
    if app is not None:
        app.close()
