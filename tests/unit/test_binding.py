"""Binding calls to the handler's signature: the payload written at enqueue, the call
rebuilt at run time, and every refusal before any I/O (``new_job`` does no I/O)."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta, timezone
from decimal import Decimal
from typing import Any
from uuid import UUID

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from venturi.binding import Binding
from venturi.context import Context
from venturi.errors import (
    ArgumentsMismatch,
    ConfigurationError,
    EnqueueError,
    InvalidDelay,
    InvalidPayload,
    InvalidPriority,
)
from venturi.merge import Merge
from venturi.options import MAX_DEDUP_KEY_BYTES, TaskOptions
from venturi.registry import Registry
from venturi.task import Task, TaskDecorator
from venturi.types import MergeAction, NewJob, Priority


def build(fn: Callable[..., Any], **options: Any) -> Task[..., Any]:
    return TaskDecorator(TaskOptions.parse(**options), registry=Registry())(fn)


def send(ctx: Context, to: str, subject: str = "hello", *, urgent: bool = False) -> str:
    return f"{ctx.kind}:{to}:{subject}:{urgent}"


def payload(job: NewJob) -> Any:
    return orjson.loads(job.payload)


# -- payload at enqueue --------------------------------------------------------------


def test_the_payload_is_an_object_of_the_named_arguments_passed() -> None:
    t = build(send)
    assert payload(t.new_job(("a@x.org",), {"subject": "hi"})) == {"to": "a@x.org", "subject": "hi"}
    assert payload(t.new_job((), {"to": "a@x.org", "urgent": True})) == {
        "to": "a@x.org",
        "urgent": True,
    }


def test_defaults_are_not_stored_so_a_changed_default_applies_to_queued_jobs() -> None:
    assert payload(build(send).new_job(("a@x.org",))) == {"to": "a@x.org"}


@pytest.mark.parametrize(
    ("args", "kwargs"),
    [
        ((), {}),
        (("a", "b", "c"), {}),
        (("a",), {"subjekt": "hi"}),
        (("a",), {"to": "b"}),
        (("a", "b", True), {}),
        ((), {"ctx": None, "to": "a"}),
    ],
    ids=["missing", "too-many", "unknown-keyword", "twice", "keyword-only-by-position", "ctx"],
)
def test_a_call_that_does_not_fit_the_signature_is_refused(
    args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(ArgumentsMismatch, match=r"send\(to: str, subject: str = 'hello', \*"):
        build(send, kind="send").new_job(args, kwargs)


def test_positional_arguments_alone_must_still_give_every_required_keyword_only_one() -> None:
    """Positional arguments alone are bound by counting them; a required keyword-only
    parameter is what counting cannot give."""

    def notify(to: str, subject: str = "hi", *, channel: str) -> None: ...

    t = build(notify, kind="notify")
    assert payload(t.new_job(("a", "b"), {"channel": "sms"})) == {
        "to": "a",
        "subject": "b",
        "channel": "sms",
    }
    for args in (("a",), ("a", "b")):
        with pytest.raises(ArgumentsMismatch, match="missing a required argument: 'channel'"):
            t.new_job(args)


@pytest.mark.parametrize("args", ["ab", b"ab", 5])
def test_args_must_be_a_sequence_of_positional_arguments(args: Any) -> None:
    with pytest.raises(ArgumentsMismatch, match="args must be"):
        build(send).new_job(args)


def test_kwargs_must_be_a_mapping() -> None:
    with pytest.raises(ArgumentsMismatch, match="kwargs must be"):
        build(send).new_job((), [("to", "a")])  # type: ignore[arg-type]


def test_a_payload_that_is_not_json_is_refused_naming_the_argument() -> None:
    with pytest.raises(InvalidPayload, match=r"payload of 'send'.*at \$\.subject"):
        build(send, kind="send").new_job(("a",), {"subject": b"bytes"})
    with pytest.raises(InvalidPayload, match=r"at \$\.to"):
        build(send).new_job((float("nan"),))


def positional_only(a: int, b: int = 2, /, c: int = 3) -> tuple[int, int, int]:
    return a, b, c


def variadic(first: int, *rest: int, **extra: Any) -> tuple[int, tuple[int, ...], dict[str, Any]]:
    return first, rest, extra


def test_positional_only_arguments_are_stored_by_name() -> None:
    t = build(positional_only)
    job = t.new_job((1, 5), {"c": 6})
    assert payload(job) == {"a": 1, "b": 5, "c": 6}
    assert t.binding.prepare(None, payload(job))() == (1, 5, 6)
    assert t.binding.prepare(None, {"a": 1, "c": 9})() == (1, 2, 9)


def test_star_args_are_stored_as_an_array_and_extra_keywords_beside_the_named_ones() -> None:
    t = build(variadic)
    job = t.new_job((1, 2, 3), {"colour": "red"})
    assert payload(job) == {"first": 1, "rest": [2, 3], "colour": "red"}
    assert t.binding.prepare(None, payload(job))() == (1, (2, 3), {"colour": "red"})
    assert t.binding.prepare(None, {"first": 1})() == (1, (), {})


def test_an_extra_keyword_that_collides_with_a_parameter_name_is_refused() -> None:
    with pytest.raises(ArgumentsMismatch, match="'rest' collides"):
        build(variadic).new_job((1,), {"rest": 5})


# -- tier and delay ------------------------------------------------------------------


def test_priority_defaults_to_the_tasks_and_may_be_overridden_per_call() -> None:
    t = build(send, priority=Priority.LOW)
    assert t.new_job(("a",)).priority is Priority.LOW
    assert t.new_job(("a",), priority=0).priority is Priority.HIGH


@pytest.mark.parametrize("priority", [3, -1, True, "low", 1.5])
def test_a_priority_outside_the_tiers_is_refused_at_enqueue(priority: Any) -> None:
    with pytest.raises(InvalidPriority):
        build(send).new_job(("a",), priority=priority)


@pytest.mark.parametrize(
    ("countdown", "expected"),
    [
        (None, timedelta(0)),
        (0, timedelta(0)),
        (30, timedelta(seconds=30)),
        (1.5, timedelta(seconds=1.5)),
        (timedelta(hours=2), timedelta(hours=2)),
    ],
)
def test_countdown_becomes_a_delay_the_database_adds_to_its_own_clock(
    countdown: Any, expected: timedelta
) -> None:
    job = build(send).new_job(("a",), countdown=countdown)
    assert (job.delay, job.eta) == (expected, None)


def test_an_aware_eta_is_kept_as_given() -> None:
    eta = datetime(2030, 1, 1, 12, tzinfo=timezone(timedelta(hours=5)))
    job = build(send).new_job(("a",), eta=eta)
    assert (job.delay, job.eta) == (timedelta(0), eta)


@pytest.mark.parametrize(
    ("countdown", "eta", "reason"),
    [
        (-1, None, "negative"),
        (timedelta(seconds=-1), None, "negative"),
        (float("nan"), None, "finite number of seconds"),
        (float("inf"), None, "finite number of seconds"),
        (True, None, "finite number of seconds"),
        ("30", None, "finite number of seconds"),
        (timedelta(days=999_999_999), None, "9999"),
        (None, datetime(2030, 1, 1), "timezone-aware"),
        (None, "2030-01-01T00:00:00+00:00", "must be a datetime"),
        (None, datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5))), "1-9999"),
        (None, datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=5))), "1-9999"),
        (10, datetime(2030, 1, 1, tzinfo=UTC), "not both"),
    ],
)
def test_bad_delays_are_refused(countdown: Any, eta: Any, reason: str) -> None:
    with pytest.raises(InvalidDelay, match=reason):
        build(send).new_job(("a",), countdown=countdown, eta=eta)


# -- ids -----------------------------------------------------------------------------


def test_each_job_gets_a_fresh_canonical_ulid() -> None:
    t = build(send)
    ids = {t.new_job(("a",)).id for _ in range(100)}
    assert len(ids) == 100
    assert all(len(i) == 26 and i.isalnum() and i.isupper() for i in ids)


# -- dedup keys ----------------------------------------------------------------------


def test_no_dedup_means_no_key_and_no_merge() -> None:
    job = build(send).new_job(("a",))
    assert job.dedup_key is None and job.merge is None


def test_the_dedup_function_gets_the_named_arguments_with_defaults_applied() -> None:
    seen: list[dict[str, Any]] = []

    def dedup(**arguments: Any) -> str:
        seen.append(arguments)
        return f"{arguments['to']}/{arguments['subject']}"

    job = build(send, dedup=dedup).new_job(("a@x.org",))
    assert job.dedup_key == "a@x.org/hello"
    assert seen == [{"to": "a@x.org", "subject": "hello", "urgent": False}]
    assert payload(job) == {"to": "a@x.org"}


def test_the_spec_style_dedup_lambda_works() -> None:
    job = build(send, dedup=lambda to, **_: to).new_job(("a@x.org",), {"subject": "x"})
    assert job.dedup_key == "a@x.org"
    assert job.merge is not None


def test_an_int_dedup_key_is_accepted_as_text() -> None:
    def by_number(n: int) -> None: ...

    assert build(by_number, dedup=lambda n: n).new_job((42,)).dedup_key == "42"


def test_dedup_key_argument_overrides_the_dedup_function() -> None:
    t = build(send, dedup=lambda to, **_: to)
    assert t.new_job(("a",), dedup_key="explicit").dedup_key == "explicit"
    assert build(send).new_job(("a",), dedup_key=7).dedup_key == "7"


@pytest.mark.parametrize("key", [None, 1.5, True, b"k", ("a",)])
def test_a_dedup_function_giving_anything_but_str_or_int_is_refused(key: object) -> None:
    with pytest.raises(InvalidPayload, match="dedup key"):
        build(send, dedup=lambda **_: key).new_job(("a",))


@pytest.mark.parametrize("key", ["a\x00b", "line\nbreak", "\x1b[31m", "\ud800"])
def test_dedup_keys_with_control_characters_or_bad_text_are_refused(key: str) -> None:
    with pytest.raises(InvalidPayload, match="dedup key"):
        build(send).new_job(("a",), dedup_key=key)


def test_an_overlong_dedup_key_is_refused_with_advice() -> None:
    with pytest.raises(InvalidPayload, match="hash it"):
        build(send).new_job(("a",), dedup_key="k" * (MAX_DEDUP_KEY_BYTES + 1))


# -- merge decisions -----------------------------------------------------------------


def merge_job(merge: Callable[..., Any], incoming: dict[str, Any]) -> NewJob:
    return build(send, kind="send", dedup=lambda to, **_: to, merge=merge).new_job((), incoming)


def test_the_default_merge_keeps_the_existing_job() -> None:
    job = build(send, dedup=lambda to, **_: to).new_job(("a",))
    assert job.merge is not None
    decision = job.merge({"to": "a", "subject": "old"})
    assert (decision.action, decision.payload) == (MergeAction.KEEP, None)


def test_replace_carries_the_incoming_encoded_payload() -> None:
    job = merge_job(lambda old, new: Merge.replace(), {"to": "a", "subject": "new"})
    assert job.merge is not None
    decision = job.merge({"to": "a", "subject": "old"})
    assert decision.action is MergeAction.REPLACE
    assert decision.payload == job.payload


def test_combine_gets_both_payloads_and_carries_the_encoded_combination() -> None:
    seen: list[tuple[dict[str, Any], dict[str, Any]]] = []

    def merge(existing: dict[str, Any], incoming: dict[str, Any]) -> Merge:
        seen.append((existing, incoming))
        return Merge.combine({**existing, "subject": existing["subject"] + incoming["subject"]})

    job = merge_job(merge, {"to": "a", "subject": "+new"})
    assert job.merge is not None
    decision = job.merge({"to": "a", "subject": "old"})
    assert seen == [({"to": "a", "subject": "old"}, {"to": "a", "subject": "+new"})]
    assert decision.action is MergeAction.COMBINE
    assert decision.payload is not None
    assert orjson.loads(decision.payload) == {"to": "a", "subject": "old+new"}


def test_independent_is_passed_on() -> None:
    job = merge_job(lambda old, new: Merge.independent(), {"to": "a"})
    assert job.merge is not None
    assert job.merge({"to": "a"}).action is MergeAction.INDEPENDENT


def test_a_merge_function_returning_something_else_is_a_typed_error() -> None:
    job = merge_job(lambda old, new: "keep", {"to": "a"})
    assert job.merge is not None
    with pytest.raises(EnqueueError, match="returned 'keep'"):
        job.merge({"to": "a"})


def test_a_combined_payload_that_does_not_fit_the_handler_is_refused() -> None:
    job = merge_job(lambda old, new: Merge.combine({"recipient": "a"}), {"to": "a"})
    assert job.merge is not None
    with pytest.raises(ArgumentsMismatch, match="missing to"):
        job.merge({"to": "a"})


def test_a_combined_payload_that_is_not_json_is_refused() -> None:
    job = merge_job(lambda old, new: Merge.combine({"to": "a", "subject": {1, 2}}), {"to": "a"})
    assert job.merge is not None
    with pytest.raises(InvalidPayload, match=r"combined payload of 'send'.*\$\.subject"):
        job.merge({"to": "a"})


# -- running: direct calls and prepare ------------------------------------------------


def test_calling_the_task_runs_the_handler_now_with_a_fresh_context() -> None:
    contexts: list[Context] = []

    def handler(ctx: Context, n: int) -> int:
        contexts.append(ctx)
        return n * 2

    t = build(handler, kind="double")
    assert t(21) == 42
    [ctx] = contexts
    assert (ctx.job_id, ctx.kind, ctx.run_count, ctx.failure_count, ctx.carry) == (
        None,
        "double",
        0,
        0,
        None,
    )


def test_prepare_passes_the_workers_context_and_the_stored_arguments() -> None:
    t = build(send, kind="mail")
    ctx = Context(job_id="J", kind="mail", run_count=1, failure_count=0)
    assert t.binding.prepare(ctx, {"to": "a", "urgent": True})() == "mail:a:hello:True"


def test_prepare_without_a_context_makes_a_fresh_one() -> None:
    assert build(send, kind="mail").binding.prepare(None, {"to": "a"})() == "mail:a:hello:False"


@pytest.mark.parametrize(
    ("stored", "reason"),
    [
        ({}, "missing to"),
        ({"to": "a", "cc": "b"}, "unexpected cc"),
        ({"subject": "x", "bcc": "b"}, "missing to; unexpected bcc"),
        (["a"], "not a JSON object"),
    ],
)
def test_a_payload_that_no_longer_fits_is_refused_before_the_handler_runs(
    stored: Any, reason: str
) -> None:
    calls: list[str] = []

    def handler(to: str, subject: str = "") -> None:
        calls.append(to)

    with pytest.raises(ArgumentsMismatch, match=reason):
        build(handler).binding.prepare(None, stored)()
    assert calls == []


def test_a_type_error_raised_inside_the_handler_is_not_a_mismatch() -> None:
    def handler(n: int) -> None:
        raise TypeError("a bug in the handler")

    with pytest.raises(TypeError, match="a bug in the handler") as caught:
        build(handler).binding.prepare(None, {"n": 1})()
    assert not isinstance(caught.value, ArgumentsMismatch)


def test_prepare_tells_a_stale_payload_from_a_mismatch_the_handler_raises() -> None:
    def handler(n: int) -> None:
        raise ArgumentsMismatch("raised by the handler's own bad .delay()")

    t = build(handler)
    with pytest.raises(ArgumentsMismatch, match="missing n"):
        t.binding.prepare(None, {})
    call = t.binding.prepare(None, {"n": 1})
    with pytest.raises(ArgumentsMismatch, match="handler's own"):
        call()


def test_a_mismatch_in_a_variadic_signature_is_found_before_the_call() -> None:
    def handler(a: int, /, *, b: int) -> None:
        raise AssertionError("must not run")

    with pytest.raises(ArgumentsMismatch):
        build(handler).binding.prepare(None, {"a": 1})()


@dataclasses.dataclass
class Address:
    city: str
    since: date


def typed(
    when: datetime,
    ident: UUID,
    amount: Decimal,
    home: Address,
    history: list[Address],
    maybe: date | None = None,
    raw: Any = None,
) -> dict[str, Any]:
    return {
        "when": when,
        "ident": ident,
        "amount": amount,
        "home": home,
        "history": history,
        "maybe": maybe,
        "raw": raw,
    }


def test_prepare_converts_values_back_by_the_handlers_annotations() -> None:
    t = build(typed)
    when = datetime(2026, 5, 1, 8, 30, tzinfo=timezone(timedelta(hours=2)))
    home = Address("Paris", date(2020, 1, 1))
    job = t.new_job(
        (when, UUID(int=5), Decimal("10.50"), home, [home]),
        {"maybe": date(2026, 1, 2), "raw": "2026-01-02"},
    )
    assert t.binding.prepare(None, payload(job))() == {
        "when": when,
        "ident": UUID(int=5),
        "amount": Decimal("10.50"),
        "home": home,
        "history": [home],
        "maybe": date(2026, 1, 2),
        "raw": "2026-01-02",
    }


def test_a_stored_value_that_no_longer_fits_its_annotation_is_a_mismatch() -> None:
    t = build(typed)
    stored = payload(
        t.new_job((datetime.now(UTC), UUID(int=1), Decimal(1), Address("x", date.today()), []))
    )
    stored["home"] = {"town": "renamed"}
    with pytest.raises(ArgumentsMismatch, match="'home' does not fit"):
        t.binding.prepare(None, stored)()


def test_annotations_that_cannot_be_resolved_pass_values_through() -> None:
    namespace: dict[str, Any] = {}
    exec(  # a handler whose annotation names a type that does not exist at run time
        "def handler(x: 'Missing') -> object:\n    return x\n", namespace
    )
    assert build(namespace["handler"], kind="unresolved").binding.prepare(
        None, {"x": {"a": 1}}
    )() == {"a": 1}


# -- the fast binding path agrees with inspect.Signature.bind ------------------------


def mixed(a: int, b: int = 1, *, c: int, d: int = 2) -> None: ...


@settings(deadline=None)  # no timing: the machine may be busy
@given(
    st.lists(st.integers(0, 9), max_size=3),
    st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e", "ctx"]), st.integers(0, 9)),
)
def test_binding_accepts_and_refuses_exactly_what_python_would(
    args: list[int], kwargs: dict[str, int]
) -> None:
    try:
        expected: dict[str, Any] | None = dict(
            inspect.signature(mixed).bind(*args, **kwargs).arguments
        )
    except TypeError:
        expected = None
    t = build(mixed, kind="mixed")
    if expected is None:
        with pytest.raises(ArgumentsMismatch):
            t.new_job(args, kwargs)
    else:
        assert payload(t.new_job(args, kwargs)) == expected


@dataclasses.dataclass
class Point:
    x: float
    y: float


def carried(carry: type | None) -> Binding[None]:
    def handler(ctx: Context) -> None: ...

    return Binding(handler, kind="carried", carry=carry)


# -- the Binding object on its own: enqueue side, run side, carry ------------------


def report(ctx: Context, job: str, copies: int = 1, *, draft: bool = False) -> str:
    return f"{ctx.kind}:{ctx.job_id}:{job}:{copies}:{draft}"


def test_binding_reads_the_context_parameter_and_the_required_arguments() -> None:
    binding = Binding(report, kind="report")
    assert binding.takes_context
    assert binding.required == frozenset({"job"})
    assert not Binding(positional_only, kind="p").takes_context
    assert Binding(positional_only, kind="p").required == frozenset({"a"})


def test_binding_refuses_a_handler_whose_signature_cannot_be_read() -> None:
    with pytest.raises(ConfigurationError, match="cannot read the signature"):
        Binding(min, kind="builtin")


def test_bind_gives_the_named_arguments_and_with_defaults_fills_in_the_rest() -> None:
    binding = Binding(report, kind="report")
    arguments = binding.bind(("r-1",), {"draft": True})
    assert arguments == {"job": "r-1", "draft": True}
    assert binding.with_defaults(arguments) == {"job": "r-1", "copies": 1, "draft": True}


def test_encode_payload_is_strict_json_named_after_the_kind() -> None:
    binding = Binding(report, kind="report")
    assert orjson.loads(binding.encode_payload({"job": "r-1"})) == {"job": "r-1"}
    with pytest.raises(InvalidPayload, match=r"payload of 'report'.*at \$\.job"):
        binding.encode_payload({"job": float("nan")})


def test_encode_combined_checks_the_payload_against_the_signature() -> None:
    binding = Binding(report, kind="report")
    assert orjson.loads(binding.encode_combined({"job": "r", "copies": 2})) == {
        "job": "r",
        "copies": 2,
    }
    with pytest.raises(InvalidPayload, match="needs a mapping"):
        binding.encode_combined(["r"])
    with pytest.raises(ArgumentsMismatch, match="unexpected pages"):
        binding.encode_combined({"job": "r", "pages": 3})


def test_prepare_round_trips_what_bind_stored() -> None:
    binding = Binding(report, kind="report")
    stored = orjson.loads(binding.encode_payload(binding.bind(("r-1", 3), {})))
    ctx = Context(job_id="J1", kind="report", run_count=1, failure_count=0)
    assert binding.prepare(ctx, stored)() == "report:J1:r-1:3:False"


def test_fresh_context_belongs_to_no_job() -> None:
    ctx = Binding(report, kind="report").fresh_context()
    assert (ctx.job_id, ctx.kind, ctx.run_count, ctx.failure_count, ctx.carry) == (
        None,
        "report",
        0,
        0,
        None,
    )


# -- carry ---------------------------------------------------------------------------------


def test_carry_round_trips_through_its_dataclass() -> None:
    encoded = carried(Point).encode_carry(Point(1.0, 2.0))
    assert orjson.loads(encoded) == {"x": 1.0, "y": 2.0}
    assert carried(Point).decode_carry(orjson.loads(encoded)) == Point(1.0, 2.0)


def test_carry_none_is_json_null_and_comes_back_none() -> None:
    assert carried(Point).encode_carry(None) == "null"
    assert carried(Point).decode_carry(None) is None


def test_untyped_carry_is_plain_json() -> None:
    assert carried(None).decode_carry({"n": 1}) == {"n": 1}
    assert carried(None).encode_carry({"n": 1}) == '{"n":1}'


def test_carry_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(InvalidPayload, match="carry must be a Point"):
        carried(Point).encode_carry({"x": 1.0, "y": 2.0})


def test_stored_carry_that_no_longer_fits_its_dataclass_is_a_typed_error() -> None:
    with pytest.raises(InvalidPayload, match="does not fit Point"):
        carried(Point).decode_carry({"x": 1.0, "renamed": 2.0})


def test_carry_that_is_not_json_is_refused() -> None:
    with pytest.raises(InvalidPayload, match=r"carry.*at \$\.y"):
        carried(Point).encode_carry(Point(1.0, float("inf")))
