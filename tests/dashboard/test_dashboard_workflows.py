"""The workflows page, one workflow's page, and the job page's workflow panel over HTTP,
against real chains and chords run by a real drain (ADR 0131)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.testclient import TestClient

import venturi
from venturi import chain, chord
from venturi.errors import Fail
from venturi.testing import drain

HOSTILE = "<script>alert(1)</script>"


@pytest.fixture
def flow_tasks(app: venturi.App, tasks: dict[str, Any]) -> dict[str, Any]:
    @app.task(kind="wf.add")
    def add(x: int, y: int) -> int:
        return x + y

    @app.task(kind="wf.total")
    def total(values: list[int]) -> int:
        return sum(values)

    @app.task(kind="wf.boom", max_failures=1)
    def boom(x: int) -> int:
        raise Fail(f"boom {x} {HOSTILE}")

    return {"add": add, "total": total, "boom": boom}


def rows_of(html: str, table: str) -> list[list[str]]:
    """The cells of each body row of the first ``table.<table>``, tags stripped."""
    body = html[html.index(f'class="grid {table}"') :]
    body = body[body.index("<tbody>") : body.index("</tbody>")]
    return [
        [
            re.sub(r"<[^>]+>", "", cell).strip()
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.S)
        ]
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.S)
    ]


def test_the_workflows_page_lists_the_newest_first_with_steps_by_state(
    client: TestClient, app, flow_tasks
) -> None:
    add, total = flow_tasks["add"], flow_tasks["total"]
    done = chain(add.s(1, 2), add.s(10)).delay()
    drain(app, ["wf.add"])
    waiting = chord([add.s(1, 2), add.s(3, 4), add.s(5, 6)], total.s()).delay()

    html = client.get("/workflows").text
    rows = rows_of(html, "workflows")
    assert [r[0] for r in rows] == [waiting.id, done.id]
    assert rows[0][1:4] == ["pending", "4", "1 waiting · 3 pending"]
    assert rows[0][5] == "running"
    assert rows[1][1:4] == ["completed", "2", "2 completed"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", rows[1][5])
    assert f'href="/workflows/{waiting.id}"' in html


def test_the_workflows_page_pages_with_the_before_id(client: TestClient, flow_tasks) -> None:
    from venturi.dashboard.pages import WORKFLOW_PAGE_SIZE

    add = flow_tasks["add"]
    refs = [chain(add.s(i, 1), add.s(1)).delay() for i in range(WORKFLOW_PAGE_SIZE + 3)]
    first = client.get("/workflows").text
    older = re.search(r'href="(/workflows\?before=[^"]+)"', first)
    assert older is not None
    second = client.get(older.group(1)).text
    listed = [r[0] for r in rows_of(first, "workflows") + rows_of(second, "workflows")]
    assert listed == [r.id for r in reversed(refs)]
    assert "Older" not in second
    assert "No older workflow." in client.get("/workflows", params={"before": "0"}).text


def test_a_workflows_page_without_workflows_says_how_to_make_one(client: TestClient) -> None:
    html = client.get("/workflows").text
    assert "No workflow yet" in html
    assert "<table" not in html.split('id="workflows"')[1]


def test_one_workflow_lists_its_steps_with_states_and_parents(
    client: TestClient, app, flow_tasks
) -> None:
    add, total = flow_tasks["add"], flow_tasks["total"]
    ref = chord([add.s(1, 2), add.s(3, 4)], total.s()).delay()
    steps = app.workflow(ref.id).steps

    html = client.get(f"/workflows/{ref.id}").text
    rows = rows_of(html, "steps")
    assert [r[:5] for r in rows] == [
        ["0", steps[0].id, "wf.add", "pending", "—"],
        ["1", steps[1].id, "wf.add", "pending", "—"],
        ["2", steps[2].id, "wf.total", "waiting", "#0, #1"],
    ]
    assert f'<a href="/jobs/{steps[0].id}" title="wf.add {steps[0].id}">#0</a>' in html
    assert client.get("/workflows/01NOSUCHWORKFLOW0000000000").status_code == 404


def test_the_job_page_shows_the_workflow_the_job_is_a_step_of(
    client: TestClient, app, flow_tasks, tasks
) -> None:
    add = flow_tasks["add"]
    ref = chain(add.s(1, 2), add.s(10), add.s(100)).delay()
    drain(app, ["wf.add"])
    steps = app.workflow(ref.id).steps

    html = client.get(f"/jobs/{steps[1].id}").text
    panel = html[html.index('id="workflow-panel"') :]
    assert f'<a href="/workflows/{ref.id}"><code>{ref.id}</code></a>' in panel
    assert "3 completed" in panel
    current = re.findall(r'<tr class="current" aria-current="step">\s*<td class="num">(\d+)', panel)
    assert current == ["1"]
    assert [r[0] for r in rows_of(panel, "steps")] == ["0", "1", "2"]
    plain = tasks["send"].delay("plain@example.org")
    assert 'id="workflow-panel"' not in client.get(f"/jobs/{plain.id}").text


def test_a_step_that_is_not_a_job_yet_has_a_page_of_its_own(
    client: TestClient, app, flow_tasks
) -> None:
    add, total = flow_tasks["add"], flow_tasks["total"]
    ref = chord([add.s(1, 2), add.s(3, 4)], total.s()).delay()
    callback = app.workflow(ref.id).steps[2]

    answer = client.get(f"/jobs/{callback.id}")
    assert answer.status_code == 200
    assert "is not a job yet: it becomes one, with its parents' results" in answer.text
    assert 'id="workflow-panel"' in answer.text
    assert client.get("/jobs/01NOSUCHJOB000000000000000").status_code == 404


def test_a_step_that_never_ran_says_which_dependency_ended_dead(
    client: TestClient, app, flow_tasks
) -> None:
    boom, add = flow_tasks["boom"], flow_tasks["add"]
    ref = chain(boom.s(1), add.s(2)).delay()
    drain(app, ["wf.boom"])
    first, second = app.workflow(ref.id).steps

    html = client.get(f"/jobs/{second.id}").text
    assert "never ran: dependency" in html
    assert first.id in html
    rows = rows_of(client.get(f"/workflows/{ref.id}").text, "steps")
    assert [r[3] for r in rows] == ["dead", "dead"]
    summary = rows_of(client.get("/workflows").text, "workflows")
    assert summary[0][1:4] == ["dead", "2", "2 dead"]


def test_hostile_kinds_and_notes_in_a_workflow_render_as_text(
    client: TestClient, app, flow_tasks
) -> None:
    @app.task(kind=HOSTILE)
    def hostile(x: int) -> int:
        return x

    ref = chain(flow_tasks["boom"].s(1), hostile.s()).delay()
    drain(app, ["wf.boom"])
    steps = app.workflow(ref.id).steps
    pages = [
        client.get("/workflows").text,
        client.get(f"/workflows/{ref.id}").text,
        client.get(f"/jobs/{steps[0].id}").text,
        client.get(f"/jobs/{steps[1].id}").text,
    ]
    for html in pages:
        assert "<script>alert" not in html
    for html in pages[1:]:
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_ids_no_job_or_workflow_can_have_are_not_found(client: TestClient) -> None:
    for path in ("/jobs/bad%00id", "/workflows/bad%00id", "/jobs/" + "x" * 300):
        assert client.get(path).status_code == 404, path
    assert client.get("/workflows", params={"before": "bad\x00id"}).status_code == 400


def test_a_large_chord_is_listed_bounded_with_the_jobs_own_step_kept(
    client: TestClient, app, flow_tasks
) -> None:
    from venturi.dashboard.views import MAX_PARENTS_SHOWN, MAX_STEPS_IN_PANEL

    add, total = flow_tasks["add"], flow_tasks["total"]
    members = MAX_STEPS_IN_PANEL + 5
    ref = chord([add.s(i, 1) for i in range(members)], total.s()).delay()
    drain(app, ["wf.add", "wf.total"])
    callback = app.workflow(ref.id).steps[-1]

    panel = client.get(f"/jobs/{callback.id}").text
    panel = panel[panel.index('id="workflow-panel"') :]
    rows = rows_of(panel, "steps")
    assert len(rows) == MAX_STEPS_IN_PANEL
    assert [r[0] for r in rows[-2:]] == [str(MAX_STEPS_IN_PANEL - 2), str(members)]
    assert f"{members + 1 - MAX_STEPS_IN_PANEL} more step(s) not listed" in panel
    parents = ", ".join(f"#{i}" for i in range(MAX_PARENTS_SHOWN))
    assert rows[-1][4] == f"{parents} and {members - MAX_PARENTS_SHOWN} more"
    assert len(rows_of(client.get(f"/workflows/{ref.id}").text, "steps")) == members + 1
