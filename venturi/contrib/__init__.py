"""Integrations with web frameworks and observability tools, each imported on its own.

- ``venturi.contrib.asgi``: a lifespan for Starlette / FastAPI (no dependency);
- ``venturi.contrib.flask``: ``init_app`` for Flask (the ``venturi[flask]`` extra);
- ``venturi.contrib.django``: a ``django.tasks`` backend, ``manage.py venturi``
  and the dashboard under a URL (ADR 0130);
- ``venturi.contrib.otel``, ``venturi.contrib.prometheus`` and ``venturi.contrib.sentry``:
  traces, metrics and failed runs as Sentry events
  from the App's events;
- ``venturi.contrib.server_worker``: a worker inside a web server process,
  shared by the Flask and Django integrations.

Each module takes from the rest of venturi only names its modules declare public.
"""

__all__: list[str] = []
