"""docs/tutorial.md works as written: its commands, run in order on a database of their own.

The tutorial's code is examples/tutorial/ (the page includes those files); this
module runs the commands the page shows in that directory: ``venturi migrate``,
a ``venturi worker`` in the background, ``python use_it.py``, ``venturi jobs
show`` of the retried job, and a ``venturi beat`` until it has enqueued the next
heartbeat; then both services stop on SIGTERM with exit status 0.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import orjson
import pytest
from support import wait_until

ROOT = Path(__file__).resolve().parents[2]
TUTORIAL = ROOT / "docs" / "tutorial.md"
HERE = ROOT / "examples" / "tutorial"
#: A hang guard for each command, not a speed assertion.
TIMEOUT = 60
MIGRATE = "venturi migrate --app tasks:app"
WORKER = "venturi worker --app tasks:app"
USE_IT = "python use_it.py"
BEAT = "venturi beat --app tasks:app"
LIST_HEARTBEATS = "venturi jobs list --kind tasks.heartbeat --app tasks:app"
SHOW = "venturi jobs show {id} --app tasks:app"


def argv(command: str) -> list[str]:
    """The page's command line, run with this interpreter (``venturi`` is ``-m venturi``)."""
    words = command.split()
    if words[0] == "python":
        return [sys.executable, *words[1:]]
    return [sys.executable, "-m", *words]


def test_the_commands_run_here_are_the_pages() -> None:
    page = TUTORIAL.read_text()
    for command in (MIGRATE, WORKER, USE_IT, BEAT, LIST_HEARTBEATS):
        assert command in page, command
    assert re.search(r"venturi jobs show \w+ --app tasks:app", page)
    for included in ("examples/tutorial/tasks.py", "examples/tutorial/use_it.py"):
        assert f'--8<-- "{included}"' in page, included


@pytest.mark.slow
def test_the_tutorial_runs(example_database: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VENTURI_")}
    env.update(VENTURI_DATABASE_URL=example_database, PYTHONUNBUFFERED="1")

    def run(command: str) -> str:
        done = subprocess.run(
            argv(command),
            cwd=HERE,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    @contextmanager
    def service(command: str) -> Iterator[subprocess.Popen[str]]:
        process = subprocess.Popen(
            argv(command),
            cwd=HERE,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            yield process
        finally:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
            _, log = process.communicate(timeout=TIMEOUT)
            assert process.returncode == 0, log

    assert "applied V1__initial_schema" in run(MIGRATE)
    with service(WORKER):
        printed = run(USE_IT)
        assert "returned 5" in printed
        assert "word_count: 6 words, after a retry" in printed
        assert "chord: 9 words in all" in printed
        retried = run("venturi jobs list --kind tasks.word_count --json --app tasks:app")
        [flaky] = [job for job in orjson.loads(retried)["jobs"] if job["failure_count"] == 1]
        shown = run(SHOW.format(id=flaky["id"]))
        assert "retried" in shown
        assert "ConnectionError" in shown
        with service(BEAT):

            def heartbeats() -> list[dict[str, object]]:
                listed = orjson.loads(run(f"{LIST_HEARTBEATS} --json"))["jobs"]
                return [job for job in listed if job["kind"] == "tasks.heartbeat"]

            # The next tick's job, pending until its minute (and run then, if that comes first).
            assert wait_until(heartbeats, timeout=TIMEOUT, every=0.5)
