"""VenturiBackend against Django's backend contract, run by venturi's own drain.

Modelled on Django's tests/tasks (decorator, validation, results, context,
signals and their log lines) and on the worker-backed cases of the
django-tasks-db suite, against the real server.
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.utils import timezone
from djtest_app import tasks

import venturi
from venturi import Priority, Status
from venturi.contrib.django import VenturiBackend, compat, get_app, kinds
from venturi.testing import drain

pytestmark = pytest.mark.django_db(transaction=True)

WORKER_ID = f"{socket.gethostname()}:{os.getpid()}"


def backend() -> VenturiBackend:
    found = compat.task_backends["default"]
    assert isinstance(found, VenturiBackend)
    return found


def rows(app: venturi.App) -> list[venturi.types.JobRow]:
    return list(app.jobs().jobs)


def test_the_backend_says_it_supports_what_django_asks(queue):
    b = backend()
    assert (
        b.supports_defer,
        b.supports_async_task,
        b.supports_get_result,
        b.supports_priority,
    ) == (
        True,
        True,
        True,
        True,
    )
    assert b.queues == {"default", "queue-2"}


def test_enqueue_returns_a_ready_result_with_the_calls_fields(queue):
    before = timezone.now()
    result = tasks.calculate.enqueue(1, y=2)

    assert result.status == compat.TaskResultStatus.READY
    assert result.task == tasks.calculate
    assert (result.args, result.kwargs, result.backend) == ([1], {"y": 2}, "default")
    assert result.enqueued_at is not None and before <= result.enqueued_at <= timezone.now()
    assert (result.started_at, result.last_attempted_at, result.finished_at) == (None, None, None)
    assert (result.errors, result.worker_ids, result.attempts) == ([], [], 0)
    assert not result.is_finished
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value

    stored = backend().get_result(result.id)
    assert stored.id == result.id and stored.status == compat.TaskResultStatus.READY
    assert stored.task == tasks.calculate and stored.task.func is tasks.calculate.func
    assert (stored.args, stored.kwargs) == ([1], {"y": 2})
    [row] = rows(queue)
    assert (row.id, row.kind, row.status) == (
        result.id,
        "djtest_app.tasks.calculate",
        Status.PENDING,
    )
    assert stored.enqueued_at == row.created_at


def test_a_worker_run_makes_it_successful_with_its_value_and_ordered_timestamps(queue):
    result = tasks.calculate.enqueue(2, 3)
    [run] = drain(queue)
    assert run.job_id == result.id

    result.refresh()
    assert result.status == compat.TaskResultStatus.SUCCESSFUL and result.is_finished
    assert result.return_value == 5
    assert result.worker_ids == [WORKER_ID] and result.attempts == 1
    assert result.errors == []
    assert result.enqueued_at <= result.started_at <= result.finished_at
    assert result.started_at == result.last_attempted_at
    assert tasks.calculate.get_result(result.id).return_value == 5


def test_a_failure_carries_the_exception_class_and_traceback(queue):
    result = tasks.fails.enqueue("boom")
    drain(queue)

    result.refresh()
    assert result.status == compat.TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class_path == "builtins.ValueError"
    assert error.exception_class is ValueError
    assert "ValueError: boom" in error.traceback
    assert 'tasks.py", line' in error.traceback and "raise ValueError(message)" in error.traceback
    assert result.finished_at is not None and result.worker_ids == [WORKER_ID]
    with pytest.raises(ValueError, match="failed"):
        _ = result.return_value


def test_one_attempt_by_default_so_a_failure_is_final(queue):
    result = tasks.fails.enqueue("once")
    runs = drain(queue, include_scheduled=True)
    assert len(runs) == 1
    assert queue.job(result.id).job.status is Status.DEAD


def test_a_return_value_json_cannot_hold_fails_the_task_clearly(queue):
    result = tasks.returns_non_json.enqueue()
    drain(queue, include_scheduled=True)

    result.refresh()
    assert result.status == compat.TaskResultStatus.FAILED
    [error] = result.errors
    assert error.exception_class_path == "builtins.TypeError"
    assert "Unsupported type" in error.traceback


@pytest.mark.parametrize(
    ("task", "path"),
    [
        (tasks.raises_system_exit, "builtins.SystemExit"),
        (tasks.raises_keyboard_interrupt, "builtins.KeyboardInterrupt"),
    ],
)
def test_system_exit_and_keyboard_interrupt_fail_the_task_not_the_worker(queue, task, path):
    result = task.enqueue()
    after = tasks.calculate.enqueue(1, 1)
    drain(queue)

    result.refresh()
    assert result.status == compat.TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == [path]
    assert tasks.calculate.get_result(after.id).return_value == 2


def test_run_after_defers_the_task(queue):
    later = timezone.now() + timedelta(hours=1)
    result = tasks.calculate.using(run_after=later).enqueue(1, 2)

    assert drain(queue) == []
    assert queue.job(result.id).job.visible_at == later
    stored = backend().get_result(result.id)
    assert stored.status == compat.TaskResultStatus.READY
    assert stored.task.run_after == later


def test_queues_are_honoured_and_an_unknown_queue_is_refused(queue):
    with pytest.raises(compat.InvalidTask, match="Queue 'nowhere' is not valid"):
        tasks.calculate.using(queue_name="nowhere").enqueue(1, 2)
    assert rows(queue) == []

    elsewhere = tasks.on_queue_2.enqueue()
    default = tasks.calculate.enqueue(1, 2)
    runs = drain(queue, kinds.kinds_of_queues(["default"]))
    assert [r.job_id for r in runs] == [default.id]
    assert backend().get_result(elsewhere.id).status == compat.TaskResultStatus.READY

    runs = drain(queue, kinds.kinds_of_queues(["queue-2"]))
    assert [r.job_id for r in runs] == [elsewhere.id]
    assert tasks.on_queue_2.get_result(elsewhere.id).return_value == "queue-2"


def test_priorities_fold_onto_the_tiers_by_sign(queue):
    low = tasks.unhurried.enqueue()
    normal = tasks.calculate.enqueue(0, 0)
    high = tasks.urgent.enqueue()
    tiers = {row.id: row.priority for row in rows(queue)}
    assert tiers == {low.id: Priority.LOW, normal.id: Priority.NORMAL, high.id: Priority.HIGH}
    assert [r.job_id for r in drain(queue)] == [high.id, normal.id, low.id]
    assert backend().get_result(high.id).task.priority == 50


def test_takes_context_gets_djangos_context_with_the_attempt(queue):
    result = tasks.with_context.enqueue("m")
    drain(queue)
    assert tasks.with_context.get_result(result.id).return_value == {
        "attempt": 1,
        "id": result.id,
        "marker": "m",
    }


def test_an_async_task_runs_as_an_async_handler(queue):
    result = tasks.async_add.enqueue(2, 3)
    [run] = drain(queue)
    assert run.kind == "djtest_app.tasks.async_add"
    assert tasks.async_add.get_result(result.id).return_value == 5


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.mark.anyio
async def test_aenqueue_and_aget_result(queue):
    result = await tasks.calculate.aenqueue(4, 5)
    assert result.status == compat.TaskResultStatus.READY
    stored = await tasks.calculate.aget_result(result.id)
    assert stored.id == result.id and stored.args == [4, 5]
    with pytest.raises(compat.TaskResultDoesNotExist):
        await backend().aget_result("01ARZ3NDEKTSV4RRFFQ69G5FAV")
    # The enqueue ran on Django's connection of asgiref's thread: close it, as a server would.
    await sync_to_async(connections.close_all)()


@pytest.mark.parametrize("bad_id", ["01ARZ3NDEKTSV4RRFFQ69G5FAV", "not-an-id", "nul\x00", ""])
def test_an_unknown_or_malformed_id_does_not_exist(queue, bad_id):
    with pytest.raises(compat.TaskResultDoesNotExist):
        backend().get_result(bad_id)


def test_a_plain_venturi_job_is_no_django_result(queue):
    ref = tasks.plain.delay(2)
    with pytest.raises(compat.TaskResultDoesNotExist):
        backend().get_result(ref.id)
    drain(queue)
    assert queue.result(ref.id) == 4


def test_arguments_json_cannot_hold_are_refused_before_anything_is_written(queue):
    with pytest.raises(TypeError):
        tasks.calculate.enqueue(object(), 1)
    assert rows(queue) == []


def test_a_per_task_retry_policy_retries_and_errors_grow_per_attempt(queue, tmp_path: Path):
    counter = tmp_path / "count"
    result = tasks.flaky.enqueue(str(counter), 2)

    drain(queue, include_scheduled=True)
    result.refresh()
    assert result.status == compat.TaskResultStatus.SUCCESSFUL
    assert result.return_value == 3 and result.attempts == 3
    assert len(result.errors) == 2 and "attempt 2" in result.errors[1].traceback
    assert result.started_at < result.last_attempted_at <= result.finished_at


def test_retries_stop_at_max_attempts(queue, tmp_path: Path):
    result = tasks.flaky.enqueue(str(tmp_path / "count"), 10)
    runs = drain(queue, include_scheduled=True)
    assert len(runs) == 3
    result.refresh()
    assert result.status == compat.TaskResultStatus.FAILED and len(result.errors) == 3


def test_the_backends_options_turn_retries_on(queue):
    task = tasks.fails_on_retrying_backend
    result = task.enqueue("again")
    assert queue.job(result.id).job.kind == "djtest_app.tasks.fails_on_retrying_backend"
    runs = drain(queue, include_scheduled=True)
    assert len(runs) == 3
    result = task.get_result(result.id)
    assert result.status == compat.TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"] * 3


def test_signals_are_sent_where_djangos_backends_send_them(queue, caplog):
    seen: list[tuple[str, object, str]] = []

    def recorder(name):
        def receive(sender, task_result, **kwargs):
            seen.append((name, sender, str(task_result.status)))

        return receive

    receivers = [
        (compat.task_enqueued, recorder("enqueued")),
        (compat.task_started, recorder("started")),
        (compat.task_finished, recorder("finished")),
    ]
    for signal, receiver in receivers:
        signal.connect(receiver)
    try:
        with caplog.at_level(logging.DEBUG, logger=compat.SIGNALS_LOGGER):
            result = tasks.calculate.enqueue(1, 1)
            assert seen == [("enqueued", VenturiBackend, "READY")]
            drain(queue)
    finally:
        for signal, receiver in receivers:
            signal.disconnect(receiver)

    assert seen[1:] == [
        ("started", VenturiBackend, "RUNNING"),
        ("finished", VenturiBackend, "SUCCESSFUL"),
    ]
    path = "djtest_app.tasks.calculate"
    messages = [r.getMessage() for r in caplog.records if r.name == compat.SIGNALS_LOGGER]
    assert messages == [
        f"Task id={result.id} path={path} enqueued backend=default",
        f"Task id={result.id} path={path} state=RUNNING",
        f"Task id={result.id} path={path} state=SUCCESSFUL",
    ]


def test_a_failed_task_logs_its_exception_on_finish(queue, caplog):
    with caplog.at_level(logging.INFO, logger=compat.SIGNALS_LOGGER):
        result = tasks.fails.enqueue("logged")
        drain(queue)
    [finished] = [r for r in caplog.records if "state=FAILED" in r.getMessage()]
    assert finished.getMessage() == f"Task id={result.id} path=djtest_app.tasks.fails state=FAILED"
    assert finished.exc_info is not None and finished.exc_info[0] is ValueError


def test_get_app_is_the_current_app_of_plain_tasks(queue):
    assert get_app() is queue
    ref = tasks.plain.delay(5)
    assert queue.job(ref.id).job.kind == "djtest.plain"


def test_the_app_uses_djangos_database(queue):
    from django.db import connection

    with psycopg.connect(queue.database_url) as conn:
        (name,) = conn.execute("SELECT current_database()").fetchone()
    assert name == connection.settings_dict["NAME"]
