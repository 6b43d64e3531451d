"""Integrations with web frameworks; each module imports only venturi's public API.

- ``venturi.contrib.asgi``: a lifespan for Starlette / FastAPI (no dependency);
- ``venturi.contrib.flask``: ``init_app`` for Flask (the ``venturi[flask]`` extra).
"""
