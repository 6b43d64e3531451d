"""The Workflows role on PostgreSQL: a workflow written in one statement, and read back.

The hand-on of results to children is ``finish``'s (leases.py); dependants are
ended outside a finish by ``Store._end_dependants`` (recovery, cancel) and
revived by the operator's retry (operations.py; ADR 0125, 0131).
"""

from __future__ import annotations

from venturi.postgres.store import Store
from venturi.types import NewWorkflow, StepState, Workflow, WorkflowStep, WorkflowSummary

__all__ = ["WorkflowVerbs"]


class WorkflowVerbs(Store):
    """``Workflows``' verbs (venturi/backend/)."""

    def enqueue_workflow(self, workflow: NewWorkflow) -> None:
        steps = workflow.steps
        self._run(
            lambda conn: self._queries.enqueue_workflow.exec(
                conn,
                workflow_id=workflow.id,
                ids=[s.job.id for s in steps],
                kinds=[s.job.kind for s in steps],
                payloads=[s.job.payload for s in steps],
                priorities=[int(s.job.priority) for s in steps],
                delays=[s.job.delay for s in steps],
                waiting_fors=[s.waiting_for for s in steps],
                input_args=[s.input_arg for s in steps],
                input_alls=[s.input_all for s in steps],
                positions=[s.position for s in steps],
                edge_parents=[e.parent_id for e in workflow.edges],
                edge_children=[e.child_id for e in workflow.edges],
                edge_positions=[e.position for e in workflow.edges],
                channel=self._channel,
                on_error=workflow.on_error,
            )
        )

    def get_workflow(self, workflow_id: str) -> Workflow | None:
        rows = self._run(
            lambda conn: self._queries.workflow_steps.many(conn, workflow_id=workflow_id)
        )
        if not rows:
            return None
        steps = tuple(
            WorkflowStep(
                id=r["id"],
                kind=r["kind"],
                state=StepState(r["status"]),
                parents=tuple(r["parents"]),
                position=int(r["position"]),
                note=r["note"],
                finished_at=r["finished_at"],
            )
            for r in rows
        )
        return Workflow(workflow_id, steps)

    def list_workflows(self, *, limit: int, before: str | None) -> list[WorkflowSummary]:
        rows = self._run(
            lambda conn: self._queries.list_workflows.many(conn, limit=limit, before=before)
        )
        return [
            WorkflowSummary(
                id=r["id"],
                counts={state: int(r[state.value]) for state in StepState},
                created_at=r["created_at"],
                finished_at=r["finished_at"],
            )
            for r in rows
        ]

    def workflow_id_of(self, job_id: str) -> str | None:
        row = self._run(lambda conn: self._queries.workflow_id_of.one(conn, id=job_id))
        return None if row is None else str(row["workflow_id"])


