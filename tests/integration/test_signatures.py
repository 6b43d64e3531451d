"""Signatures and groups (SPEC 5.4): ``task.s`` / ``task.si`` are checked against the
handler when built, refuse what could never run with nothing written, and enqueue as
partial calls; ``group`` enqueues its members in one transaction, results in order."""

from __future__ import annotations

from typing import Any

import pytest

import venturi
from venturi.errors import ArgumentsMismatch, InvalidPayload
from venturi.testing import drain, eager
from venturi.workflows import Signature, group


def test_a_signature_leaves_the_first_argument_to_its_parents_result(app: venturi.App) -> None:
    @app.task(kind="sig.add")
    def add(x: int, y: int) -> int:
        return x + y

    sig = add.s(2)

    assert isinstance(sig, Signature) and not sig.immutable
    assert sig.args == (2,) and dict(sig.kwargs) == {}
    assert repr(sig) == "sig.add.s(2)"
    assert add.s(1, 2).args == (1, 2)  # a whole call fits too (a group's member)
    with pytest.raises(ArgumentsMismatch):
        add.s(1, 2, 3)
    with pytest.raises(ArgumentsMismatch):
        add.s(z=1)
    assert add.si(1, 2).immutable
    with pytest.raises(ArgumentsMismatch):
        add.si(1)  # an immutable signature gets nothing more


def test_bad_signatures_are_refused_when_built_and_write_nothing(app: venturi.App, db: Any) -> None:
    @app.task(kind="sig.send")
    def send(ctx: venturi.Context, to: str, *, subject: str) -> None: ...

    with pytest.raises(ArgumentsMismatch):
        send.si("a@x.org", body="no such parameter")
    with pytest.raises(ArgumentsMismatch):
        send.s("a@x.org", to="twice")
    with pytest.raises(InvalidPayload):
        send.si("a@x.org", subject={1, 2})
    with pytest.raises(InvalidPayload):
        send.s(subject=float("nan"))

    assert send.s(subject="hi").kwargs == {"subject": "hi"}
    assert db.jobs() == []


def test_a_signature_enqueues_as_a_partial_call(app: venturi.App) -> None:
    @app.task(kind="sig.sub")
    def sub(x: int, y: int) -> int:
        return x - y

    partial = sub.s(2).delay(10)
    whole = sub.si(1, 5).delay()
    drain(app)

    assert partial.result() == 8
    assert whole.result() == -4
    with pytest.raises(ArgumentsMismatch, match="immutable"):
        sub.si(1, 5).delay(3)


def test_a_group_enqueues_every_member_at_once_and_gives_results_in_order(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="sig.square")
    def square(x: int) -> int:
        return x * x

    @app.task(kind="sig.name")
    def name(x: int) -> str:
        return f"n{x}"

    ref = group(*(square.s(i) for i in range(5)), name.si(7)).delay()
    assert len(db.jobs()) == 6
    drain(app)

    assert ref.results(timeout=5) == [0, 1, 4, 9, 16, "n7"]
    from_generator = group(square.s(i) for i in (3, 4)).delay()
    drain(app)
    assert from_generator.results(timeout=0) == [9, 16]


def test_a_group_member_that_is_not_a_whole_call_is_refused_before_anything_is_written(
    app: venturi.App, db: Any
) -> None:
    """ADR 0125: a group is checked where it is placed (in a chain its members get the
    parent's result first), so a standalone one is checked whole by delay()."""

    @app.task(kind="sig.pair")
    def pair(x: int, y: int) -> int:
        return x + y

    with pytest.raises(ArgumentsMismatch):
        group(pair.s(1), pair.s(1, 2)).delay()
    with pytest.raises(ArgumentsMismatch):
        group([pair.s(1, 2), "not a signature"])  # type: ignore[list-item]
    assert db.jobs() == []
    assert group().delay().results() == []


def test_a_group_in_an_eager_session_runs_inline_and_answers_from_the_session(
    app: venturi.App, db: Any
) -> None:
    @app.task(kind="sig.eager")
    def half(x: int) -> float:
        return x / 2

    with eager(app):
        ref = group(half.s(i) for i in (2, 3)).delay()

    assert ref.results(timeout=0) == [1.0, 1.5]
    assert db.jobs() == []
