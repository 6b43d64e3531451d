"""The dashboard's workflow reads in the Backend contract (ADR 0131): ``list_workflows``
lists the newest workflows first with their steps counted by state, in keyset pages;
``workflow_id_of`` finds the workflow of a job or of a step not yet a job."""

from __future__ import annotations

from backends import ClaimAll, new_job

from venturi.backend import Backend
from venturi.types import (
    Finished,
    NewEdge,
    NewStep,
    NewWorkflow,
    Outcome,
    OutcomeKind,
    StepState,
)


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
