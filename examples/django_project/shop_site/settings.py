"""A small shop whose order confirmations are Django tasks run by venturi.

The database is $VENTURI_DATABASE_URL (default: the local server's ``shop``
database); Django and venturi share it, so an order and its confirmation job
commit together.
"""

import os

from psycopg.conninfo import conninfo_to_dict

_db = conninfo_to_dict(
    os.environ.get("VENTURI_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/shop")
)

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-only-not-secret")
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
USE_TZ = True
ROOT_URLCONF = "shop_site.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "venturi.contrib.django",
    "orders",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",  # psycopg 3
        "NAME": _db.get("dbname", "shop"),
        "USER": _db.get("user", "postgres"),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", "127.0.0.1"),
        "PORT": _db.get("port", "5432"),
    }
}

# Django's task framework, served by venturi: two queues; mail is retried.
TASKS = {
    "default": {
        "BACKEND": "venturi.contrib.django.VenturiBackend",
        "QUEUES": ["default", "mail"],
        "OPTIONS": {"MAX_ATTEMPTS": 3, "BACKOFF": 5},
    }
}
# venturi on Django's own database: enqueues join the request's transaction.
VENTURI = {"DATABASE": "default", "PREFIX": "shop"}
LOGIN_URL = "/admin/login/"
