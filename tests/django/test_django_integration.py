"""Transactional enqueue, settings, ``manage.py venturi`` and the dashboard view."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import psycopg
import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ImproperlyConfigured
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from djtest_app import tasks

import venturi
from venturi import Status
from venturi.contrib.django import VenturiBackend, compat, enqueue_on_commit, get_app, state
from venturi.contrib.django.management.commands.venturi import cli_argv
from venturi.registry import set_current_app
from venturi.testing import drain

pytestmark = pytest.mark.django_db(transaction=True)


class Rollback(Exception):
    pass


def seen_elsewhere(app: venturi.App, job_id: str) -> bool:
    """Whether a second connection, not Django's, sees the job."""
    assert app.database_url is not None
    with psycopg.connect(app.database_url) as conn:
        found = conn.execute(f"SELECT 1 FROM {app.prefix}_jobs WHERE id = %s", [job_id])
        return found.fetchone() is not None


def seen_by_django(app: venturi.App, job_id: str) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT 1 FROM {app.prefix}_jobs WHERE id = %s", [job_id])
        return cursor.fetchone() is not None


def test_a_job_enqueued_in_a_rolled_back_atomic_block_does_not_exist(queue):
    with pytest.raises(Rollback), transaction.atomic():
        result = tasks.calculate.enqueue(1, 2)
        assert seen_by_django(queue, result.id)
        assert not seen_elsewhere(queue, result.id)
        raise Rollback

    assert not seen_elsewhere(queue, result.id)
    with pytest.raises(compat.TaskResultDoesNotExist):
        tasks.calculate.get_result(result.id)
    assert drain(queue) == []


def test_a_job_enqueued_in_a_committed_atomic_block_exists_from_its_commit(queue):
    with transaction.atomic():
        result = tasks.calculate.enqueue(1, 2)
        assert not seen_elsewhere(queue, result.id)
    assert seen_elsewhere(queue, result.id)
    [run] = drain(queue)
    assert run.job_id == result.id


def test_a_savepoint_rolled_back_takes_only_its_own_job(queue):
    with transaction.atomic():
        kept = tasks.calculate.enqueue(1, 1)
        with pytest.raises(Rollback), transaction.atomic():
            dropped = tasks.calculate.enqueue(2, 2)
            raise Rollback
    assert seen_elsewhere(queue, kept.id) and not seen_elsewhere(queue, dropped.id)


def test_plain_venturi_tasks_enqueue_on_djangos_connection_too(queue):
    from venturi.contrib.django import connection as django_connection

    with pytest.raises(Rollback), transaction.atomic():
        ref = tasks.plain.apply_async((3,), connection=django_connection())
        raise Rollback
    assert not seen_elsewhere(queue, ref.id)


@pytest.fixture
def other_settings(settings, queue):
    """Lets a test build the App of other VENTURI settings; the project's App
    (the one its tasks are bound to) is put back afterwards."""
    saved = state._process.app, state._process.settings
    state._process.app = state._process.settings = None
    yield settings
    if state._process.app is not None:
        state._process.app.close()
    state._process.app, state._process.settings = saved
    set_current_app(queue)


@pytest.fixture
def url_mode(other_settings, queue):
    """VENTURI["DATABASE"] as a URL (the same database and prefix)."""
    other_settings.VENTURI = {"DATABASE": queue.database_url, "PREFIX": queue.prefix}
    return get_app()


def test_with_a_url_an_enqueue_commits_on_its_own(url_mode):
    app = url_mode
    with pytest.raises(Rollback), transaction.atomic():
        result = tasks.calculate.enqueue(1, 2)
        assert seen_elsewhere(app, result.id)
        raise Rollback
    assert seen_elsewhere(app, result.id)


def test_with_a_url_enqueue_on_commit_follows_the_transaction(url_mode):
    app = url_mode
    with pytest.raises(Rollback), transaction.atomic():
        enqueue_on_commit(tasks.calculate, 1, 2)
        raise Rollback
    assert app.jobs().jobs == ()
    with transaction.atomic():
        enqueue_on_commit(tasks.calculate, 3, 4)
        assert app.jobs().jobs == ()
    [row] = app.jobs().jobs
    assert row.payload["args"] == [3, 4]


def test_unknown_settings_are_refused(other_settings):
    other_settings.VENTURI = {"DATABASE": "default", "PREFIXX": "x"}
    with pytest.raises(ImproperlyConfigured, match="unknown keys PREFIXX"):
        get_app()
    other_settings.VENTURI = {"DATABASE": "nowhere"}
    with pytest.raises(ImproperlyConfigured, match="neither a DATABASES alias"):
        get_app()


def test_a_backend_without_queues_is_refused():
    with pytest.raises(ImproperlyConfigured, match="QUEUES"):
        VenturiBackend("empty", {"QUEUES": []})
    with pytest.raises(ImproperlyConfigured, match="max_attempts"):
        VenturiBackend("bad", {"OPTIONS": {"MAX_ATTEMPTS": 0}})


# -- manage.py venturi ----------------------------------------------------------


def test_worker_queues_become_kinds():
    assert cli_argv(["worker", "--queues", "a,b", "--concurrency", "2"]) == [
        "--app",
        "venturi.contrib.django.state:command_app",
        "worker",
        "--kinds",
        "django:a,django:a:async,django:b,django:b:async",
        "--concurrency",
        "2",
    ]
    assert cli_argv(["worker", "--queues", "a", "--kinds", "djtest.plain"])[4] == (
        "django:a,django:a:async,djtest.plain"
    )
    assert cli_argv(["stats", "--json"]) == [
        "--app",
        "venturi.contrib.django.state:command_app",
        "stats",
        "--json",
    ]


def test_manage_py_venturi_runs_the_clis_commands_on_the_projects_queue(queue, capsys):
    call_command("venturi", "migrate")
    assert capsys.readouterr().out == "schema is up to date\n"

    result = tasks.calculate.enqueue(1, 2)
    call_command("venturi", "jobs", "list")
    out = capsys.readouterr().out
    assert result.id in out and "djtest_app.tasks.calculate" in out

    call_command("venturi", "stats")
    assert "djtest_app.tasks.calculate" in capsys.readouterr().out

    call_command("venturi", "jobs", "cancel", result.id)
    assert queue.job(result.id).job.status is Status.DEAD
    assert tasks.calculate.get_result(result.id).status == compat.TaskResultStatus.FAILED


def test_manage_py_venturi_reports_failures_with_the_clis_status(queue, capsys):
    with pytest.raises(CommandError) as raised:
        call_command("venturi", "jobs", "show", "01ARZ3NDEKTSV4RRFFQ69G5FAV")
    assert raised.value.returncode == 1
    assert "venturi: error:" in capsys.readouterr().err
    with pytest.raises(CommandError) as raised:
        call_command("venturi", "worker", "--no-such-option")
    assert raised.value.returncode == 2


# -- the dashboard ---------------------------------------------------------------


@pytest.fixture
def staff(client):
    user = User.objects.create_user("ops", password="pw", is_staff=True)
    client.force_login(user)
    return user


def test_the_dashboard_sends_anonymous_and_non_staff_users_to_sign_in(queue, client):
    response = client.get("/ops/venturi/")
    assert response.status_code == 302 and response["Location"].startswith("/login/")
    client.force_login(User.objects.create_user("visitor", password="pw"))
    assert client.get("/ops/venturi/").status_code == 302


def test_staff_see_the_dashboard_under_the_projects_url(queue, client, staff):
    result = tasks.calculate.enqueue(1, 2)
    page = client.get(f"/ops/venturi/jobs/{result.id}")
    assert page.status_code == 200
    html = page.content.decode()
    assert result.id in html and "<dd><code>djtest_app.tasks.calculate</code></dd>" in html
    assert f'action="/ops/venturi/jobs/{result.id}/cancel"' in html


def test_changes_need_the_dashboards_csrf_token(queue, client, staff):
    result = tasks.calculate.enqueue(1, 2)
    html = client.get(f"/ops/venturi/jobs/{result.id}").content.decode()
    [token] = re.findall(r'name="csrf" value="([^"]+)"', html)[:1]
    cancel = f"/ops/venturi/jobs/{result.id}/cancel"
    form = {"content_type": "application/x-www-form-urlencoded", "HTTP_ORIGIN": "http://testserver"}

    refused = client.post(cancel, "csrf=forged", **form)
    assert refused.status_code == 403
    assert queue.job(result.id).job.status is Status.PENDING

    done = client.post(cancel, urlencode({"csrf": token}), **form)
    assert done.status_code in (302, 303)
    assert queue.job(result.id).job.status is Status.DEAD


def test_superuser_only_changes(queue, client, staff, settings):
    settings.VENTURI = {**settings.VENTURI, "DASHBOARD_CHANGES": "superuser"}
    result = tasks.calculate.enqueue(1, 2)
    html = client.get(f"/ops/venturi/jobs/{result.id}").content.decode()
    [token] = re.findall(r'name="csrf" value="([^"]+)"', html)[:1] or ["none"]
    refused = client.post(
        f"/ops/venturi/jobs/{result.id}/cancel",
        urlencode({"csrf": token}),
        content_type="application/x-www-form-urlencoded",
        HTTP_ORIGIN="http://testserver",
    )
    assert refused.status_code == 403
    assert queue.job(result.id).job.status is Status.PENDING


def test_the_alias_becomes_a_libpq_string_that_keeps_awkward_values(settings):
    from psycopg.conninfo import conninfo_to_dict

    from venturi.contrib.django.conf import alias_url

    settings.DATABASES["awkward"] = {
        **settings.DATABASES["default"],
        "PASSWORD": "it's a \\ secret",
        "NAME": "my db",
    }
    try:
        params = conninfo_to_dict(alias_url("awkward"))
    finally:
        del settings.DATABASES["awkward"]
    assert params["password"] == "it's a \\ secret" and params["dbname"] == "my db"
