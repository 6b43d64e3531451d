"""The CLI's input handling, in process: arguments, durations, cursors, errors.

Nothing here reaches a database: every case fails (or is parsed) before the
App would open a connection.
"""

from __future__ import annotations

import string
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from venturi.cli import build_parser, main
from venturi.cli.common import format_age, format_table, parse_duration
from venturi.cursor import Cursor, decode_cursor, encode_cursor


def single_error_line(captured: pytest.CaptureResult[str]) -> str:
    """The one line a failing command may print: on stderr, nothing on stdout."""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("venturi: error: "), lines[0]
    assert captured.out == ""
    return lines[0]


# ------------------------------------------------------------------ durations


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("30s", timedelta(seconds=30)),
        ("15m", timedelta(minutes=15)),
        ("12h", timedelta(hours=12)),
        ("7d", timedelta(days=7)),
        ("2w", timedelta(weeks=2)),
        ("0s", timedelta(0)),
        ("1.5h", timedelta(minutes=90)),
        ("1h30m", timedelta(minutes=90)),
        ("1w2d3h4m5s", timedelta(weeks=1, days=2, hours=3, minutes=4, seconds=5)),
        ("7D", timedelta(days=7)),
    ],
)
def test_durations_are_a_number_and_a_unit_or_a_sum_of_them(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "7", "7x", "-7d", "d", "7d3", "1h 30m", "7 d", "1e3s", "x7d"])
def test_durations_without_a_known_unit_are_refused_with_the_accepted_forms(text: str) -> None:
    with pytest.raises(ValueError, match=r"invalid duration .*30s, 15m, 12h, 7d, 2w"):
        parse_duration(text)


def test_a_duration_too_large_for_a_timedelta_is_refused() -> None:
    with pytest.raises(ValueError, match="too large"):
        parse_duration("99999999999w")


@given(st.integers(min_value=0, max_value=10_000), st.sampled_from("smhdw"))
def test_every_whole_number_of_every_unit_parses(number: int, unit: str) -> None:
    seconds = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[unit]
    assert parse_duration(f"{number}{unit}") == timedelta(seconds=number * seconds)


# -------------------------------------------------------------------- cursors

ids = st.text(alphabet=string.ascii_letters + string.digits, min_size=1, max_size=30)
offsets = st.integers(min_value=-14 * 60, max_value=14 * 60).map(
    lambda minutes: timezone(timedelta(minutes=minutes))
)


@given(
    st.datetimes(
        min_value=datetime(1970, 1, 2),
        max_value=datetime(9999, 12, 30),
        timezones=st.one_of(st.just(UTC), offsets),
    ),
    ids,
)
def test_a_cursor_survives_its_text_form_to_the_microsecond(
    created_at: datetime, job_id: str
) -> None:
    cursor = Cursor(created_at=created_at, id=job_id)
    text = encode_cursor(cursor)
    assert set(text) <= set(string.ascii_letters + string.digits + "-_"), "shell- and URL-safe"
    assert decode_cursor(text) == cursor


@pytest.mark.parametrize(
    "text",
    [
        "",
        "abc",
        "!!!!",
        encode_cursor(Cursor(datetime(2026, 1, 1, tzinfo=UTC), "x"))[:-3],
        "MTc2NzIyNTYwMDAwMDAwMC4",  # "1767225600000000.": no id
        "LjAxSjAwMDAwMDAw",  # ".01J00000000": no time
        "eC4wMUowMDAwMDAwMA",  # "x.01J00000000": not a time
        "OTk5OTk5OTk5OTk5OTk5OTk5OTkuMDFK",  # "99999999999999999999.01J": out of range
        "eyJhIjoxfQ",  # {"a":1}
    ],
)
def test_a_cursor_the_cli_did_not_print_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="invalid cursor"):
        decode_cursor(text)


# ------------------------------------------------------------------ arguments


def test_app_options_may_come_before_or_after_the_subcommand() -> None:
    parser = build_parser()
    before = parser.parse_args(["--app", "m:app", "--prefix", "p1", "jobs", "list"])
    after = parser.parse_args(
        ["jobs", "list", "--app", "m:app", "--database-url", "postgresql://h/d"]
    )
    assert (before.app, before.prefix, before.database_url) == ("m:app", "p1", None)
    assert (after.app, after.prefix, after.database_url) == ("m:app", None, "postgresql://h/d")


def test_an_app_option_after_the_subcommand_wins_over_one_before_it() -> None:
    args = build_parser().parse_args(["--prefix", "outer", "stats", "--prefix", "inner"])
    assert args.prefix == "inner"


def test_worker_options_have_documented_defaults() -> None:
    args = build_parser().parse_args(["worker"])
    assert (args.concurrency, args.kinds, args.grace, args.prefetch) == (8, None, 30.0, None)


@pytest.mark.parametrize(("text", "prefetch"), [("0", 0), ("64", 64)])
def test_worker_prefetch_takes_zero_or_a_positive_count(text: str, prefetch: int) -> None:
    assert build_parser().parse_args(["worker", "--prefetch", text]).prefetch == prefetch


@pytest.mark.parametrize(
    ("argv", "concurrency", "kinds", "grace"),
    [
        (["--concurrency", "3", "--kinds", "a,b", "--grace", "2.5"], 3, ["a", "b"], 2.5),
        (["--kinds", " mail.send , ,reports.nightly"], 8, ["mail.send", "reports.nightly"], 30.0),
        (["--grace", "1m"], 8, None, 60.0),
        (["--grace", "0"], 8, None, 0.0),
    ],
)
def test_worker_options_parse(
    argv: list[str], concurrency: int, kinds: list[str] | None, grace: float
) -> None:
    args = build_parser().parse_args(["worker", *argv])
    assert (args.concurrency, args.kinds, args.grace) == (concurrency, kinds, grace)


def test_jobs_list_takes_filters_a_limit_and_a_cursor() -> None:
    cursor = Cursor(datetime(2026, 6, 7, 12, 0, 0, 123456, tzinfo=UTC), "01J0000000000000000000000")
    argv = ["jobs", "list", "--status", "dead", "--kind", "mail.send", "--limit", "10"]
    args = build_parser().parse_args([*argv, "--after", encode_cursor(cursor), "--json"])
    assert (args.status, args.kind, args.limit, args.after, args.json) == (
        "dead",
        "mail.send",
        10,
        cursor,
        True,
    )


def test_cleanup_takes_a_duration_a_terminal_status_and_a_batch_size() -> None:
    args = build_parser().parse_args(
        ["cleanup", "--older-than", "2w", "--status", "completed", "--batch-size", "500"]
    )
    assert (args.older_than, args.status, args.batch_size) == (timedelta(weeks=2), "completed", 500)


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        ([], "required: COMMAND"),
        (["launch"], "invalid choice: 'launch'"),
        (["jobs"], "jobs: the following arguments are required: ACTION"),
        (["jobs", "show"], "jobs show: the following arguments are required: ID"),
        (["cleanup"], "the following arguments are required: --older-than"),
        (["cleanup", "--older-than", "7x"], "invalid duration '7x'"),
        (["cleanup", "--older-than", "7d", "--status", "pending"], "invalid choice: 'pending'"),
        (["cleanup", "--older-than", "7d", "--batch-size", "0"], "must be a positive integer"),
        (["jobs", "list", "--limit", "0"], "must be a positive integer"),
        (["jobs", "list", "--limit", "ten"], "must be a positive integer"),
        (["jobs", "list", "--status", "bogus"], "invalid choice: 'bogus'"),
        (["jobs", "list", "--after", "not-a-cursor"], "invalid cursor"),
        (["worker", "--concurrency", "-1"], "must be a positive integer"),
        (["worker", "--kinds", ","], "invalid kinds"),
        (["worker", "--grace", "nan"], "must be a finite number"),
        (["worker", "--prefetch", "-1"], "must be 0 or a positive integer"),
        (["worker", "--prefetch", "many"], "must be 0 or a positive integer"),
        (["stats", "--verbose", "--nope"], "unrecognized arguments: --nope"),
    ],
)
def test_bad_usage_exits_2_with_one_error_line(
    argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    assert fragment in single_error_line(capsys.readouterr())


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["jobs", "list", "--help"]) == 0
    assert "--after CURSOR" in capsys.readouterr().out


def test_a_bad_prefix_is_refused_before_any_connection(capsys: pytest.CaptureFixture[str]) -> None:
    unreachable = "postgresql://postgres@127.0.0.1:1/x"
    assert main(["stats", "--prefix", "Bad-Name", "--database-url", unreachable]) == 2
    assert "invalid prefix 'Bad-Name'" in single_error_line(capsys.readouterr())


# ----------------------------------------------------------------------- --app


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A user's project directory, the current directory of the command."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    ("module_source", "spec", "fragment"),
    [
        (
            None,
            "venturi_cli_no_such_module:app",
            "cannot import module 'venturi_cli_no_such_module'",
        ),
        ("app = 1\n", "{module}:missing", "has no attribute 'missing'"),
        ("app = 1\n", "{module}:app", "is an object of type int, not a venturi.App"),
        ("app = 1\n", "{module}", "is an object of type int, not a venturi.App"),
        ("import venturi_cli_missing_dependency\n", "{module}:app", "No module named"),
        ("raise RuntimeError('boom at import')\n", "{module}:app", "RuntimeError: boom at import"),
        ("def broken(:\n", "{module}:app", "SyntaxError"),
        ("app = 1\n", "{module}:1st", "invalid --app"),
        ("app = 1\n", ":app", "invalid --app"),
    ],
)
def test_an_app_that_cannot_be_loaded_exits_2_with_one_error_line(
    project: Path,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
    module_source: str | None,
    spec: str,
    fragment: str,
) -> None:
    module = f"venturi_cli_user_{abs(hash(request.node.name))}"
    if module_source is not None:
        (project / f"{module}.py").write_text(module_source)
    assert main(["stats", "--app", spec.format(module=module)]) == 2
    assert fragment in single_error_line(capsys.readouterr())


# --------------------------------------------------------------------- output


def test_tables_align_columns_and_leave_no_trailing_spaces() -> None:
    lines = format_table(
        ("ID", "KIND", "N", "NOTE"),
        [("1", "a.long.kind", "7", ""), ("22", "b", "10", "x")],
        right={2},
    )
    assert lines == [
        "ID  KIND          N  NOTE",
        "1   a.long.kind   7",
        "22  b            10  x",
    ]


@pytest.mark.parametrize(
    ("age", "text"),
    [
        (None, "-"),
        (timedelta(seconds=-3), "0s"),
        (timedelta(seconds=45.9), "45s"),
        (timedelta(minutes=3, seconds=12), "3m12s"),
        (timedelta(hours=2, minutes=5), "2h05m"),
        (timedelta(days=3, hours=4, minutes=59), "3d04h"),
        (timedelta(days=7), "7d"),
        (timedelta(hours=1), "1h"),
        (timedelta(minutes=5), "5m"),
    ],
)
def test_ages_read_as_short_durations(age: timedelta | None, text: str) -> None:
    assert format_age(age) == text
