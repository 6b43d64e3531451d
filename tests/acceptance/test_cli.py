"""The ``venturi`` command line, run for real in subprocesses against PostgreSQL.

Each command runs as ``python -m venturi`` with ``$VENTURI_DATABASE_URL`` set,
from this directory (so ``--app cli_app:app`` imports the helper App), on the
module's migrated test prefix.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import types
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import orjson
import pytest
from cli_support import COMMAND_TIMEOUT, HERE, Run, cli_env, failed_with, json_of, succeeded
from psycopg.conninfo import make_conninfo
from support import drop_prefix, wait_until
from ulid import ULID

import venturi
from venturi import cli
from venturi.testing import drain

MIGRATIONS = sorted(
    (HERE.parent.parent / "migrations").glob("V*__*.sql"),
    key=lambda p: int(p.stem[1:].split("__")[0]),
)
UNREACHABLE = "postgresql://postgres@127.0.0.1:1/x"
WORKER_OPTIONS = ("--concurrency", "2", "--grace", "5")
STATUS_OF = "SELECT status FROM {{prefix}}_jobs WHERE id = %s"


def insert_finished(db: Any, status: str, finished_ago: timedelta) -> str:
    job_id = str(ULID())
    db.execute(
        "INSERT INTO {{prefix}}_jobs (id, kind, payload, status, created_at, visible_at,"
        " finished_at) VALUES (%(id)s, 'cli.old', '{}', %(status)s, now() - %(ago)s,"
        " now() - %(ago)s, now() - %(ago)s)",
        {"id": job_id, "status": status, "ago": finished_ago},
    )
    return job_id


# ------------------------------------------------------------------- migrate


@pytest.fixture
def fresh_prefix(database_url: str) -> Iterator[str]:
    value = f"t_cli_{secrets.token_hex(4)}"
    yield value
    drop_prefix(database_url, value)


def test_migrate_applies_every_migration_once_and_is_idempotent(
    venturi_cli: Run, fresh_prefix: str
) -> None:
    first = succeeded(venturi_cli("migrate", "--prefix", fresh_prefix))
    again = json_of(venturi_cli("migrate", "--prefix", fresh_prefix, "--json"))

    assert first.splitlines() == [f"applied {path.stem}" for path in MIGRATIONS]
    assert again == {"applied": []}
    assert succeeded(venturi_cli("migrate", "--prefix", fresh_prefix)) == "schema is up to date\n"


# ---------------------------------------------------------------------- jobs


def test_jobs_list_pages_newest_first_with_a_printed_cursor(
    venturi_cli: Run, double: Any, prefix: str
) -> None:
    ids = [double.delay(n).id for n in range(3)]

    table = succeeded(venturi_cli("jobs", "list", "--limit", "2")).splitlines()
    assert table[0].split() == [
        "ID", "KIND", "STATUS", "PRIORITY", "RUNS", "FAILURES", "CREATED", "VISIBLE", "FINISHED",
        "NOTE",
    ]  # fmt: skip
    assert [line.split()[:4] for line in table[1:3]] == [
        [ids[2], "cli.double", "pending", "normal"],
        [ids[1], "cli.double", "pending", "normal"],
    ]
    assert table[3].startswith(f"next page: venturi jobs list --prefix {prefix} --limit 2 --after ")
    cursor = table[3].split()[-1]

    rest = json_of(venturi_cli("jobs", "list", "--limit", "2", "--after", cursor, "--json"))
    assert [job["id"] for job in rest["jobs"]] == [ids[0]]
    assert rest["jobs"][0]["payload"] == {"n": 0}
    assert datetime.fromisoformat(rest["jobs"][0]["created_at"]).tzinfo is not None

    first = json_of(venturi_cli("jobs", "list", "--limit", "2", "--json"))
    assert first["next"] == cursor


def test_jobs_list_filters_by_status_and_kind(venturi_cli: Run, double: Any, db: Any) -> None:
    pending = double.delay(1).id
    dead = insert_finished(db, "dead", timedelta(hours=1))

    assert [
        j["id"] for j in json_of(venturi_cli("jobs", "list", "--status", "dead", "--json"))["jobs"]
    ] == [dead]
    assert [
        j["id"]
        for j in json_of(venturi_cli("jobs", "list", "--kind", "cli.double", "--json"))["jobs"]
    ] == [pending]
    assert succeeded(venturi_cli("jobs", "list", "--kind", "cli.none")) == "no jobs\n"


def test_jobs_cancel_show_and_retry_act_on_one_job(venturi_cli: Run, double: Any, db: Any) -> None:
    job_id = double.delay(21).id

    assert succeeded(venturi_cli("jobs", "cancel", job_id)) == f"job {job_id} cancelled: dead\n"
    assert db.one("SELECT status FROM {{prefix}}_jobs WHERE id = %s", (job_id,))["status"] == "dead"

    shown = succeeded(venturi_cli("jobs", "show", job_id))
    fields = dict(line.split(None, 1) for line in shown.split("\n\n")[0].splitlines())
    assert (fields["id"], fields["kind"], fields["status"], fields["payload"]) == (
        job_id,
        "cli.double",
        "dead",
        '{"n":21}',
    )
    timeline = shown.split("\n\n")[1].splitlines()
    assert timeline[0] == "timeline:"
    assert timeline[1].split() == ["ENTRY", "RUN", "RECORDED", "OUTCOME", "ATTACHMENT", "NOTE"]
    assert timeline[2].split()[3:] == ["dead", "-", "cancelled"]

    assert fields["result"] == "none: the job ended dead (the timeline says why)"

    detail = json_of(venturi_cli("jobs", "show", job_id, "--json"))
    assert detail["job"]["status"] == "dead"
    assert [(e["outcome"], e["note"]) for e in detail["journal"]] == [("dead", "cancelled")]
    assert detail["journal"][0]["id"] == db.journal(job_id)[0]["id"]
    assert (detail["result"], detail["result_stored"]) == (None, False)

    retried = json_of(venturi_cli("jobs", "retry", job_id, "--json"))
    assert (retried["id"], retried["status"], retried["finished_at"]) == (job_id, "pending", None)
    assert (
        db.one("SELECT status FROM {{prefix}}_jobs WHERE id = %s", (job_id,))["status"] == "pending"
    )

    refused = failed_with(venturi_cli("jobs", "retry", job_id), 1)
    assert f"cannot retry job {job_id}: it is pending" in refused


def show_fields(shown: str) -> dict[str, str]:
    fields = shown.split("\n\n", maxsplit=1)[0]
    return dict(line.split(None, 1) for line in fields.splitlines())


def test_jobs_show_prints_the_stored_result_of_a_completed_job(
    venturi_cli: Run, app: venturi.App, double: Any
) -> None:
    @app.task(kind="cli.nothing")
    def nothing() -> None:
        return None

    doubled, returned_none = double.delay(21).id, nothing.delay().id
    drain(app, ["cli.double", "cli.nothing"])

    assert show_fields(succeeded(venturi_cli("jobs", "show", doubled)))["result"] == "42"
    detail = json_of(venturi_cli("jobs", "show", doubled, "--json"))
    assert (detail["result"], detail["result_stored"], detail["no_result"]) == (42, True, None)
    assert show_fields(succeeded(venturi_cli("jobs", "show", returned_none)))["result"] == "null"
    detail = json_of(venturi_cli("jobs", "show", returned_none, "--json"))
    assert (detail["result"], detail["result_stored"]) == (None, True)


def test_jobs_show_prints_a_long_result_after_the_timeline_cut_at_its_bound(
    venturi_cli: Run, app: venturi.App
) -> None:
    rows = [{"region": f"r{i:05d}", "total": i} for i in range(2000)]

    @app.task(kind="cli.report")
    def report(rows: list[dict[str, Any]]) -> dict[str, Any]:
        return {"month": "2026-11", "rows": rows}

    job_id = report.delay(rows).id
    drain(app, ["cli.report"])

    shown = succeeded(venturi_cli("jobs", "show", job_id))
    assert show_fields(shown)["result"] == "below, after the timeline"
    blocks = shown.split("\n\n")
    assert blocks[1].startswith("timeline:")
    result = blocks[-1].splitlines()
    value = {"month": "2026-11", "rows": rows}
    full = orjson.dumps(value, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS).decode()
    assert result[0] == f"result ({len(full)} characters of JSON):"
    assert result[1:5] == ["  {", '    "month": "2026-11",', '    "rows": [', "      {"]
    assert "\n".join(line[2:] for line in result[1:-1]) == full[:10_000]
    assert result[-1] == (
        f"  [{len(full) - 10_000} more characters not shown: --json prints the whole result]"
    )
    detail = json_of(venturi_cli("jobs", "show", job_id, "--json"))
    assert detail["result"] == value


def test_jobs_show_says_why_a_job_has_no_result(
    venturi_cli: Run, app: venturi.App, double: Any
) -> None:
    small = venturi.App(app.database_url, prefix=app.prefix, result_max_bytes=64)

    @small.task(kind="cli.large")
    def large() -> str:
        return "x" * 200

    pending = double.delay(1).id
    dropped = large.delay().id
    drain(small, ["cli.large"])
    small.close()

    fields = show_fields(succeeded(venturi_cli("jobs", "show", pending)))
    assert fields["result"] == "none yet: the job is pending, not completed"
    fields = show_fields(succeeded(venturi_cli("jobs", "show", dropped)))
    assert fields["status"] == "completed"
    assert fields["result"] == (
        "none stored; its last note: result of 202 bytes not stored (result_max_bytes=64)"
    )
    detail = json_of(venturi_cli("jobs", "show", dropped, "--json"))
    assert (detail["result"], detail["result_stored"]) == (None, False)
    assert detail["no_result"] == fields["result"]


# ---------------------------------------------------------- cleanup and stats


def test_cleanup_deletes_finished_jobs_older_than_the_duration(
    venturi_cli: Run, app: venturi.App, db: Any
) -> None:
    old = insert_finished(db, "completed", timedelta(days=8))
    recent = insert_finished(db, "completed", timedelta(days=1))
    dead = insert_finished(db, "dead", timedelta(days=8))

    assert succeeded(venturi_cli("cleanup", "--older-than", "1w", "--status", "completed")) == (
        "deleted 1 completed job older than 7d\n"
    )
    assert json_of(venturi_cli("cleanup", "--older-than", "7d", "--batch-size", "1", "--json")) == {
        "deleted": 1
    }

    remaining = {r["id"] for r in db.jobs()}
    assert remaining == {recent}
    assert old not in remaining and dead not in remaining


def test_stats_count_per_kind_and_status(venturi_cli: Run, double: Any, db: Any) -> None:
    double.delay(1)
    double.apply_async(args=(2,), countdown=3600)
    insert_finished(db, "dead", timedelta(hours=1))

    stats = json_of(venturi_cli("stats", "--json"))
    by_kind = {k["kind"]: k for k in stats["kinds"]}
    assert by_kind["cli.double"]["counts"] == {
        "pending": 2,
        "claimed": 0,
        "completed": 0,
        "dead": 0,
    }
    assert by_kind["cli.double"]["scheduled"] == 1
    assert by_kind["cli.old"]["counts"]["dead"] == 1
    assert by_kind["cli.old"]["oldest_eligible_age_seconds"] is None

    table = succeeded(venturi_cli("stats")).splitlines()
    assert table[0].split() == [
        "KIND",
        "PENDING",
        "CLAIMED",
        "COMPLETED",
        "DEAD",
        "SCHEDULED",
        "OLDEST",
        "ELIGIBLE",
    ]
    rows = {line.split()[0]: line.split()[1:6] for line in table[1:]}
    assert rows["cli.double"] == ["2", "0", "0", "0", "1"]
    assert rows["TOTAL"] == ["2", "0", "0", "1", "1"]


# ---------------------------------------------------------------- the --app


def test_app_option_loads_the_users_app_and_prefix_overrides_its_own(
    venturi_cli: Run, double: Any, database_url: str, prefix: str
) -> None:
    job_id = double.delay(2).id
    elsewhere = cli_env(database_url, "cli_unmigrated_prefix")

    listed = json_of(
        venturi_cli(
            "jobs", "list", "--app", "cli_app:app", "--prefix", prefix, "--json", env=elsewhere
        )
    )

    assert [job["id"] for job in listed["jobs"]] == [job_id]


def test_worker_drains_enqueued_jobs_and_exits_0_on_sigterm(
    double: Any, db: Any, database_url: str, prefix: str
) -> None:
    ids = [double.delay(n).id for n in range(5)]
    worker = subprocess.Popen(
        [sys.executable, "-m", "venturi", "worker", "--app", "cli_app:app", *WORKER_OPTIONS],
        cwd=HERE,
        env=cli_env(database_url, prefix),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_until(
            lambda: (
                db.scalar("SELECT count(*) FROM {{prefix}}_jobs WHERE status = 'completed'") == 5
                or worker.poll() is not None
            ),
            timeout=30,
        )
        assert worker.poll() is None, worker.communicate()[1]
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=COMMAND_TIMEOUT)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()

    assert worker.returncode == 0, stderr
    assert "Traceback" not in stderr
    notes = {e["job_id"]: (e["outcome"], e["note"]) for e in db.journal()}
    assert notes == {job_id: ("completed", str(n * 2)) for n, job_id in enumerate(ids)}


def test_the_worker_command_closes_the_app_it_loaded_once_the_worker_has_stopped(
    app: venturi.App,
    db: Any,
    database_url: str,
    prefix: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """In this process, not a subprocess: the App's sessions must end while the process lives.

    ``Worker.run()`` leaves the App open; the CLI created (loaded) it, so the CLI closes it.
    """
    tag = f"venturi_cli_owner_{secrets.token_hex(4)}"
    owned = venturi.App(
        make_conninfo(database_url, application_name=tag), prefix=prefix, set_as_current=False
    )

    @owned.task(kind="cli.owned")
    def owned_job() -> None: ...

    module = types.ModuleType("cli_owned_app")
    module.app = owned  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cli_owned_app", module)
    ref = owned_job.delay()

    def sessions() -> int:
        query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
        return int(db.scalar(query, (tag,)))

    def terminate_once_done() -> None:
        try:
            wait_until(lambda: db.one(STATUS_OF, (ref.id,))["status"] == "completed", timeout=30)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    assert sessions() > 0
    sender = threading.Thread(target=terminate_once_done)
    sender.start()
    status = cli.main(["worker", "--app", "cli_owned_app:app", *WORKER_OPTIONS])
    sender.join(timeout=5)

    assert status == 0
    wait_until(lambda: sessions() == 0)


def test_beat_enqueues_the_next_tick_ahead_of_time_and_exits_0_on_sigterm(
    app: venturi.App, db: Any, database_url: str, prefix: str
) -> None:
    beat = subprocess.Popen(
        [sys.executable, "-m", "venturi", "beat", "--app", "cli_app:app"],
        cwd=HERE,
        env=cli_env(database_url, prefix),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ticks = "SELECT count(*) FROM {{prefix}}_jobs WHERE kind = 'cli.tick' AND visible_at > now()"
    try:
        wait_until(lambda: db.scalar(ticks) > 0 or beat.poll() is not None, timeout=30)
        assert beat.poll() is None, beat.communicate()[1]
        beat.send_signal(signal.SIGTERM)
        _, stderr = beat.communicate(timeout=COMMAND_TIMEOUT)
    finally:
        if beat.poll() is None:
            beat.kill()
            beat.communicate()

    assert beat.returncode == 0, stderr
    assert "Traceback" not in stderr
    # One row per tick; a minute boundary passing meanwhile may have added the next one.
    rows = db.all("SELECT status, visible_at FROM {{prefix}}_jobs WHERE kind = 'cli.tick'")
    assert rows
    assert {row["status"] for row in rows} == {"pending"}
    assert {(row["visible_at"].second, row["visible_at"].microsecond) for row in rows} == {(0, 0)}
    assert len({row["visible_at"] for row in rows}) == len(rows)


# -------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("argv", "status", "fragment"),
    [
        (["stats", "--prefix", "Bad-Name"], 2, "invalid prefix 'Bad-Name'"),
        (["stats", "--database-url", UNREACHABLE], 1, "venturi: error: "),
        (
            ["jobs", "show", "01ARZ3NDEKTSV4RRFFQ69G5FAV"],
            1,
            "no job with id '01ARZ3NDEKTSV4RRFFQ69G5FAV'",
        ),
        (["jobs", "cancel", "01ARZ3NDEKTSV4RRFFQ69G5FAV"], 1, "no job with id"),
        (["cleanup", "--older-than", "7x"], 2, "invalid duration '7x'"),
        (
            ["stats", "--app", "venturi_no_such_module:app"],
            2,
            "cannot import module 'venturi_no_such_module'",
        ),
        (["stats", "--app", "cli_app:missing"], 2, "module 'cli_app' has no attribute 'missing'"),
        (["worker"], 2, "no tasks to run: pass --app"),
        (["beat"], 2, "no schedules to run: pass --app"),
    ],
    ids=[
        "bad-prefix",
        "unreachable-database",
        "unknown-job",
        "cancel-unknown-job",
        "bad-duration",
        "bad-app-module",
        "bad-app-attribute",
        "worker-without-tasks",
        "beat-without-schedules",
    ],
)
def test_errors_exit_non_zero_with_one_line_and_no_traceback(
    venturi_cli: Run, argv: list[str], status: int, fragment: str
) -> None:
    assert fragment in failed_with(venturi_cli(*argv), status)
