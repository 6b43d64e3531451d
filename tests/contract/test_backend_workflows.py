"""The Workflows role (venturi/backend/, ADR 0125, 0131): ``enqueue_workflow`` writes
the first steps as pending jobs and the others waiting, all or nothing; ``finish``
hands each completed step's result on in the statement that records it, fenced on the
claim, a child becoming a job once when its last parent completes; a dead step ends
its waiting dependants, and ``retry_job`` of it resumes them. ``get_workflow``,
``list_workflows`` (newest first, steps counted by state, keyset pages) and
``workflow_id_of`` read them back."""

from __future__ import annotations

from datetime import timedelta

import psycopg
import pytest
from backends import KIND, ClaimAll, new_job

from venturi.backend import Backend
from venturi.types import (
    Claim,
    Finished,
    NewEdge,
    NewStep,
    NewWorkflow,
    Outcome,
    OutcomeKind,
    Status,
    StepState,
)


def chord(members: int, input_all: bool = True) -> NewWorkflow:
    """``members`` first steps and one callback that waits for all of them."""
    heads = [NewStep(new_job(), 0, None, False, i) for i in range(members)]
    callback = NewStep(new_job(payload='{"extra": 1}'), members, "values", input_all, members)
    edges = tuple(NewEdge(h.job.id, callback.job.id, i) for i, h in enumerate(heads))
    return NewWorkflow(new_job().id, (*heads, callback), edges)


def completed(claim: Claim, result: str) -> Finished:
    """Not flagged ``in_workflow``: the backend must find the step's hand-on itself."""
    return Finished(claim, Outcome(OutcomeKind.COMPLETED, result=result))


# -- enqueue_workflow and the hand-on in finish ----------------------------------------


def test_a_workflow_is_written_whole_first_steps_pending(
    backend: Backend, claim_all: ClaimAll
) -> None:
    flow = chord(3)
    backend.enqueue_workflow(flow)

    view = backend.get_workflow(flow.id)
    assert view is not None
    assert [s.state for s in view.steps] == [StepState.PENDING] * 3 + [StepState.WAITING]
    assert view.steps[3].parents == tuple(s.job.id for s in flow.steps[:3])
    assert [s.position for s in view.steps] == [0, 1, 2, 3]
    assert {j.claim.job_id for j in claim_all()} == {s.job.id for s in flow.steps[:3]}
    callback = flow.steps[3].job.id
    assert backend.get_job(callback) is None  # not a job until its parents completed
    read = backend.read_result(callback)
    assert read is not None and read.status is Status.PENDING  # waited for like a pending job


def test_a_workflow_with_a_taken_id_writes_nothing(backend: Backend) -> None:
    flow = chord(2)
    backend.enqueue([flow.steps[1].job])  # a first step's id is taken by a plain job
    with pytest.raises(psycopg.errors.UniqueViolation):
        backend.enqueue_workflow(flow)
    assert backend.get_workflow(flow.id) is None
    assert backend.get_job(flow.steps[0].job.id) is None


def test_the_callback_becomes_a_job_once_with_every_result_in_order(
    backend: Backend, claim_all: ClaimAll
) -> None:
    flow = chord(4)
    backend.enqueue_workflow(flow)
    claims = {j.claim.job_id: j.claim for j in claim_all()}
    heads = [s.job.id for s in flow.steps[:4]]
    callback = flow.steps[4].job.id

    backend.finish([completed(claims[heads[2]], '"c"'), completed(claims[heads[0]], '"a"')])
    assert backend.get_job(callback) is None
    backend.finish([completed(claims[heads[3]], '"d"')])
    backend.finish([completed(claims[heads[1]], '"b"')])

    [job] = claim_all()
    assert job.claim.job_id == callback
    assert job.payload == {"extra": 1, "values": ["a", "b", "c", "d"]}
    view = backend.get_workflow(flow.id)
    assert view is not None and view.steps[4].state is StepState.CLAIMED


def test_a_chain_step_gets_its_parents_result_as_it_is(
    backend: Backend, claim_all: ClaimAll
) -> None:
    first = NewStep(new_job(), 0, None, False, 0)
    second = NewStep(new_job(payload='{"y": 2}'), 1, "x", False, 1)
    flow = NewWorkflow(new_job().id, (first, second), (NewEdge(first.job.id, second.job.id, 0),))
    backend.enqueue_workflow(flow)
    [job] = claim_all()
    assert job.workflow_id == flow.id  # the worker flags the finish with it

    outcome = Outcome(OutcomeKind.COMPLETED, result='{"rows": [1, 2]}')
    assert backend.finish([Finished(job.claim, outcome, in_workflow=True)]) == {job.claim.job_id}

    [step] = claim_all()
    assert step.payload == {"x": {"rows": [1, 2]}, "y": 2}
    assert step.workflow_id == flow.id


def test_a_finish_that_lost_its_claim_hands_nothing_on(
    backend: Backend, claim_all: ClaimAll
) -> None:
    flow = chord(1)
    backend.enqueue_workflow(flow)
    [job] = claim_all()
    stale = Claim(job.claim.job_id, job.claim.claimed_by, job.claim.run_count + 1)

    assert backend.finish([completed(stale, "1")]) == set()

    view = backend.get_workflow(flow.id)
    assert view is not None and view.steps[1].state is StepState.WAITING
    assert backend.finish([completed(job.claim, "1")]) == {job.claim.job_id}
    assert [j.claim.job_id for j in claim_all()] == [flow.steps[1].job.id]


def test_a_dead_step_ends_its_dependants_and_retry_resumes_them(
    backend: Backend, claim_all: ClaimAll
) -> None:
    middle = NewStep(new_job(), 1, "x", False, 1)
    last = NewStep(new_job(), 1, "x", False, 2)
    flow = chord(2)
    head, other, callback = flow.steps
    chained = NewWorkflow(
        flow.id,
        (head, other, callback, middle, last),
        (
            *flow.edges,
            NewEdge(callback.job.id, middle.job.id, 0),
            NewEdge(middle.job.id, last.job.id, 0),
        ),
    )
    backend.enqueue_workflow(chained)
    claims = {j.claim.job_id: j.claim for j in claim_all()}

    backend.finish(
        [
            Finished(claims[head.job.id], Outcome(OutcomeKind.DEAD, note="gone")),
            completed(claims[other.job.id], "2"),
        ]
    )

    view = backend.get_workflow(flow.id)
    assert view is not None
    note = f"dependency {head.job.id} ({KIND}) ended dead"
    assert [(s.state, s.note) for s in view.steps[2:]] == [(StepState.DEAD, note)] * 3
    read = backend.read_result(last.job.id)
    assert read is not None and (read.status, read.note) == (Status.DEAD, note)

    backend.retry_job(head.job.id)
    view = backend.get_workflow(flow.id)
    assert view is not None
    assert [s.state for s in view.steps[2:]] == [StepState.WAITING] * 3
    [again] = claim_all()
    backend.finish([completed(again.claim, "1")])
    [job] = claim_all()
    assert job.claim.job_id == callback.job.id and job.payload["values"] == [1, 2]


def test_a_member_cancelled_or_recovered_dead_ends_its_dependants(
    backend: Backend, claim_all: ClaimAll
) -> None:
    cancelled, recovered = chord(1), chord(1)
    backend.enqueue_workflow(cancelled)
    backend.cancel_job(cancelled.steps[0].job.id)
    backend.enqueue_workflow(recovered)
    claim_all(lease=timedelta(milliseconds=1))
    # one failure allowed: the expired lease is the backstop
    assert backend.recover_stale(max_failures={KIND: 1}, default_max_failures=25, limit=10) == 1

    for flow in (cancelled, recovered):
        view = backend.get_workflow(flow.id)
        assert view is not None
        assert [s.state for s in view.steps] == [StepState.DEAD, StepState.DEAD]
        assert view.steps[1].note == f"dependency {flow.steps[0].job.id} ({KIND}) ended dead"


def test_cleanup_takes_finished_steps_with_their_jobs(
    backend: Backend, claim_all: ClaimAll
) -> None:
    flow = chord(1)
    backend.enqueue_workflow(flow)
    [job] = claim_all()
    backend.finish([completed(job.claim, "1")])
    [callback] = claim_all()
    backend.finish([completed(callback.claim, "2")])

    assert backend.cleanup(older_than=timedelta(0), status=None, batch_size=10) == 2
    assert backend.get_workflow(flow.id) is None


def test_a_bulk_retry_of_dead_steps_resumes_their_dependants(
    backend: Backend, claim_all: ClaimAll
) -> None:
    flow = chord(2)
    backend.enqueue_workflow(flow)
    claims = {j.claim.job_id: j.claim for j in claim_all()}
    head, other, callback = flow.steps
    backend.finish(
        [
            Finished(claims[head.job.id], Outcome(OutcomeKind.DEAD, note="gone")),
            completed(claims[other.job.id], "2"),
        ]
    )

    assert backend.retry_matching(kind=KIND, note="gone", batch_size=10) == 1

    view = backend.get_workflow(flow.id)
    assert view is not None and view.steps[2].state is StepState.WAITING
    [again] = claim_all()
    backend.finish([completed(again.claim, "1")])
    [job] = claim_all()
    assert job.claim.job_id == callback.job.id and job.payload["values"] == [1, 2]


# -- reads (ADR 0131) ------------------------------------------------------------------


def two_step_chain() -> NewWorkflow:
    """A first step, and a second that waits for it."""
    first = NewStep(new_job(), 0, None, False, 0)
    second = NewStep(new_job(), 1, "value", False, 1)
    return NewWorkflow(new_job().id, (first, second), (NewEdge(first.job.id, second.job.id, 0),))


def counts(**given: int) -> dict[StepState, int]:
    return {state: given.get(state.value, 0) for state in StepState}


def test_no_workflow_is_listed_on_an_empty_queue(backend: Backend) -> None:
    backend.enqueue([new_job()])
    assert backend.list_workflows(limit=10, before=None) == []


def test_workflows_are_listed_newest_first_with_steps_counted_by_state(
    backend: Backend, claim_all: ClaimAll
) -> None:
    older, newer = two_step_chain(), two_step_chain()
    backend.enqueue_workflow(older)
    backend.enqueue_workflow(newer)
    before = backend.now()

    listed = backend.list_workflows(limit=10, before=None)
    assert [w.id for w in listed] == [newer.id, older.id]
    assert [w.counts for w in listed] == [counts(pending=1, waiting=1)] * 2
    assert all(w.created_at <= before and w.finished_at is None for w in listed)
    assert not listed[0].is_finished and listed[0].state is StepState.PENDING

    claims = {j.claim.job_id: j.claim for j in claim_all()}  # both first steps
    first = claims[older.steps[0].job.id]
    backend.finish([Finished(first, Outcome(OutcomeKind.COMPLETED, result="1"))])
    newest, oldest = backend.list_workflows(limit=10, before=None)
    assert newest.counts == counts(claimed=1, waiting=1)
    assert oldest.counts == counts(completed=1, pending=1)  # its second step is a job now
    assert oldest.finished_at is not None and not oldest.is_finished


def test_a_dead_step_and_its_never_run_dependant_count_as_dead(
    backend: Backend, claim_all: ClaimAll
) -> None:
    flow = two_step_chain()
    backend.enqueue_workflow(flow)
    (job,) = claim_all()
    backend.finish([Finished(job.claim, Outcome(OutcomeKind.DEAD, note="boom"))])

    (summary,) = backend.list_workflows(limit=10, before=None)
    assert summary.counts == counts(dead=2)
    assert summary.is_finished and summary.state is StepState.DEAD


def test_workflows_are_listed_in_keyset_pages(backend: Backend) -> None:
    flows = [two_step_chain() for _ in range(5)]
    for flow in flows:
        backend.enqueue_workflow(flow)
    newest_first = [f.id for f in reversed(flows)]

    first = backend.list_workflows(limit=2, before=None)
    second = backend.list_workflows(limit=2, before=first[-1].id)
    third = backend.list_workflows(limit=2, before=second[-1].id)
    assert [w.id for w in first + second + third] == newest_first
    assert backend.list_workflows(limit=2, before=third[-1].id) == []


def test_the_workflow_of_a_job_or_a_waiting_step_and_none_for_a_plain_job(
    backend: Backend,
) -> None:
    flow, plain = two_step_chain(), new_job()
    backend.enqueue_workflow(flow)
    backend.enqueue([plain])

    assert backend.workflow_id_of(flow.steps[0].job.id) == flow.id  # a job
    assert backend.workflow_id_of(flow.steps[1].job.id) == flow.id  # waiting: not a job yet
    assert backend.workflow_id_of(plain.id) is None
    assert backend.workflow_id_of("01NOSUCHJOB000000000000000") is None
