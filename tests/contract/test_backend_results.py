"""The Results role (venturi/backend/, ADR 0124): ``finish`` stores a COMPLETED
outcome's result as given (the runtime bounds it first, on every backend),
``read_result`` reads it back with the status and last note, and ``await_result`` +
``listen_result`` wake a waiter at the end of an awaited job only."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from backends import ClaimAll, new_job, running

from venturi.backend import Backend
from venturi.results import DEFAULT_RESULT_MAX_BYTES
from venturi.runtime.executor import Execution, record
from venturi.types import Finished, Outcome, OutcomeKind, Status, StoredResult


def completed(result: str | None, note: str | None = None) -> Outcome:
    return Outcome(OutcomeKind.COMPLETED, note=note, result=result)


def test_finish_stores_the_result_of_a_completed_outcome_only(
    backend: Backend, claim_all: ClaimAll
) -> None:
    done, retried, dead = running(backend, claim_all, 3)

    backend.finish(
        [
            Finished(done, completed('{"n":[1,2]}', note="ok")),
            Finished(
                retried, Outcome(OutcomeKind.RETRIED, note="E: x", is_failure=True, result="1")
            ),
            Finished(dead, Outcome(OutcomeKind.DEAD, note="gone", result="2")),
        ]
    )

    assert backend.read_result(done.job_id) == StoredResult(Status.COMPLETED, '{"n": [1, 2]}', "ok")
    assert backend.read_result(retried.job_id) == StoredResult(Status.PENDING, None, "E: x")
    assert backend.read_result(dead.job_id) == StoredResult(Status.DEAD, None, "gone")


def test_read_result_of_an_unknown_id_is_none(backend: Backend) -> None:
    assert backend.read_result("01J00000000000000000000000") is None


def test_a_result_over_the_bound_is_dropped_above_the_boundary_and_the_note_says_so(
    backend: Backend, claim_all: ClaimAll, caplog: pytest.LogCaptureFixture
) -> None:
    """The runtime's ``record`` bounds each outcome before ``finish``, so every backend
    stores the same: no result and a note saying how large it was (ADR 0124)."""
    backend.enqueue([new_job(), new_job()])
    fits, over = claim_all()

    with caplog.at_level(logging.WARNING, logger="venturi.results"):
        written = record(
            backend,
            [Execution(fits, completed('"ten byte"')), Execution(over, completed('"ääää_"'))],
            result_max_bytes=10,
        )

    assert written == {fits.claim.job_id, over.claim.job_id}
    assert backend.read_result(fits.claim.job_id) == StoredResult(
        Status.COMPLETED, '"ten byte"', None
    )
    assert backend.read_result(over.claim.job_id) == StoredResult(
        Status.COMPLETED, None, "result of 11 bytes not stored (result_max_bytes=10)"
    )
    assert caplog.messages == ["a result of 11 bytes was dropped (result_max_bytes=10)"]
    assert DEFAULT_RESULT_MAX_BYTES == 1_048_576


def test_an_awaited_job_wakes_its_listener_when_it_ends_and_others_send_nothing(
    backend: Backend, claim_all: ClaimAll, db: Any
) -> None:
    awaited, other = running(backend, claim_all, 2)
    listener = backend.listen_result(awaited.job_id)
    bystander = backend.listen_result(other.job_id)
    try:
        assert listener.wait(0) is False and bystander.wait(0) is False  # subscribed
        backend.await_result(awaited.job_id)
        backend.await_result(awaited.job_id)  # idempotent
        backend.finish([Finished(awaited, completed("1")), Finished(other, completed("2"))])

        assert listener.wait(5) is True
        assert bystander.wait(0.2) is False
    finally:
        listener.close()
        bystander.close()
    flags = db.all("SELECT id, result_awaited FROM {{prefix}}_jobs ORDER BY id")
    assert {r["id"]: r["result_awaited"] for r in flags} == {
        awaited.job_id: True,
        other.job_id: False,
    }


def test_await_result_leaves_terminal_and_unknown_jobs_alone(
    backend: Backend, claim_all: ClaimAll, db: Any
) -> None:
    [done] = running(backend, claim_all)
    backend.finish([Finished(done, completed("null"))])

    backend.await_result(done.job_id)
    backend.await_result("01J00000000000000000000000")

    assert db.scalar("SELECT result_awaited FROM {{prefix}}_jobs") is False
    assert backend.read_result(done.job_id) == StoredResult(Status.COMPLETED, "null", None)


def test_a_paused_awaited_job_sends_nothing_until_it_ends(
    backend: Backend, claim_all: ClaimAll
) -> None:
    [claim] = running(backend, claim_all)
    listener = backend.listen_result(claim.job_id)
    try:
        listener.wait(0)
        backend.await_result(claim.job_id)
        backend.finish([Finished(claim, Outcome(OutcomeKind.PAUSED))])
        assert listener.wait(0.2) is False
        [again] = [job.claim for job in claim_all()]
        backend.finish([Finished(again, completed('"late"'))])
        assert listener.wait(5) is True
    finally:
        listener.close()
    assert backend.read_result(claim.job_id) == StoredResult(Status.COMPLETED, '"late"', None)
