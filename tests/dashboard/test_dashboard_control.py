"""The kinds page and the control buttons of the kinds and schedules pages (ADR 0139):
pause, resume and limits of a kind, pause, resume and trigger of a stored schedule, each a
POST behind sign-in and CSRF, with its audit trail shown and every name escaped."""

from __future__ import annotations

from dashboard_support import BASE, csrf_of, sign_in
from starlette.testclient import TestClient

ORIGIN = {"origin": BASE}
HOSTILE = "evil.<script>alert(1)</script>"


def post(client: TestClient, path: str, csrf: str, **fields: str):
    return client.post(path, data={"csrf": csrf, **fields}, headers=ORIGIN, follow_redirects=False)


def test_the_kinds_page_shows_state_counts_and_limits(client, app, tasks) -> None:
    tasks["send"].delay("a@example.org")
    app.set_limits("mail.send", global_concurrency=3, actor="ops")
    page = client.get("/kinds").text
    assert "<code>mail.send</code>" in page
    assert "global_concurrency=3*" in page
    assert "ops</strong> set_limits" in page
    assert 'action="/kinds/change"' not in page  # not signed in: no buttons


def test_pause_resume_and_limits_from_the_kinds_page(client, signed_in, app, db, tasks) -> None:
    page = client.get("/kinds").text
    answer = post(client, "/kinds/change", csrf_of(page), kind="mail.send", action="pause")
    assert answer.status_code == 303
    assert answer.headers["location"] == "/kinds?notice=kind-pause"
    assert app.kind("mail.send").state.value == "paused"
    shown = client.get(answer.headers["location"]).text
    assert "Paused: no worker claims this kind" in shown
    assert 'value="resume"' in shown

    answer = post(
        client,
        "/kinds/change",
        signed_in,
        kind="mail.send",
        action="limits",
        global_concurrency="2",
        rate_limit="5/s",
        key_concurrency="",
    )
    assert answer.status_code == 303
    overrides = app.kind("mail.send").overrides
    assert (overrides.global_concurrency, overrides.rate_limit) == (2, "5/s")
    post(client, "/kinds/change", signed_in, kind="mail.send", action="limits", rate_limit="none")
    assert app.kind("mail.send").overrides.rate_limit is None
    post(client, "/kinds/change", signed_in, kind="mail.send", action="resume")
    trail = [(e.action, e.actor.startswith("dashboard")) for e in app.kind_audit("mail.send")]
    assert trail == [("resume", True), ("set_limits", True), ("set_limits", True), ("pause", True)]


def test_bad_changes_are_refused_and_write_nothing(client, signed_in, app, db) -> None:
    cases = [
        ({"kind": "mail.send", "action": "limits", "global_concurrency": "-1"}, 400),
        ({"kind": "mail.send", "action": "limits", "rate_limit": "fast"}, 400),
        ({"kind": "no.such.kind", "action": "pause"}, 404),
        ({"kind": "mail.send", "action": "explode"}, 400),
    ]
    for fields, status in cases:
        assert post(client, "/kinds/change", signed_in, **fields).status_code == status, fields
    missing = post(client, "/schedules/change", signed_in, name="nope", action="pause")
    assert missing.status_code == 404
    assert db.scalar("SELECT count(*) FROM {{prefix}}_audit") == 0


def test_changes_need_sign_in_and_the_csrf_token(client, app, db) -> None:
    # Not signed in: refused, whatever token the form carries.
    assert post(client, "/kinds/change", "", kind="mail.send", action="pause").status_code == 403
    assert post(client, "/schedules/change", "", name="x", action="trigger").status_code == 403
    signed_in = sign_in(client)
    forged = post(client, "/kinds/change", "forged", kind="mail.send", action="pause")
    assert forged.status_code == 403
    real = post(client, "/kinds/change", signed_in, kind="mail.send", action="pause")
    assert real.status_code == 303
    assert db.scalar("SELECT count(*) FROM {{prefix}}_audit") == 1


def test_stored_schedules_are_listed_and_paused_resumed_and_triggered(
    client, signed_in, app, db, tasks
) -> None:
    app.add_schedule("send-often", "*/5 * * * *", tasks["send"], kwargs={"to": "b@example.org"})
    page = client.get("/schedules").text
    assert "<code>send-often</code>" in page
    assert 'action="/schedules/change"' in page
    for action in ("pause", "resume", "trigger"):
        answer = post(client, "/schedules/change", signed_in, name="send-often", action=action)
        assert answer.status_code == 303, action
        assert answer.headers["location"] == f"/schedules?notice=schedule-{action}"
    assert db.scalar("SELECT count(*) FROM {{prefix}}_jobs WHERE kind = 'mail.send'") == 1
    shown = client.get("/schedules").text
    assert "trigger" in shown and "recent change(s)" in shown
    refused = post(client, "/schedules/change", signed_in, name="reports.nightly", action="pause")
    assert refused.status_code == 400  # a code schedule changes in code


def test_names_are_escaped(client, app, db) -> None:
    db.execute(
        "INSERT INTO {{prefix}}_jobs (id, kind, payload, status, created_at, visible_at)"
        " VALUES ('J1', %s, '{}', 'dead', now(), now())",
        (HOSTILE,),
    )
    app.pause_kind(HOSTILE, actor="<b>mallory</b>")
    page = client.get("/kinds").text
    assert "<script>alert(1)</script>" not in page
    assert "&lt;script&gt;" in page
    assert "<b>mallory</b>" not in page
