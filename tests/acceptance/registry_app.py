"""The App of the worker-registry CLI tests, loaded with ``--app registry_app:app``.

Its database comes from ``$VENTURI_DATABASE_URL`` and its prefix from
``$CLI_TEST_PREFIX``. Its one task has a short lease, so a worker heartbeats
every third of a second and looks for unserved kinds soon after it starts.
"""

from __future__ import annotations

import os
from datetime import timedelta

import venturi

app = venturi.App(prefix=os.environ.get("CLI_TEST_PREFIX", "cli_unset"))


@app.task(kind="registry.served", lease=timedelta(seconds=1))
def served(n: int) -> int:
    return n
