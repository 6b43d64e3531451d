"""Each Django task is a kind of its own, and a failure is logged once, the task's frames first.

Run by venturi's own drain on the project's App (the worker processes are in
``test_django_workers.py``).
"""

from __future__ import annotations

import logging
import re
import traceback
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from djtest_app import tasks

from venturi import Priority, Status
from venturi.contrib.django import compat, kinds
from venturi.contrib.django.management.commands.venturi import cli_argv
from venturi.testing import drain

pytestmark = pytest.mark.django_db(transaction=True)

TASKS_PY = str(Path(tasks.__file__))


def test_each_task_is_its_own_kind_in_the_stats(queue):
    tasks.calculate.enqueue(1, 2)
    tasks.calculate.enqueue(3, 4)
    tasks.urgent.enqueue()
    tasks.async_add.enqueue(1, 1)

    counts = {k.kind: k.counts.get(Status.PENDING, 0) for k in queue.stats().kinds}
    assert counts == {
        "djtest_app.tasks.calculate": 2,
        "djtest_app.tasks.urgent": 1,
        "djtest_app.tasks.async_add": 1,
    }
    assert all(kind == getattr(tasks, kind.rsplit(".", 1)[1]).module_path for kind in counts)


def test_a_tasks_kind_is_registered_with_its_backends_options(queue):
    registered = queue.tasks()
    calculate = registered["djtest_app.tasks.calculate"]
    assert calculate.options.lease == timedelta(seconds=3)  # TASKS["default"]["OPTIONS"]
    assert not calculate.is_async and registered["djtest_app.tasks.async_add"].is_async
    retrying = registered["djtest_app.tasks.fails_on_retrying_backend"]
    assert retrying.options.lease != timedelta(seconds=3)


def test_priority_and_run_after_copies_keep_the_tasks_kind(queue):
    later = timezone.now() + timedelta(hours=1)
    result = tasks.calculate.using(priority=10, run_after=later).enqueue(1, 2)
    job = queue.job(result.id).job
    assert (job.kind, job.priority, job.visible_at) == (
        "djtest_app.tasks.calculate",
        Priority.HIGH,
        later,
    )


def test_an_enqueue_on_another_queue_is_that_queues_kind_and_served_by_its_workers(queue):
    moved = tasks.calculate.using(queue_name="queue-2").enqueue(2, 3)
    assert queue.job(moved.id).job.kind == "django:queue-2"

    assert drain(queue, kinds.kinds_of_queues(["default"])) == []
    [run] = drain(queue, kinds.kinds_of_queues(["queue-2"]))
    assert run.job_id == moved.id
    result = tasks.calculate.get_result(moved.id)
    assert result.return_value == 5 and result.task.queue_name == "queue-2"


def test_an_enqueue_on_another_backend_is_that_backends_queue_kind(queue):
    moved = tasks.fails.using(backend="retrying", queue_name="retrying").enqueue("moved")
    assert queue.job(moved.id).job.kind == "django:retrying"
    runs = drain(queue, kinds.kinds_of_queues(["retrying"]), include_scheduled=True)
    assert len(runs) == 3  # the retrying backend's MAX_ATTEMPTS
    assert tasks.fails.get_result(moved.id).status == compat.TaskResultStatus.FAILED


def test_jobs_queued_under_the_previous_releases_queue_kinds_still_run(queue):
    """The previous release wrote every job under ``django:<queue>[:async]``."""

    def old_enqueue(task, kind: str, *args: object) -> str:
        payload = {
            "task": task.module_path,
            "args": list(args),
            "kwargs": {},
            "priority": task.priority,
            "queue_name": task.queue_name,
            "backend": task.backend,
            "run_after": None,
        }
        return queue.tasks()[kind].apply_async(kwargs=payload).id

    plain = old_enqueue(tasks.calculate, "django:default", 20, 22)
    coroutine = old_enqueue(tasks.async_add, "django:default:async", 1, 2)

    runs = drain(queue, kinds.kinds_of_queues(["default"]))
    assert sorted(r.job_id for r in runs) == sorted([plain, coroutine])
    assert tasks.calculate.get_result(plain).return_value == 42
    assert tasks.async_add.get_result(coroutine).return_value == 3


def test_queues_are_served_by_their_tasks_kinds_and_their_own_two():
    served = kinds.kinds_of_queues(["queue-2"])
    assert served == ["djtest_app.tasks.on_queue_2", "django:queue-2", "django:queue-2:async"]
    default = kinds.kinds_of_queues(["default"])
    assert {"djtest_app.tasks.calculate", "djtest_app.tasks.async_add"} <= set(default)
    assert "djtest_app.tasks.on_queue_2" not in default
    assert "djtest_app.tasks.fails_on_retrying_backend" not in default
    assert cli_argv(["worker", "--queues", "queue-2"])[3:5] == ["--kinds", ",".join(served)]


def test_a_job_of_a_tasks_kind_is_a_django_result_and_a_plain_job_is_not(queue):
    result = tasks.calculate.enqueue(1, 1)
    assert tasks.calculate.get_result(result.id).id == result.id
    plain = tasks.plain.delay(1)
    with pytest.raises(compat.TaskResultDoesNotExist):
        compat.task_backends["default"].get_result(plain.id)


# -- a failure is logged once, the task's frames first -----------------------------


def tracebacks(caplog: pytest.LogCaptureFixture) -> list[tuple[logging.LogRecord, str]]:
    """Every record with a traceback, with that traceback as text."""
    return [
        (r, "".join(traceback.format_exception(*r.exc_info)))
        for r in caplog.records
        if r.exc_info and r.exc_info[1] is not None
    ]


def first_frame(text: str) -> str:
    return text.splitlines()[1].strip()


def test_a_failure_is_logged_once_with_the_tasks_frames_first(queue, caplog):
    with caplog.at_level(logging.DEBUG):
        result = tasks.fails.enqueue("once")
        drain(queue)

    [(record, text)] = tracebacks(caplog)
    assert record.name == compat.SIGNALS_LOGGER and record.levelno == logging.ERROR
    assert record.exc_info is not None and record.exc_info[0] is ValueError
    raised_at = line_of("raise ValueError(message)")
    assert first_frame(text) == f'File "{TASKS_PY}", line {raised_at}, in fails'
    assert "venturi" not in text.replace(TASKS_PY, "") and text.endswith("ValueError: once\n")
    [run_end] = [r for r in caplog.records if r.name == "venturi.runs"]
    line = rf"djtest_app\.tasks\.fails {result.id} run 1 dead in .+: ValueError: once"
    assert re.fullmatch(line, run_end.getMessage()) and run_end.exc_info is None

    [error] = tasks.fails.get_result(result.id).errors
    assert error.traceback == text


def line_of(source: str) -> int:
    lines = Path(TASKS_PY).read_text().splitlines()
    return next(n for n, line in enumerate(lines, 1) if line.strip() == source)


def test_an_async_tasks_failure_starts_at_its_own_frames_too(queue, caplog):
    with caplog.at_level(logging.INFO):
        result = tasks.async_fails.enqueue("async")
        drain(queue)
    [(record, text)] = tracebacks(caplog)
    assert record.name == compat.SIGNALS_LOGGER
    assert first_frame(text).startswith(f'File "{TASKS_PY}", line ')
    assert first_frame(text).endswith(", in async_fails")
    [error] = tasks.async_fails.get_result(result.id).errors
    assert error.traceback == text


def test_each_retried_attempts_failure_is_logged_once_too(queue, caplog, tmp_path: Path):
    with caplog.at_level(logging.INFO):
        result = tasks.flaky.enqueue(str(tmp_path / "count"), 10)
        runs = drain(queue, include_scheduled=True)
    assert len(runs) == 3

    logged = tracebacks(caplog)
    # The job's first failure on venturi's run-end line (ADR 0118: later retries
    # are one line each), the final one by Django's task_finished receiver.
    assert [(r.name, r.levelno) for r, _ in logged] == [
        ("venturi.runs", logging.WARNING),
        (compat.SIGNALS_LOGGER, logging.ERROR),
    ]
    for record, text in logged:
        assert record.exc_info is not None and record.exc_info[0] is tasks.Flaky
        assert first_frame(text).startswith(f'File "{TASKS_PY}"') and "in flaky" in text
    errors = tasks.flaky.get_result(result.id).errors
    assert [e.traceback for e in errors][:: len(errors) - 1] == [t for _, t in logged]


def test_a_plain_fail_from_none_has_no_traceback_and_from_a_cause_shows_the_cause(
    queue, caplog
):
    with caplog.at_level(logging.INFO, logger="venturi.runs"):
        quiet = tasks.fails_from_none.delay()
        caused = tasks.fails_from_cause.delay()
        drain(queue)
    lines = {r.job_id: r for r in caplog.records if r.name == "venturi.runs"}
    assert lines[quiet.id].exc_info is None
    assert "dead in" in lines[quiet.id].getMessage()
    shown = lines[caused.id].exc_info
    assert shown is not None and shown[0] is ValueError
    assert "invalid literal for int()" in str(shown[1])
