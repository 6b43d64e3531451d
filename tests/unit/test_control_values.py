"""Control at run time without a database (ADR 0139): the values, how overrides fold
into a claim plan, and the bad input the App and the CLI refuse before connecting."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import venturi
from venturi.cli import build_parser, main
from venturi.controls import UNSET, Limits
from venturi.errors import DuplicateSchedule, InvalidArgument, InvalidSchedule
from venturi.runtime.claim_plan import ClaimPlan
from venturi.types import KindLimits, RateLimit, SharedLimit

#: Nothing listens here: a test that reached the database would fail loudly.
UNREACHABLE = "postgresql://127.0.0.1:1/nowhere?connect_timeout=1"
LEASE = timedelta(seconds=30)


@pytest.fixture
def offline() -> venturi.App:
    return venturi.App(UNREACHABLE, prefix="offline", set_as_current=False)


def test_unset_differs_from_none_and_says_so() -> None:
    assert UNSET is not None
    assert repr(UNSET) == "UNSET"


def test_overrides_replace_declared_limits_only_where_set() -> None:
    declared = Limits(4, "20/s", None)
    assert Limits().over(declared) == declared
    assert Limits(global_concurrency=1).over(declared) == Limits(1, "20/s", None)
    assert Limits(None, "5/m", 3).over(declared) == Limits(4, "5/m", 3)
    assert Limits(1, None, 2).as_dict() == {
        "global_concurrency": 1,
        "rate_limit": None,
        "key_concurrency": 2,
    }


def plan() -> ClaimPlan:
    return ClaimPlan(
        leases={"a": LEASE, "b": LEASE, "fair": LEASE},
        limits={"a": KindLimits(global_concurrency=4)},
        fair=["fair"],
    )


def test_an_override_replaces_a_declared_bound_and_adds_one_to_an_unlimited_kind() -> None:
    claims = plan()
    rate = RateLimit(5, timedelta(seconds=1))
    claims.override({"a": KindLimits(rate_limit=rate), "b": KindLimits(global_concurrency=1)})
    assert claims.limits == {
        "a": KindLimits(global_concurrency=4, rate_limit=rate),
        "b": KindLimits(global_concurrency=1),
    }


def test_clearing_the_overrides_gives_the_declared_limits_back() -> None:
    claims = plan()
    claims.override({"a": KindLimits(global_concurrency=1), "b": KindLimits(global_concurrency=1)})
    claims.override({})
    assert claims.limits == {"a": KindLimits(global_concurrency=4)}


def test_overrides_of_fair_and_unserved_kinds_are_left_out() -> None:
    claims = plan()
    claims.override(
        {"fair": KindLimits(global_concurrency=1), "elsewhere": KindLimits(global_concurrency=1)}
    )
    assert claims.limits == {"a": KindLimits(global_concurrency=4)}


def test_a_key_override_reaches_a_keyed_kind_and_keeps_its_key_rate_and_shared_limits() -> None:
    """ADR 0138/0139: the per-key cap is replaced, the per-key rate and the shared limits
    the kind counts against stay as declared; an unkeyed kind gets no per-key cap."""
    shared = SharedLimit("stripe", ("keyed",), concurrency=5)
    rate = RateLimit(10, timedelta(seconds=1))
    declared = KindLimits(rate_limit=rate, key_concurrency=1, rate_per_key=True, shared=(shared,))
    claims = ClaimPlan(leases={"keyed": LEASE, "plain": LEASE}, limits={"keyed": declared})
    claims.override(
        {"keyed": KindLimits(key_concurrency=3), "plain": KindLimits(key_concurrency=3)}
    )
    assert claims.limits == {
        "keyed": KindLimits(rate_limit=rate, key_concurrency=3, rate_per_key=True, shared=(shared,))
    }
    claims.override({})
    assert claims.limits == {"keyed": declared}


@pytest.mark.parametrize(
    "given",
    [
        {"global_concurrency": -1},
        {"global_concurrency": 0},
        {"key_concurrency": "2"},
        {"rate_limit": "10 per second"},
        {},
    ],
)
def test_bad_limits_are_refused_before_any_connection(
    offline: venturi.App, given: dict[str, object]
) -> None:
    with pytest.raises(InvalidArgument):
        offline.set_limits("any.kind", **given)  # type: ignore[arg-type]
    assert offline._backend is None


def test_bad_schedules_are_refused_before_any_connection(offline: venturi.App) -> None:
    task = offline.task(kind="offline.report")(lambda: None)
    offline.periodic("0 * * * *", task, name="in-code")
    for args in [
        ("x", "not cron", task),
        ("x", "* * * * *", "unknown.kind"),
        ("in-code", "* * * * *", task),
    ]:
        with pytest.raises(InvalidSchedule):
            offline.add_schedule(*args)
    with pytest.raises(DuplicateSchedule):
        offline.add_schedule("in-code", "* * * * *", task)
    for change in (offline.pause_schedule, offline.resume_schedule, offline.remove_schedule):
        with pytest.raises(InvalidSchedule):
            change("in-code")
    assert offline._backend is None


def test_the_limits_command_reads_none_as_clearing_and_leaves_the_rest_unset() -> None:
    args = build_parser().parse_args(
        ["kinds", "limits", "k", "--global-concurrency", "none", "--rate-limit", "3/s"]
    )
    assert (args.global_concurrency, args.rate_limit, args.key_concurrency) == (None, "3/s", UNSET)
    args = build_parser().parse_args(["kinds", "--json"])
    assert args.json is True


@pytest.mark.parametrize(
    "argv",
    [
        ["kinds", "limits", "k", "--global-concurrency", "many"],
        ["kinds", "limits", "k"],
        ["schedules", "backfill", "n", "--start", "2026-01-01T00:00", "--end", "2026-01-02Z"],
        ["schedules", "add", "n", "* * * * *", "k", "--kwargs", "[1]"],
        ["schedules", "frobnicate", "n"],
    ],
)
def test_bad_control_commands_are_usage_errors_before_any_connection(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main([*argv, "--database-url", UNREACHABLE]) == 2
    assert capsys.readouterr().err.startswith("venturi: error: ")


def test_a_backfill_end_must_be_aware() -> None:
    args = build_parser().parse_args(
        ["schedules", "backfill", "n", "--start", "2026-01-01T00:00Z", "--end", "2026-01-02T00:00Z"]
    )
    assert args.start == datetime(2026, 1, 1, tzinfo=UTC)
