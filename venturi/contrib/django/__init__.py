"""venturi for Django: a ``django.tasks`` backend, transactional enqueue on Django's
own connection, ``manage.py venturi``, the dashboard under a URL, and worker
threads in the web process (docs/adr/0130-django.md, README "Django").

::

    INSTALLED_APPS = [..., "venturi.contrib.django"]
    VENTURI = {"DATABASE": "default", "PREFIX": "venturi"}
    TASKS = {"default": {"BACKEND": "venturi.contrib.django.VenturiBackend"}}

``get_app()`` is the process's App of ``settings.VENTURI``.
"""

from __future__ import annotations

from venturi.contrib.django.backend import VenturiBackend, connection, enqueue_on_commit
from venturi.contrib.django.results import WorkerLost
from venturi.contrib.django.retries import retry
from venturi.contrib.django.state import get_app

__all__ = ["VenturiBackend", "WorkerLost", "connection", "enqueue_on_commit", "get_app", "retry"]
