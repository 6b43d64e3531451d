"""Worker threads inside the Django web process (``VENTURI["WORKER_IN_SERVER"]``).

::

    VENTURI = {"DATABASE": "default", "WORKER_IN_SERVER": {"concurrency": 4}}

The dict is ``venturi.Worker``'s options (``concurrency``, ``kinds``, ...;
``queues`` names Django queues as in ``manage.py venturi worker --queues``).
The threads start at the first request each server process handles
(Django's ``request_started``), not when apps are ready, and stop gracefully
(running jobs get ``VENTURI["GRACE"]`` seconds, the rest are released) at
exit and on SIGTERM: ``venturi.contrib.server_worker`` says why. ``manage.py
migrate`` and the other commands serve no request, so they run no jobs.

Prefer a separate ``manage.py venturi worker`` when jobs are CPU-heavy or
long (they share the web process's GIL and memory, and a deploy restarts
them), when the web tier scales to zero or recycles workers
(``--max-requests``), or to scale jobs and requests apart. Threads in the
server suit light, I/O-bound work on small deployments.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.core.signals import request_started

from venturi.contrib.django.kinds import kinds_of_queues
from venturi.contrib.django.state import get_app
from venturi.contrib.server_worker import ServerWorker

__all__ = ["arm", "server_worker"]

_armed: list[ServerWorker] = []


def arm(options: Mapping[str, Any], grace: float) -> ServerWorker:
    """Start the worker at this process's first request; stop it at exit and SIGTERM."""
    if not _armed:
        worker_options = dict(options)
        queues = worker_options.pop("queues", None)
        if queues is not None:
            worker_options["kinds"] = [
                *worker_options.get("kinds", ()),
                *kinds_of_queues(queues),
            ]
        worker = ServerWorker(get_app, worker_options, grace)
        request_started.connect(worker.start_once, dispatch_uid="venturi.server")
        worker.arm()
        _armed.append(worker)
    return _armed[0]


def server_worker() -> ServerWorker | None:
    """The armed in-server worker, if ``WORKER_IN_SERVER`` is set."""
    return _armed[0] if _armed else None
