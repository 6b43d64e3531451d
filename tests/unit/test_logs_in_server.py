"""The in-server integrations show the worker's lines when the host configured no
logging, and leave a program's own logging set-up alone (``logs.show_in_server``).

Each case runs in a fresh interpreter: pytest's own capture handlers sit on the root
logger here, which is exactly a "logging is configured" program."""

from __future__ import annotations

import subprocess
import sys

import pytest

PROBE = """
import logging
{setup}
from venturi.logs import show_in_server
show_in_server()
show_in_server()
logging.getLogger("venturi.worker").info("worker w1 started")
logging.getLogger("venturi.worker").debug("not shown")
"""


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("", ["INFO venturi.worker: worker w1 started"]),
        ("logging.getLogger('uvicorn').addHandler(logging.StreamHandler())",
         ["INFO venturi.worker: worker w1 started"]),
        ("logging.basicConfig(level=logging.WARNING)", []),
        ("logging.getLogger('venturi').addHandler(logging.NullHandler())", []),
    ],
    ids=["nothing configured", "only the server's loggers", "root configured", "venturi's own"],
)
def test_the_worker_lines_show_only_where_no_handler_would_see_them(
    setup: str, expected: list[str]
) -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(setup=setup)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    shown = [line.split(" ", 2)[-1] for line in done.stderr.splitlines()]
    assert shown == expected
