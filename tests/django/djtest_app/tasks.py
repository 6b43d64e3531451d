"""Tasks of the test project, found by autodiscovery (``tasks.py``)."""

import os
import time
from pathlib import Path

import venturi
from venturi.contrib.django import get_app, retry
from venturi.contrib.django.compat import task

#: Plain venturi tasks go on the project's App, not the default registry, which
#: every App of the test session (the rest of the suite) would serve.
app = get_app()


class Flaky(Exception):
    """Raised by ``flaky`` until its counter reaches the wanted failures."""


@task
def calculate(x: int, y: int) -> int:
    return x + y


@task(priority=50)
def urgent() -> str:
    return "urgent"


@task(priority=-50)
def unhurried() -> str:
    return "unhurried"


@task
def fails(message: str) -> None:
    raise ValueError(message)


@task
async def async_fails(message: str) -> None:
    raise ValueError(message)


@task
def returns_non_json() -> object:
    return object()


@task
def raises_system_exit() -> None:
    raise SystemExit(3)


@task
def raises_keyboard_interrupt() -> None:
    raise KeyboardInterrupt


@task(takes_context=True)
def with_context(context, marker: str) -> dict:
    return {"attempt": context.attempt, "id": context.task_result.id, "marker": marker}


@task
async def async_add(x: int, y: int) -> int:
    return x + y


@task(queue_name="queue-2")
def on_queue_2() -> str:
    return "queue-2"


@task(takes_context=True)
@retry(max_attempts=3, backoff=0)
def flaky(context, counter: str, failures: int) -> int:
    path = Path(counter)
    count = int(path.read_text()) + 1 if path.exists() else 1
    path.write_text(str(count))
    if count <= failures:
        raise Flaky(f"attempt {context.attempt}")
    return context.attempt


@task(backend="retrying", queue_name="retrying")
def fails_on_retrying_backend(message: str) -> None:
    raise ValueError(message)


@task
def record_run(path: str, number: int) -> int:
    """Append one line per run: the exactly-once tests count them."""
    with open(path, "a") as f:
        f.write(f"{number} {os.getpid()}\n")
    return number


@task
def slow_first_run(marker: str) -> str:
    """The first run announces itself and hangs (to be SIGKILLed); later runs return."""
    path = Path(marker)
    if not path.exists():
        path.write_text(str(os.getpid()))
        time.sleep(120)
    return "recovered"


@app.task(kind="djtest.plain")
def plain(x: int) -> int:
    return x * 2


@app.task(kind="djtest.every_minute", schedule="* * * * *")
def every_minute() -> str:
    return "tick"


@app.task(kind="djtest.fails_from_none")
def fails_from_none() -> None:
    """A handler that has reported its exception itself: no traceback on the run-end line."""
    try:
        int("not a number")
    except ValueError:
        raise venturi.Fail("reported elsewhere") from None


@app.task(kind="djtest.fails_from_cause")
def fails_from_cause() -> None:
    """A handler that fails from an exception: the run-end line shows that exception's."""
    try:
        int("not a number")
    except ValueError as exc:
        raise venturi.Fail("not a number") from exc
