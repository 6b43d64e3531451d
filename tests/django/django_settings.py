"""Settings of the Django test project: the real server, a fresh test database.

The database is the suite's (``$VENTURI_TEST_DATABASE_URL`` or the local
server); pytest-django creates ``TEST.NAME`` beside it. Worker processes the
tests start get ``VENTURI_DJANGO_TEST_DB`` (the created test database) and
``VENTURI_DJANGO_PREFIX``, so that they serve the test's queue.
"""

import os
import secrets

from psycopg.conninfo import conninfo_to_dict

URL = os.environ.get("VENTURI_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/test")
_params = conninfo_to_dict(URL)

SECRET_KEY = "venturi-django-tests"
DEBUG = False
USE_TZ = True
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "djtest_app.urls"
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("VENTURI_DJANGO_TEST_DB", _params.get("dbname", "test")),
        "USER": _params.get("user", "postgres"),
        "PASSWORD": _params.get("password", ""),
        "HOST": _params.get("host", "127.0.0.1"),
        "PORT": _params.get("port", "5432"),
        "TEST": {"NAME": f"test_venturi_django_{os.getpid()}"},
    }
}
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "venturi.contrib.django",
    "djtest_app",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
]
TASKS = {
    "default": {
        "BACKEND": "venturi.contrib.django.VenturiBackend",
        "QUEUES": ["default", "queue-2"],
        "OPTIONS": {"LEASE": 3},
    },
    "retrying": {
        "BACKEND": "venturi.contrib.django.VenturiBackend",
        "QUEUES": ["retrying"],
        "OPTIONS": {"MAX_ATTEMPTS": 3, "BACKOFF": 0},
    },
}
VENTURI = {
    "DATABASE": "default",
    "PREFIX": os.environ.get("VENTURI_DJANGO_PREFIX", f"dj_{secrets.token_hex(4)}"),
}
LOGIN_URL = "/login/"
if os.environ.get("VENTURI_DJANGO_WORKER_IN_SERVER"):
    VENTURI["WORKER_IN_SERVER"] = {"concurrency": 2, "queues": ["default"]}
    VENTURI["GRACE"] = 5.0
