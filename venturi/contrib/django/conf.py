"""The ``VENTURI`` setting, and the App built from it.

::

    VENTURI = {
        "DATABASE": "default",        # a DATABASES alias (psycopg 3), or a URL / libpq string
        "PREFIX": "venturi",          # table prefix (ADR 6)
        "DIRECT_URL": None,           # App(direct_url=...) behind PgBouncer (ADR 0123)
        "AUTODISCOVER": True,         # import every installed app's tasks.py at startup
        "WORKER_IN_SERVER": None,     # {"concurrency": 4, ...}: worker threads in the web process
        "GRACE": 30.0,                # seconds running jobs get at a graceful stop
        "DASHBOARD_CHANGES": "staff", # who may retry/cancel/enqueue there (dashboard.py)
    }

With an alias the App's own pool connects with that database's settings, read
when the App first needs a connection, not at startup: the test runner renames
the database (``test_<NAME>``) after apps are ready, and the queue must follow
it. An enqueue goes on Django's own connection (``backend.py``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from venturi import App, Task
from venturi.schedule import Schedule

__all__ = [
    "DEFAULT_DATABASE",
    "CommandApp",
    "DjangoApp",
    "VenturiSettings",
    "alias_url",
    "build_app",
    "build_command_app",
    "is_connection_string",
]

DEFAULT_DATABASE = "default"
_KNOWN_KEYS = frozenset(
    {
        "DATABASE",
        "PREFIX",
        "DIRECT_URL",
        "AUTODISCOVER",
        "WORKER_IN_SERVER",
        "GRACE",
        "DASHBOARD_CHANGES",
    }
)

#: Connection parameters Django passes to psycopg.connect that are not libpq keywords.
_NOT_LIBPQ = frozenset({"context", "cursor_factory", "prepare_threshold", "autocommit"})


@dataclass(frozen=True, slots=True)
class VenturiSettings:
    """``settings.VENTURI``, checked."""

    database: str = DEFAULT_DATABASE
    prefix: str = "venturi"
    direct_url: str | None = None
    autodiscover: bool = True
    worker_in_server: Mapping[str, Any] | None = None
    grace: float = 30.0

    @property
    def is_url(self) -> bool:
        """True when ``DATABASE`` is a URL: enqueues then use venturi's pool, not Django's."""
        return is_connection_string(self.database)

    @classmethod
    def load(cls) -> VenturiSettings:
        raw = getattr(settings, "VENTURI", {})
        if not isinstance(raw, Mapping):
            raise ImproperlyConfigured("settings.VENTURI must be a dict")
        unknown = sorted(set(raw) - _KNOWN_KEYS)
        if unknown:
            raise ImproperlyConfigured(
                f"settings.VENTURI has unknown keys {', '.join(unknown)}; "
                f"known: {', '.join(sorted(_KNOWN_KEYS))}"
            )
        database = raw.get("DATABASE", DEFAULT_DATABASE)
        if not isinstance(database, str) or not database:
            raise ImproperlyConfigured("settings.VENTURI['DATABASE'] must be an alias or a URL")
        if not is_connection_string(database) and database not in settings.DATABASES:
            raise ImproperlyConfigured(
                f"settings.VENTURI['DATABASE'] = {database!r} is neither a DATABASES alias "
                "nor a postgresql:// URL"
            )
        worker = raw.get("WORKER_IN_SERVER")
        if worker is not None and not isinstance(worker, Mapping):
            raise ImproperlyConfigured(
                "settings.VENTURI['WORKER_IN_SERVER'] must be None or a dict of Worker options"
            )
        return cls(
            database=database,
            prefix=raw.get("PREFIX", "venturi"),
            direct_url=raw.get("DIRECT_URL"),
            autodiscover=bool(raw.get("AUTODISCOVER", True)),
            worker_in_server=worker,
            grace=float(raw.get("GRACE", 30.0)),
        )


def is_connection_string(value: str) -> bool:
    """A ``postgresql://`` URL or a ``key=value`` libpq string, not a DATABASES alias."""
    return "://" in value or "=" in value


def alias_url(alias: str) -> str:
    """A libpq URL with the connection settings Django uses for ``alias``, now."""
    from django.db import connections

    wrapper = connections[alias]
    if wrapper.vendor != "postgresql":
        raise ImproperlyConfigured(
            f"VENTURI['DATABASE'] = {alias!r} is a {wrapper.vendor} database; "
            "venturi needs PostgreSQL"
        )
    params = wrapper.get_connection_params()
    return " ".join(
        f"{key}={_libpq_value(value)}"
        for key, value in params.items()
        if key not in _NOT_LIBPQ and value not in (None, "")
    )


def _libpq_value(value: object) -> str:
    """A value of a libpq ``key=value`` string: quoted, quotes and backslashes escaped."""
    text = str(value).replace("\\", "\\\\").replace("'", "\\'")
    return f"'{text}'"


class DjangoApp(App):
    """An App whose database URL is read from Django's settings at first use.

    A URL given explicitly (the CLI's ``--database-url``, ``override``) wins.
    """

    def __init__(self, resolve_url: Callable[[], str], **options: Any) -> None:
        super().__init__(None, **options)
        self._resolve_url = resolve_url
        self._url: str | None = None
        self._resolve_lock = threading.Lock()

    @property
    def database_url(self) -> str:
        """The URL given to ``override``, else the one Django's settings give at the
        first read (the backend's first use reads it)."""
        url = self._url
        if not url:
            with self._resolve_lock:
                url = self._url
                if not url:
                    url = self._url = self._resolve_url()
        return url

    def override(self, *, database_url: str | None = None, **others: Any) -> None:
        """``App.override``; a ``database_url`` given here wins over Django's settings."""
        super().override(database_url=database_url, **others)
        if database_url is not None:
            self._url = database_url


class CommandApp(DjangoApp):
    """The App of one ``manage.py venturi`` command: connections of its own (the CLI
    closes them when the command ends), the tasks and schedules of the process's App
    (``venturi.contrib.django.get_app()``, which stays open)."""

    def __init__(self, project: App, resolve_url: Callable[[], str], **options: Any) -> None:
        super().__init__(resolve_url, set_as_current=False, **options)
        self.project = project

    def tasks(self) -> Mapping[str, Task[Any, Any]]:
        return self.project.tasks()

    def schedules(self) -> list[Schedule]:
        return self.project.schedules()


def _resolver(config: VenturiSettings) -> Callable[[], str]:
    database = config.database
    return (lambda: database) if config.is_url else (lambda: alias_url(database))


def build_app(config: VenturiSettings) -> DjangoApp:
    """The process's App of these settings (the current App); opens no connection."""
    return DjangoApp(_resolver(config), prefix=config.prefix, direct_url=config.direct_url)


def build_command_app(config: VenturiSettings, project: App) -> CommandApp:
    """An App for one CLI command, serving ``project``'s tasks; opens no connection."""
    return CommandApp(
        project, _resolver(config), prefix=config.prefix, direct_url=config.direct_url
    )
