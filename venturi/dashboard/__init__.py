"""The web dashboard: see and steer a queue in a browser (``venturi[dashboard]``).

``create_app`` gives an ASGI application to serve (``venturi dashboard``) or
to mount in FastAPI/Starlette; ``create_wsgi_app`` the same for Flask or
Django. See docs/adr/0117-dashboard.md for the choices behind it.
"""

from venturi.dashboard.web import create_app, create_wsgi_app

__all__ = ["create_app", "create_wsgi_app"]
