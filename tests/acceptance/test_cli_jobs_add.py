"""``venturi jobs add``: enqueue from a shell, checked exactly like ``.delay()``.

Each command runs the installed ``venturi`` console script in a subprocess,
from this directory (so ``--app jobs_add_app:app`` imports the helper App),
against the real server on the module's migrated prefix; the tests then read
the rows it wrote, and count them after every refusal.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import orjson
import pytest

import venturi

HERE = Path(__file__).parent
CONSOLE_SCRIPT = Path(sys.executable).with_name("venturi")
# A hang guard, not a speed assertion.
COMMAND_TIMEOUT = 60


@pytest.fixture
def jobs_add(database_url: str, prefix: str, app: venturi.App) -> Any:
    """Run ``venturi jobs add ARGS --app jobs_add_app:app --prefix <the module's prefix>``.

    The ``app`` fixture empties the tables first. ``with_app=False`` leaves ``--app`` out.
    """
    env = {k: v for k, v in os.environ.items() if not k.startswith("VENTURI_")}
    env["VENTURI_DATABASE_URL"] = database_url

    def run(*args: str, with_app: bool = True) -> subprocess.CompletedProcess[str]:
        options = ["--app", "jobs_add_app:app"] if with_app else []
        return subprocess.run(
            [str(CONSOLE_SCRIPT), "jobs", "add", *args, *options, "--prefix", prefix],
            capture_output=True,
            text=True,
            cwd=HERE,
            env=env,
            timeout=COMMAND_TIMEOUT,
            check=False,
        )

    return run


def succeeded(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout


def refused(result: subprocess.CompletedProcess[str]) -> str:
    """The one error line of a command refused as bad input (exit 2)."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.startswith("venturi: error: ")
    return line


def test_the_console_script_is_installed() -> None:
    assert CONSOLE_SCRIPT.is_file(), "pip install -e . installs the venturi console script"


def test_jobs_add_prints_the_id_of_a_row_with_the_payload_and_the_task_priority(
    jobs_add: Any, db: Any
) -> None:
    out = succeeded(jobs_add("add.mail", '{"to": "a@example.org", "copies": 2}'))

    [row] = db.jobs()
    assert out == f"{row['id']}\n"
    assert row["kind"] == "add.mail"
    assert row["status"] == "pending"
    assert row["payload"] == {"to": "a@example.org", "copies": 2}
    assert row["priority"] == venturi.Priority.LOW  # the task's own tier
    assert row["visible_at"] == row["created_at"]
    assert row["dedup_key"] is None


def test_countdown_priority_and_json_output(jobs_add: Any, db: Any) -> None:
    result = jobs_add(
        "add.mail", '{"to": "b@example.org"}', "--countdown", "30", "--priority", "high", "--json"
    )

    [row] = db.jobs()
    assert orjson.loads(succeeded(result)) == {"id": row["id"], "merged": False}
    assert row["priority"] == venturi.Priority.HIGH
    assert row["visible_at"] - row["created_at"] == timedelta(seconds=30)


def test_a_countdown_may_be_a_duration(jobs_add: Any, db: Any) -> None:
    succeeded(jobs_add("add.mail", '{"to": "c@example.org"}', "--countdown", "1h30m"))

    [row] = db.jobs()
    assert row["visible_at"] - row["created_at"] == timedelta(hours=1, minutes=30)


def test_an_eta_with_a_time_zone_is_the_visible_at(jobs_add: Any, db: Any) -> None:
    succeeded(jobs_add("add.mail", '{"to": "d@example.org"}', "--eta", "2031-05-01T09:00:00+02:00"))

    [row] = db.jobs()
    assert row["visible_at"] == datetime(2031, 5, 1, 7, 0, tzinfo=UTC)


def test_a_second_add_with_the_same_dedup_key_merges_and_says_so(jobs_add: Any, db: Any) -> None:
    first = succeeded(jobs_add("add.sync", '{"account": "acme"}')).strip()
    second = succeeded(jobs_add("add.sync", '{"account": "acme"}'))
    as_json = orjson.loads(succeeded(jobs_add("add.sync", '{"account": "acme"}', "--json")))

    assert second == f"{first} merged\n"
    assert as_json == {"id": first, "merged": True}
    [row] = db.jobs()
    assert (row["id"], row["dedup_key"]) == (first, "acme")
    assert [e["outcome"] for e in db.journal(first)] == ["merged", "merged"]


def test_an_explicit_dedup_key_replaces_the_task_dedup_function(jobs_add: Any, db: Any) -> None:
    succeeded(jobs_add("add.mail", '{"to": "e@example.org"}', "--dedup-key", "mail-e"))

    [row] = db.jobs()
    assert row["dedup_key"] == "mail-e"


def test_the_json_argument_may_be_left_out_and_means_no_arguments(jobs_add: Any, db: Any) -> None:
    succeeded(jobs_add("add.ping"))
    line = refused(jobs_add("add.mail"))

    assert "missing a required argument: 'to'" in line
    [row] = db.jobs()
    assert (row["kind"], row["payload"]) == ("add.ping", {})


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        (("add.nope", "{}"), "unknown kind 'add.nope'; known kinds: add.mail, add.ping, add.sync"),
        (("add.mail", "[1, 2]"), "is not a JSON object"),
        (("add.mail", '"a@example.org"'), "is not a JSON object"),
        (("add.mail", "{to: 1}"), "invalid JSON"),
        (("add.mail", '{"to": "a", "subjekt": "x"}'), "unexpected keyword argument 'subjekt'"),
        (("add.mail", '{"to": "a", "copies": 18446744073709551616}'), "does not fit in 64 bits"),
        (("add.mail", '{"to": "a", "copies": NaN}'), "NaN and infinities are refused"),
        (("add.mail", '{"to": "a\\u0000"}'), "NUL"),
        (("add.mail", '{"to": "a"}', "--countdown", "soon"), "invalid duration 'soon'"),
        (("add.mail", '{"to": "a"}', "--countdown", "-5"), "countdown must not be negative"),
        (("add.mail", '{"to": "a"}', "--priority", "urgent"), "invalid choice: 'urgent'"),
        (("add.mail", '{"to": "a"}', "--eta", "tomorrow"), "invalid eta 'tomorrow'"),
        (("add.mail", '{"to": "a"}', "--eta", "2031-05-01T09:00:00"), "must be timezone-aware"),
        (
            ("add.mail", '{"to": "a"}', "--eta", "2031-05-01T09:00:00Z", "--countdown", "5"),
            "either countdown or eta",
        ),
        (("add.mail", '{"to": "a"}', "--dedup-key", "a\tb"), "contains control characters"),
    ],
)
def test_each_refusal_is_one_line_with_exit_status_2_and_writes_nothing(
    jobs_add: Any, db: Any, arguments: tuple[str, ...], expected: str
) -> None:
    line = refused(jobs_add(*arguments))

    assert expected in line
    assert db.scalar("SELECT count(*) FROM {{prefix}}_jobs") == 0
    assert db.scalar("SELECT count(*) FROM {{prefix}}_journal") == 0


def test_without_app_no_kind_is_known_and_the_error_says_to_pass_app(
    jobs_add: Any, db: Any
) -> None:
    line = refused(jobs_add("add.mail", '{"to": "a"}', with_app=False))

    assert "pass --app module:attribute" in line
    assert db.scalar("SELECT count(*) FROM {{prefix}}_jobs") == 0
