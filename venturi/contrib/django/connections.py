"""Django's rule for long-running code: drop connections that are broken or past
``CONN_MAX_AGE`` before and after each unit of work (Django does it around each
request; a worker does it around each run, of Django tasks and plain venturi
tasks alike)."""

from __future__ import annotations

import asyncio
from typing import Any

from django.db import close_old_connections

from venturi import App
from venturi.events import RunEnded, RunStarted, Subscription

__all__ = ["close_stale_connections"]


def _close_in_sync_thread(event: Any) -> None:
    # An async run's events come on its event loop, where Django's connection
    # methods refuse to run; its ORM calls go through sync_to_async's threads.
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        close_old_connections()


def close_stale_connections(app: App) -> Subscription:
    """Close stale Django connections around every run of ``app``'s workers in this
    process; returns the subscription."""
    return app.events.subscribe(_close_in_sync_thread, types=[RunStarted, RunEnded])
