"""Task options are checked at decoration (STYLE R15), and tasks register by kind."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from venturi import registry as registry_module
from venturi.backoff import Exponential, Fixed
from venturi.context import Context
from venturi.errors import (
    ConfigurationError,
    DuplicateKind,
    InvalidKind,
    InvalidPriority,
    InvalidSchedule,
    NoCurrentApp,
)
from venturi.merge import Merge, keep_existing
from venturi.options import DEFAULT_LEASE, DEFAULT_MAX_FAILURES, TaskOptions
from venturi.registry import Registry, current_app, set_current_app
from venturi.task import Task, TaskDecorator, default_registry, task
from venturi.types import Priority


@dataclasses.dataclass
class Progress:
    page: int


def handler(to: str, subject: str = "") -> str:
    return to


def build(fn: Callable[..., Any] = handler, **options: Any) -> Task[..., Any]:
    return register(fn, TaskOptions.parse(**options), Registry())


def register(fn: Callable[..., Any], options: TaskOptions, registry: Registry) -> Task[..., Any]:
    return TaskDecorator(options, registry=registry)(fn)


# -- defaults ------------------------------------------------------------------------


def test_defaults() -> None:
    t = build()
    assert t.kind == f"{__name__}.handler"
    assert t.options.priority is Priority.NORMAL
    assert t.options.max_failures == DEFAULT_MAX_FAILURES == 20
    assert t.options.concurrency is None
    assert t.options.lease == DEFAULT_LEASE == timedelta(minutes=1)
    assert t.options.carry is None
    assert t.options.schedule is None
    assert t.options.timezone == "UTC"
    assert t.binding.takes_context is False
    assert t.options.merge is keep_existing
    assert isinstance(t.options.backoff, Exponential)


def test_every_option_is_kept() -> None:
    def dedup(to: str, **_: Any) -> str:
        return to

    def merge(existing: dict[str, Any], incoming: dict[str, Any]) -> Merge:
        return Merge.replace()

    t = build(
        kind="mail.send",
        priority=Priority.HIGH,
        dedup=dedup,
        merge=merge,
        max_failures=5,
        backoff=timedelta(seconds=3),
        concurrency=4,
        lease=timedelta(minutes=2),
        carry=Progress,
    )
    options = t.options
    assert (t.kind, options.priority, options.max_failures, options.concurrency) == (
        "mail.send",
        0,
        5,
        4,
    )
    assert options.lease == timedelta(minutes=2)
    assert options.carry is Progress
    assert t.options.dedup is dedup and t.options.merge is merge
    assert t.options.backoff == Fixed(timedelta(seconds=3))


def test_lease_may_be_given_in_seconds() -> None:
    assert build(lease=90).options.lease == timedelta(seconds=90)


def test_priority_may_be_given_as_its_number() -> None:
    assert build(priority=2).options.priority is Priority.LOW


# -- refusals at decoration ----------------------------------------------------------


def test_an_unknown_option_is_refused_and_the_known_ones_listed() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown task option.*retries.*known:.*lease"):
        TaskOptions.parse(retries=3)


@pytest.mark.parametrize("priority", [7, -1, 3, True, "high", 1.0, None])
def test_a_priority_outside_the_three_tiers_is_refused(priority: object) -> None:
    with pytest.raises(InvalidPriority):
        TaskOptions.parse(priority=priority)


@pytest.mark.parametrize("kind", ["", "mail\nsend", "a\x00b", "tab\there", "del\x7f", "c1\x85", 42])
def test_a_kind_that_is_empty_or_has_control_characters_is_refused(kind: object) -> None:
    with pytest.raises(InvalidKind):
        TaskOptions.parse(kind=kind)


def test_an_overlong_kind_is_refused() -> None:
    with pytest.raises(InvalidKind, match="255 bytes"):
        TaskOptions.parse(kind="k" * 256)


def test_a_kind_is_any_other_text() -> None:
    assert TaskOptions.parse(kind="Ünïcode kind; DROP TABLE x -- ok").kind is not None


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("max_failures", 0),
        ("max_failures", -1),
        ("max_failures", 1.5),
        ("max_failures", True),
        ("concurrency", 0),
        ("concurrency", "4"),
        ("lease", timedelta(0)),
        ("lease", timedelta(seconds=-1)),
        ("lease", 0),
        ("lease", "1m"),
        ("lease", float("inf")),
        ("carry", int),
        ("carry", Progress(1)),
        ("carry", dict),
        ("dedup", "to"),
        ("merge", "keep"),
        ("merge", None),
        ("backoff", "exponential"),
        ("backoff", timedelta(seconds=-1)),
        ("backoff", -5),
        ("schedule", 5),
        ("timezone", 1),
    ],
)
def test_bad_option_values_are_refused_at_decoration(option: str, value: object) -> None:
    with pytest.raises(ConfigurationError, match=option):
        TaskOptions.parse(**{option: value})


def test_a_schedule_is_validated_by_the_cron_module() -> None:
    assert TaskOptions.parse(schedule="0 3 * * *", timezone="Europe/Paris").schedule == "0 3 * * *"
    with pytest.raises(InvalidSchedule):
        TaskOptions.parse(schedule="every tuesday")
    with pytest.raises(InvalidSchedule):
        TaskOptions.parse(schedule="0 3 * * *", timezone="Mars/Olympus_Mons")


def test_a_scheduled_handler_must_not_require_arguments() -> None:
    def needs_arguments(ctx: Context, day: str) -> None: ...

    def takes_none(ctx: Context, day: str = "today") -> None: ...

    with pytest.raises(ConfigurationError, match="requires day"):
        build(needs_arguments, schedule="0 3 * * *")
    assert build(takes_none, schedule="0 3 * * *").options.schedule == "0 3 * * *"


def test_async_handlers_are_accepted_and_marked_async() -> None:
    async def handler(n: int) -> None: ...

    def plain(n: int) -> None: ...

    assert build(handler).is_async
    assert not build(plain).is_async
    assert build(handler).binding.required == {"n"}


# -- the context parameter -----------------------------------------------------------


def test_a_first_parameter_named_ctx_takes_the_context() -> None:
    def fn(ctx, n):  # type: ignore[no-untyped-def]
        return n

    assert build(fn).binding.takes_context


def test_a_first_parameter_annotated_context_takes_it_whatever_its_name() -> None:
    def fn(run: Context, n: int) -> int:
        return n

    def fn_str(run: "Context", n: int) -> int:  # noqa: UP037 - the unevaluated form on purpose
        return n

    assert build(fn).binding.takes_context
    assert build(fn_str).binding.takes_context


def test_ctx_elsewhere_than_first_or_keyword_only_is_an_ordinary_argument() -> None:
    def later(n: int, ctx: Any) -> None: ...

    def keyword_only(*, ctx: Any) -> None: ...

    assert not build(later).binding.takes_context
    assert not build(keyword_only).binding.takes_context


# -- registries ----------------------------------------------------------------------


def test_a_different_function_under_an_existing_kind_is_refused() -> None:
    registry = Registry()

    def first(n: int) -> None: ...

    def second(n: int) -> None: ...

    register(first, TaskOptions.parse(kind="dup"), registry)
    with pytest.raises(DuplicateKind, match="'dup'"):
        register(second, TaskOptions.parse(kind="dup"), registry)
    assert registry.tasks["dup"].fn is first


def test_the_same_function_registered_again_replaces_the_task_silently() -> None:
    """As when a module is imported twice: a new function object, same module and qualname."""

    def define() -> Callable[[int], None]:
        def job(n: int) -> None: ...

        return job

    registry = Registry()
    first, again = define(), define()
    assert first is not again
    register(first, TaskOptions.parse(kind="reloaded"), registry)
    register(again, TaskOptions.parse(kind="reloaded", priority=0), registry)
    assert registry.tasks["reloaded"].fn is again
    assert registry.tasks["reloaded"].options.priority is Priority.HIGH


def test_registry_tasks_is_a_read_only_view() -> None:
    registry = Registry()
    t = register(handler, TaskOptions.parse(), registry)
    with pytest.raises(TypeError):
        registry.tasks["x"] = t  # type: ignore[index]


def test_the_task_decorator_registers_in_the_default_registry_with_and_without_options() -> None:
    @task
    def bare_task_for_registration(n: int) -> int:
        return n

    @task(kind="tests.unit.options.with_options", priority=Priority.LOW)
    def with_options(n: int) -> int:
        return n

    assert default_registry.tasks[bare_task_for_registration.kind] is bare_task_for_registration
    assert default_registry.tasks["tests.unit.options.with_options"] is with_options
    assert with_options.options.priority is Priority.LOW
    assert bare_task_for_registration.__name__ == "bare_task_for_registration"


def test_bad_options_of_the_decorator_are_refused_before_the_handler_is_seen() -> None:
    with pytest.raises(InvalidPriority):
        task(priority=9)


# -- the current App -----------------------------------------------------------------


@pytest.fixture
def no_current_app(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process as it is before any App was created; restored afterwards."""
    monkeypatch.setattr(registry_module, "_current_app", None)
    yield


@dataclasses.dataclass
class StubApp:
    """Only the shape the registry needs; enqueueing is covered in the integration tests."""

    backend: Any = None


def test_current_app_before_any_app_is_a_typed_error_naming_the_kind(no_current_app: None) -> None:
    with pytest.raises(NoCurrentApp, match=r"'mail\.send'.*no venturi\.App"):
        current_app("mail.send")


def test_delay_before_any_app_exists_is_refused_with_no_current_app(no_current_app: None) -> None:
    t = build()
    with pytest.raises(NoCurrentApp):
        t.delay("a@x.org")
    with pytest.raises(NoCurrentApp):
        t.delay_many([{"to": "a@x.org"}])


def test_the_most_recently_set_app_is_current(no_current_app: None) -> None:
    first, second = StubApp(), StubApp()
    set_current_app(first)
    set_current_app(second)
    assert current_app("k") is second
