"""Settings for Django's own tests/tasks suite with venturi.contrib.django installed
(copied next to runtests.py by .ci/django): Django's test_sqlite settings, on
PostgreSQL through psycopg 3, with a VENTURI setting for the app to read."""

import os

from psycopg.conninfo import conninfo_to_dict

_params = conninfo_to_dict(os.environ["VENTURI_TEST_DATABASE_URL"])
_server = {
    "ENGINE": "django.db.backends.postgresql",
    "NAME": _params.get("dbname", "test"),
    "USER": _params.get("user", "postgres"),
    "PASSWORD": _params.get("password", ""),
    "HOST": _params.get("host", "127.0.0.1"),
    "PORT": _params.get("port", "5432"),
}
DATABASES = {
    "default": {**_server, "TEST": {"NAME": f"test_django_suite_{os.getpid()}"}},
    "other": {**_server, "TEST": {"NAME": f"test_django_suite_other_{os.getpid()}"}},
}
SECRET_KEY = "django_tests_secret_key"
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
USE_TZ = False
VENTURI = {"DATABASE": "default", "PREFIX": "django_suite"}
