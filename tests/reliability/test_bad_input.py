"""Bad input is refused at the call with a typed error, and writes nothing (SPEC 3, 4).

Payloads that are not strict JSON, kinds, dedup keys, prefixes, delays and
tiers, cron expressions and time zones, generated with hypothesis (modest
example counts) plus the hostile examples worth naming. Each refused call
must raise its documented ``VenturiError`` and leave both tables exactly as
they were: the test compares a checksum of every row of both tables, taken
over a queue that already holds rows in several states, before and after.

Values that are valid text but look like SQL (kinds, dedup keys, ids) are
not refused: they are stored verbatim, travel only as parameters, and do
nothing.

Hypothesis runs each test's examples inside one call of the test, sharing its
function-scoped fixtures; that is sound here because every example either
writes nothing or removes the one row it wrote, and compares checksums taken
within the example itself.
"""

from __future__ import annotations

import contextlib
import math
import re
import unicodedata
import zoneinfo
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest
from fault_tools import table_checksums
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st
from support import UNREACHABLE

import venturi
from venturi import cli, cron
from venturi.errors import (
    EnqueueError,
    InvalidArgument,
    InvalidDelay,
    InvalidKind,
    InvalidPayload,
    InvalidPrefix,
    InvalidPriority,
    InvalidSchedule,
    JobNotFound,
)
from venturi.naming import MAX_PREFIX_LENGTH
from venturi.options import MAX_DEDUP_KEY_BYTES, MAX_KIND_BYTES
from venturi.postgres import PostgresBackend
from venturi.refs import JobRef
from venturi.serialization import MAX_DEPTH, MAX_ENCODED_BYTES, encode_json
from venturi.worker import Worker

EXAMPLES = settings(
    max_examples=40,
    deadline=None,  # no timing: the machine may be busy
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

SQL_LOOKING = [
    "x'); DROP TABLE {prefix}_jobs; --",
    "'; TRUNCATE {prefix}_journal; SELECT '",
    '" OR 1=1 --',
    "$$; DELETE FROM {prefix}_jobs; $$",
    "%(kinds)s",
    "%s%s%s",
    "{{prefix}}_jobs",
    "\\x27; DROP TABLE x",
    "1; COMMIT; DROP SCHEMA public CASCADE",
]

# -- strategies -----------------------------------------------------------------------

text = st.text(st.characters(codec="utf-8", exclude_characters="\x00"), max_size=20)
json_leaf = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    text,
)
lone_surrogate = st.tuples(
    text, st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), text
).map("".join)
with_nul = st.tuples(text, text).map("\x00".join)
not_strict_json = st.one_of(
    with_nul,
    lone_surrogate,
    st.integers(min_value=2**64),
    st.integers(max_value=-(2**63) - 1),
    st.sampled_from([math.nan, math.inf, -math.inf, Decimal("NaN"), Decimal("-Infinity")]),
    st.binary(),
    st.binary().map(bytearray),
    st.sets(st.integers(), max_size=3),
    st.frozensets(st.integers(), max_size=3),
    st.dictionaries(
        st.one_of(st.integers(), st.booleans(), st.none(), st.tuples(st.integers())),
        json_leaf,
        min_size=1,
        max_size=3,
    ),
    st.dictionaries(with_nul, json_leaf, min_size=1, max_size=2),
    st.sampled_from([object(), timedelta(seconds=1), complex(1, 2), range(3)]),
)


def _inside(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """``inner`` placed among valid siblings, in a list or under a key."""
    return st.one_of(
        st.tuples(st.lists(json_leaf, max_size=3), inner, st.lists(json_leaf, max_size=3)).map(
            lambda parts: [*parts[0], parts[1], *parts[2]]
        ),
        st.tuples(st.dictionaries(text, json_leaf, max_size=3), text, inner).map(
            lambda parts: {**parts[0], parts[1]: parts[2]}
        ),
    )


#: A value that is not strict JSON, somewhere inside an otherwise valid structure.
bad_payload_value = st.recursive(not_strict_json, _inside, max_leaves=4)


def nested(levels: int) -> list[Any]:
    """Arrays nested ``levels`` deep."""
    value: list[Any] = []
    for _ in range(levels - 1):
        value = [value]
    return value


def is_control(character: str) -> bool:
    return unicodedata.category(character) == "Cc"


def utf8_size(value: str) -> int | None:
    """Bytes of UTF-8, or None when the text cannot be encoded (a lone surrogate)."""
    try:
        return len(value.encode())
    except UnicodeEncodeError:
        return None


def zone_directories() -> set[str]:
    """Names that are directories of the time-zone database (``Europe``, ``US`` ...)."""
    roots = [Path(p) for p in zoneinfo.TZPATH]
    with contextlib.suppress(ModuleNotFoundError):
        roots.append(Path(str(files("tzdata").joinpath("zoneinfo"))))
    found = set()
    for root in roots:
        if root.is_dir():
            found.update(str(p.relative_to(root)) for p in root.rglob("*") if p.is_dir())
    return found


ZONE_DIRECTORIES = zone_directories()

# -- fixtures -------------------------------------------------------------------------


@pytest.fixture
def queue(app: venturi.App, db: Any) -> venturi.App:
    """The test App with rows in several states, so 'unchanged' covers real data."""

    @app.task(kind="bad.seed")
    def seed(n: int) -> int:
        return n

    for n in range(3):
        seed.delay(n)
    Worker(app, concurrency=1).run_once()
    assert {row["status"] for row in db.jobs()} == {"pending", "completed"}
    return app


@pytest.fixture
def take(queue: venturi.App) -> Any:
    @queue.task(kind="bad.take")
    def take(value: Any = None) -> None:
        return None

    return take


def sibling(queue: venturi.App) -> venturi.App:
    """Another App on the same backend: its own registry, so any kind can be registered."""
    return venturi.App(
        queue.database_url, prefix=queue.prefix, backend=queue.backend, set_as_current=False
    )


def delete_job(db: Any, job_id: str) -> None:
    db.execute("DELETE FROM {{prefix}}_jobs WHERE id = %s", (job_id,))


# -- payloads -------------------------------------------------------------------------


@EXAMPLES
@given(value=bad_payload_value)
def test_a_payload_that_is_not_strict_json_is_refused_at_every_enqueue_call_and_writes_nothing(
    take: Any, db: Any, value: Any
) -> None:
    before = table_checksums(db)
    for call in (
        lambda: take.delay(value),
        lambda: take.apply_async(kwargs={"value": value}, countdown=10),
        lambda: take.delay_many([{"value": 1}, {"value": value}, {"value": 2}]),
    ):
        with pytest.raises(InvalidPayload) as refused:
            call()
        assert "not strict JSON" in str(refused.value)
    assert table_checksums(db) == before


@EXAMPLES
@given(levels=st.integers(min_value=MAX_DEPTH, max_value=5000))
def test_a_payload_nested_deeper_than_the_documented_limit_is_refused(
    take: Any, db: Any, levels: int
) -> None:
    before = table_checksums(db)
    with pytest.raises(InvalidPayload, match=f"nested deeper than {MAX_DEPTH} levels"):
        take.delay(nested(levels))  # one more level: the payload object itself
    assert table_checksums(db) == before


@settings(EXAMPLES, max_examples=8)
@given(excess=st.integers(min_value=1, max_value=MAX_ENCODED_BYTES), shape=st.sampled_from("sl"))
def test_a_payload_over_the_documented_size_limit_is_refused(
    take: Any, db: Any, excess: int, shape: str
) -> None:
    size = MAX_ENCODED_BYTES + excess
    # One long string, or many small numbers: the limit is on the encoded bytes.
    value: Any = "x" * size if shape == "s" else [1] * (size // 2)
    before = table_checksums(db)
    with pytest.raises(InvalidPayload, match=f"over the limit of {MAX_ENCODED_BYTES}"):
        take.delay(value)
    assert table_checksums(db) == before


def test_payloads_exactly_at_the_documented_limits_are_stored(take: Any, db: Any) -> None:
    overhead = len(encode_json({"value": ""}, what="payload"))
    largest = take.delay("x" * (MAX_ENCODED_BYTES - overhead))
    deepest = take.delay(nested(MAX_DEPTH - 1))
    stored = {
        row["id"]: row["size"]
        for row in db.all("SELECT id, octet_length(payload::text) AS size FROM {{prefix}}_jobs")
    }
    assert stored[largest.id] >= MAX_ENCODED_BYTES - overhead
    assert deepest.id in stored
    with pytest.raises(InvalidPayload):
        take.delay("x" * (MAX_ENCODED_BYTES - overhead + 1))


# -- kinds ----------------------------------------------------------------------------


@EXAMPLES
@given(kind=st.text(st.characters(codec="utf-8"), max_size=300))
@example(kind="")
@example(kind="mail\nsend")
@example(kind="mail\x00send")
@example(kind="\x1b[31mred")
@example(kind="\u0085next-line")
@example(kind="é" * (MAX_KIND_BYTES // 2 + 1))
@example(kind="\u202eright-to-left override")
def test_any_kind_is_either_refused_with_invalid_kind_or_stored_verbatim_and_run(
    queue: venturi.App, db: Any, kind: str
) -> None:
    other = sibling(queue)
    before = table_checksums(db)
    size = utf8_size(kind)
    is_valid = bool(kind) and not any(map(is_control, kind)) and size is not None
    if not is_valid or size is None or size > MAX_KIND_BYTES:
        with pytest.raises(InvalidKind):
            other.task(kind=kind)(lambda n: n)
        assert table_checksums(db) == before
        return
    handler = other.task(kind=kind)(lambda n: n)
    ref = handler.delay(7)
    assert Worker(other, kinds=[kind], concurrency=1).run_once() == 1
    row = db.one("SELECT kind, status FROM {{prefix}}_jobs WHERE id = %s", (ref.id,))
    assert (row["kind"], row["status"]) == (kind, "completed")
    delete_job(db, ref.id)
    assert table_checksums(db) == before


@pytest.mark.parametrize("template", SQL_LOOKING)
def test_a_kind_that_looks_like_sql_is_stored_verbatim_run_and_listed_and_executes_nothing(
    queue: venturi.App, db: Any, template: str
) -> None:
    kind = template.format(prefix=db.prefix)
    other = sibling(queue)
    handler = other.task(kind=kind)(lambda n: n)
    before = table_checksums(db)

    ref = handler.delay(1)
    assert Worker(other, kinds=[kind], concurrency=1).run_once() == 1

    [listed] = other.jobs(kind=kind).jobs
    assert (listed.id, listed.kind) == (ref.id, kind)
    assert other.job(ref.id).journal[-1].kind == kind
    assert [k.kind for k in other.stats().kinds if k.kind == kind] == [kind]
    delete_job(db, ref.id)
    assert table_checksums(db) == before


def test_a_kind_with_a_lone_surrogate_is_refused_with_invalid_kind(
    queue: venturi.App, db: Any
) -> None:
    before = table_checksums(db)
    with pytest.raises(InvalidKind):
        sibling(queue).task(kind="mail\ud800send")(lambda n: n)
    assert table_checksums(db) == before


# -- dedup keys -----------------------------------------------------------------------


@EXAMPLES
@given(
    key=st.one_of(
        st.text(st.characters(codec="utf-8"), max_size=40),
        st.text(st.characters(codec="utf-8"), min_size=MAX_DEDUP_KEY_BYTES - 2, max_size=1100),
        lone_surrogate,
        st.integers(min_value=-(10**30), max_value=10**30),
        st.floats(),
        st.booleans(),
        st.binary(max_size=5),
        st.lists(st.integers(), max_size=2),
    )
)
@example(key="'); DELETE FROM x; --")
@example(key="a\x00b")
@example(key=True)
def test_any_dedup_key_is_either_refused_with_a_typed_error_or_stored_verbatim_and_used(
    take: Any, db: Any, key: Any
) -> None:
    before = table_checksums(db)
    text_key = str(key) if isinstance(key, int) and not isinstance(key, bool) else key
    size = utf8_size(text_key) if isinstance(text_key, str) else None
    is_valid = (
        size is not None and size <= MAX_DEDUP_KEY_BYTES and not any(map(is_control, text_key))
    )
    if not is_valid:
        with pytest.raises(InvalidPayload):
            take.apply_async(kwargs={"value": 1}, dedup_key=key)
        assert table_checksums(db) == before
        return
    first = take.apply_async(kwargs={"value": 1}, dedup_key=key)
    again = take.apply_async(kwargs={"value": 2}, dedup_key=key)
    assert again == JobRef(first.id, merged=True)
    row = db.one("SELECT dedup_key FROM {{prefix}}_jobs WHERE id = %s", (first.id,))
    assert row["dedup_key"] == text_key
    delete_job(db, first.id)
    assert table_checksums(db) == before


# -- delays and tiers -----------------------------------------------------------------


bad_countdown = st.one_of(
    st.floats(max_value=-1e-6),
    st.integers(max_value=-1),
    st.sampled_from([math.nan, math.inf, -math.inf, -timedelta(microseconds=1), timedelta.max]),
    # Beyond the year 9999 (10**12 s is some 31,700 years), or beyond what a timedelta holds.
    st.integers(min_value=10**12, max_value=2**70),
    st.floats(min_value=1e12, allow_infinity=False),
    st.sampled_from(["10", b"1", [1], True]),
)
good_countdown = st.one_of(
    st.none(), st.floats(min_value=0, max_value=1e6), st.integers(min_value=0, max_value=10**6)
)
bad_priority = st.one_of(
    st.integers().filter(lambda n: n not in (0, 1, 2)),
    st.floats(),
    st.booleans(),
    st.sampled_from(["1", "HIGH", None.__class__]),
)
good_priority = st.one_of(st.none(), st.sampled_from([0, 1, 2, venturi.Priority.HIGH]))


@EXAMPLES
@given(
    options=st.one_of(
        st.tuples(bad_countdown, st.one_of(good_priority, bad_priority)),
        st.tuples(st.one_of(good_countdown, bad_countdown), bad_priority),
    )
)
def test_a_countdown_or_tier_out_of_range_is_refused_with_a_typed_error(
    take: Any, db: Any, options: tuple[Any, Any]
) -> None:
    countdown, priority = options
    before = table_checksums(db)
    with pytest.raises((InvalidDelay, InvalidPriority)):
        take.apply_async(kwargs={"value": 1}, countdown=countdown, priority=priority)
    assert table_checksums(db) == before


def test_a_naive_or_unrepresentable_eta_is_refused(take: Any, db: Any) -> None:
    before = table_checksums(db)
    for eta in (datetime(2030, 1, 1), datetime.min.replace(tzinfo=timezone(timedelta(hours=1)))):
        with pytest.raises(EnqueueError):
            take.apply_async(kwargs={"value": 1}, eta=eta)
    with pytest.raises(InvalidDelay):
        take.apply_async(kwargs={"value": 1}, eta=datetime.now(UTC), countdown=1)
    assert table_checksums(db) == before


# -- prefixes -------------------------------------------------------------------------


@EXAMPLES
@given(raw=st.one_of(st.text(max_size=70), st.from_regex(r"[a-z_][a-z0-9_]{0,60}", fullmatch=True)))
@example(raw="venturi; DROP TABLE venturi_jobs")
@example(raw="Venturi")
@example(raw="venturi\n")
@example(raw="pg_catalog.x")
@example(raw="a" * (MAX_PREFIX_LENGTH + 1))
@example(raw="ünicode")
@example(raw="1abc")
def test_a_prefix_is_accepted_only_as_a_short_safe_identifier_and_refused_before_any_sql(
    db: Any, raw: str
) -> None:
    before = table_checksums(db)
    is_valid = re.fullmatch(r"[a-z_][a-z0-9_]*", raw) is not None and len(raw) <= MAX_PREFIX_LENGTH
    # The URL leads nowhere: a refusal that had tried the database would be a
    # BackendUnavailable, not an InvalidPrefix.
    if is_valid:
        assert venturi.App(UNREACHABLE, prefix=raw, set_as_current=False).prefix == raw
        PostgresBackend(UNREACHABLE, prefix=raw).close()
    else:
        with pytest.raises(InvalidPrefix):
            venturi.App(UNREACHABLE, prefix=raw, set_as_current=False)
        with pytest.raises(InvalidPrefix):
            PostgresBackend(UNREACHABLE, prefix=raw)
    assert table_checksums(db) == before


def test_the_cli_refuses_a_hostile_prefix_with_one_line_and_exit_status_2(
    db: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    before = table_checksums(db)
    hostile = f"{db.prefix}; DROP TABLE {db.prefix}_jobs"
    status = cli.main(["stats", "--database-url", UNREACHABLE, "--prefix", hostile])
    err = capsys.readouterr().err
    assert status == cli.EXIT_USAGE
    assert err.startswith("venturi: error: invalid prefix") and err.count("\n") == 1, err
    assert table_checksums(db) == before


# -- cron expressions and time zones --------------------------------------------------

cron_field = st.one_of(
    st.sampled_from(
        [
            "*",
            "?",
            "L",
            "W",
            "#",
            "/",
            "-",
            ",",
            "0",
            "7",
            "31",
            "60",
            "99",
            "MON",
            "jan",
            "*/0",
            "*/15",
            "1-5",
            "5-1",
            "1W",
            "5#3",
            "L-2",
            "0-59/0",
        ]
    ),
    st.text(max_size=3),
)
cron_expression = st.one_of(
    st.lists(cron_field, min_size=1, max_size=7).map(" ".join),
    st.text(max_size=30),
)


@EXAMPLES
@given(expression=cron_expression)
@example(expression="0 0 30 2 *")
@example(expression="* * * * * * *")
@example(expression="@reboot")
@example(expression="0 3 * * *; DROP TABLE x")
@example(expression="*/0 * * * *")
def test_a_cron_expression_is_either_refused_at_declaration_or_schedulable(
    queue: venturi.App, db: Any, expression: str
) -> None:
    other = sibling(queue)
    before = table_checksums(db)
    try:
        handler = other.task(kind="bad.cron", schedule=expression)(lambda: None)
    except InvalidSchedule:
        with pytest.raises(InvalidSchedule):
            other.periodic(expression, other.task(kind="bad.plain")(lambda: None))
    else:
        [schedule] = other.schedules()
        assert schedule.task is handler
        now = datetime(2026, 3, 29, 0, 30, tzinfo=UTC)
        assert cron.next_tick(expression, zoneinfo.ZoneInfo("UTC"), after=now) > now
    assert table_checksums(db) == before


@EXAMPLES
@given(timezone=st.text(st.characters(codec="utf-8"), max_size=40))
@example(timezone="Mars/Olympus_Mons")
@example(timezone="../../../../etc/passwd")
@example(timezone="/etc/localtime")
@example(timezone="UTC\x00")
@example(timezone="")
def test_a_time_zone_is_either_refused_with_invalid_schedule_or_a_real_zone(
    queue: venturi.App, db: Any, timezone: str
) -> None:
    # Directory names of the zone database are a known bug, tested below.
    assume(timezone.strip("/") not in ZONE_DIRECTORIES)
    other = sibling(queue)
    before = table_checksums(db)
    try:
        other.task(kind="bad.zone", schedule="0 3 * * *", timezone=timezone)(lambda: None)
    except InvalidSchedule:
        pass
    else:
        assert cron.zone(timezone).key == timezone
    assert table_checksums(db) == before


@pytest.mark.parametrize("timezone", ["Europe", "America", "a" * 300])
def test_a_time_zone_naming_a_zone_database_directory_or_too_long_is_refused_with_invalid_schedule(
    queue: venturi.App, timezone: str
) -> None:
    with pytest.raises(InvalidSchedule):
        sibling(queue).task(kind="bad.zone", schedule="0 3 * * *", timezone=timezone)(lambda: None)


# -- operations on hostile ids and kinds ----------------------------------------------


@pytest.mark.parametrize("template", SQL_LOOKING)
def test_operations_given_sql_looking_ids_and_kinds_find_nothing_and_change_nothing(
    queue: venturi.App, db: Any, template: str
) -> None:
    hostile = template.format(prefix=db.prefix)
    before = table_checksums(db)
    for operation in (queue.job, queue.retry, queue.cancel):
        with pytest.raises(JobNotFound):
            operation(hostile)
    assert queue.jobs(kind=hostile).jobs == ()
    assert table_checksums(db) == before


@pytest.mark.parametrize("hostile", ["01ABC\x00DEF", "01ABC\ud800DEF"])
def test_operations_given_ids_and_kinds_text_cannot_hold_raise_typed_errors(
    queue: venturi.App, db: Any, hostile: str
) -> None:
    before = table_checksums(db)
    for operation in (queue.job, queue.retry, queue.cancel):
        with pytest.raises(JobNotFound):
            operation(hostile)
    with pytest.raises(InvalidArgument):
        queue.jobs(kind=hostile)
    assert table_checksums(db) == before
