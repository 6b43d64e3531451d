"""``venturi workflows show ID``, run for real against PostgreSQL (ADR 0125)."""

from __future__ import annotations

from typing import Any

from cli_support import Run, failed_with, json_of, succeeded

import venturi
from venturi import chain
from venturi.testing import drain


def test_workflows_show_lists_every_step_with_state_and_parents(
    venturi_cli: Run, app: venturi.App, double: Any
) -> None:
    ref = chain(double.s(1), double.s(), double.s()).delay()
    steps = app.workflow(ref.id).steps

    shown = succeeded(venturi_cli("workflows", "show", ref.id))
    lines = shown.splitlines()
    assert lines[0] == f"workflow {ref.id}: pending, 3 step(s)"
    assert lines[2].split() == ["POS", "ID", "KIND", "STATE", "PARENTS", "FINISHED", "NOTE"]
    rows = [line.split() for line in lines[3:]]
    assert [r[:5] for r in rows] == [
        ["0", steps[0].id, "cli.double", "pending", "-"],
        ["1", steps[1].id, "cli.double", "waiting", steps[0].id],
        ["2", steps[2].id, "cli.double", "waiting", steps[1].id],
    ]

    drain(app)
    detail = json_of(venturi_cli("workflows", "show", ref.id.lower(), "--json"))
    assert detail["id"] == ref.id and detail["state"] == "completed"
    assert [(s["state"], s["parents"], s["position"]) for s in detail["steps"]] == [
        ("completed", [], 0),
        ("completed", [steps[0].id], 1),
        ("completed", [steps[1].id], 2),
    ]
    assert ref.result(timeout=5) == 8


def test_workflows_show_of_an_unknown_id_fails_with_its_name(venturi_cli: Run) -> None:
    line = failed_with(venturi_cli("workflows", "show", "01ARZ3NDEKTSV4RRFFQ69G5FAV"), 1)
    assert line == "venturi: error: no workflow with id '01ARZ3NDEKTSV4RRFFQ69G5FAV'"
