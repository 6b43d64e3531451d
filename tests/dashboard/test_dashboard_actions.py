"""Every action over HTTP, with the rows checked in the database."""

from __future__ import annotations

import re

from dashboard_support import BASE, claimed_job, csrf_of, dead_job
from markupsafe import escape
from starlette.testclient import TestClient

from venturi.errors import ArgumentsMismatch

ORIGIN = {"origin": BASE}


def post(client: TestClient, path: str, csrf: str, **fields: str):
    return client.post(path, data={"csrf": csrf, **fields}, headers=ORIGIN, follow_redirects=False)


def test_retry_from_the_job_page_makes_the_dead_job_pending(client, signed_in, app, db, tasks):
    job_id = dead_job(app, db, tasks["send"])
    page = client.get(f"/jobs/{job_id}").text
    assert f'action="/jobs/{job_id}/retry"' in page
    answer = post(client, f"/jobs/{job_id}/retry", csrf_of(page))
    assert answer.status_code == 303
    assert answer.headers["location"] == f"/jobs/{job_id}?notice=retried"
    assert db.one("SELECT status FROM {{prefix}}_jobs WHERE id = %s", (job_id,)) == {
        "status": "pending"
    }
    shown = client.get(answer.headers["location"]).text
    assert "Retried: the job is pending again" in shown
    assert 'class="status s-pending"' in shown


def test_cancel_makes_the_pending_job_dead(client, signed_in, app, db, tasks) -> None:
    ref = tasks["send"].delay("a@example.org")
    answer = post(client, f"/jobs/{ref.id}/cancel", signed_in)
    assert answer.status_code == 303
    row = db.one("SELECT status FROM {{prefix}}_jobs WHERE id = %s", (ref.id,))
    assert row["status"] == "dead"
    assert [e["note"] for e in db.journal(ref.id)] == ["cancelled"]


def test_cancel_of_a_running_job_requests_cancellation(client, signed_in, db, tasks) -> None:
    job_id = claimed_job(db, tasks["send"])
    page = client.get(f"/jobs/{job_id}").text
    form = re.search(rf'<form [^>]*action="/jobs/{job_id}/cancel"[^>]*>.*?</form>', page, re.S)
    assert form is not None
    assert 'data-confirm="Request cancellation of this running job?' in form.group(0)
    assert "next lease renewal" in form.group(0)
    assert ">Request cancellation</button>" in form.group(0)
    answer = post(client, f"/jobs/{job_id}/cancel", csrf_of(page))
    assert answer.status_code == 303
    assert answer.headers["location"] == f"/jobs/{job_id}?notice=cancel-requested"
    row = db.one(
        "SELECT status, cancel_requested_at IS NOT NULL AS requested FROM {{prefix}}_jobs"
        " WHERE id = %s",
        (job_id,),
    )
    assert row == {"status": "claimed", "requested": True}
    assert db.journal(job_id) == []  # the run's ending will be the entry
    shown = client.get(answer.headers["location"]).text
    assert "Cancellation requested: the job&#39;s worker sees the request" in shown
    assert "cancellation requested</span>" in shown
    assert f'action="/jobs/{job_id}/cancel"' not in shown  # asked once is enough
    assert "<dt>cancel requested</dt>" in shown


def test_cancel_of_a_pending_job_asks_first_and_says_what_it_does(client, signed_in, tasks):
    ref = tasks["send"].delay("a@example.org")
    page = client.get(f"/jobs/{ref.id}").text
    assert 'data-confirm="Cancel this pending job? It turns dead at once' in page
    assert ">Cancel</button>" in page


def test_retry_of_a_job_that_is_not_dead_is_refused_with_the_reason(client, signed_in, tasks, db):
    ref = tasks["send"].delay("a@example.org")
    before = db.jobs()
    answer = post(client, f"/jobs/{ref.id}/retry", signed_in)
    assert answer.status_code == 409
    assert "only dead jobs can be" in answer.text
    assert db.jobs() == before
    assert post(client, "/jobs/01NOSUCHJOB000000000000000/cancel", signed_in).status_code == 404


def test_bulk_retry_shows_a_count_then_retries_on_confirm(client, signed_in, app, db, tasks):
    smtp = [dead_job(app, db, tasks["send"], note="SMTP down") for _ in range(3)]
    other = dead_job(app, db, tasks["send"], note="ValueError")
    listing = client.get("/jobs", params={"status": "dead", "note": "smtp"}).text
    link = re.search(r'href="(/jobs/bulk\?action=retry[^"]*)"', listing)
    assert link is not None
    confirm = client.get(link.group(1).replace("&amp;", "&"))
    assert "Retry 3 dead job(s)?" in confirm.text
    assert {r["status"] for r in db.jobs()} == {"dead"}  # the confirm page changed nothing
    answer = post(client, "/jobs/bulk", csrf_of(confirm.text), action="retry", kind="", note="smtp")
    assert answer.status_code == 303
    assert "notice=bulk-retried" in answer.headers["location"]
    assert "n=3" in answer.headers["location"]
    rows = {r["id"]: r["status"] for r in db.jobs()}
    assert [rows[i] for i in smtp] == ["pending"] * 3
    assert rows[other] == "dead"
    assert "Retried 3 job(s)." in client.get(answer.headers["location"]).text


def test_bulk_cancel_by_kind_cancels_only_pending_jobs_of_that_kind(client, signed_in, db, tasks):
    tasks["send"].delay_many([{"to": f"u{i}"} for i in range(4)])
    tasks["nightly"].delay()
    confirm = client.get("/jobs/bulk", params={"action": "cancel", "kind": "mail.send"})
    assert "Cancel 4 pending job(s)?" in confirm.text
    answer = post(client, "/jobs/bulk", signed_in, action="cancel", kind="mail.send", note="")
    assert answer.status_code == 303
    statuses = {(r["kind"], r["status"]) for r in db.jobs()}
    assert statuses == {("mail.send", "dead"), ("reports.nightly", "pending")}


def test_bulk_with_an_unknown_action_is_refused(client, signed_in, db, tasks) -> None:
    tasks["send"].delay("a")
    before = db.jobs()
    assert client.get("/jobs/bulk", params={"action": "delete"}).status_code == 400
    assert post(client, "/jobs/bulk", signed_in, action="delete").status_code == 400
    assert db.jobs() == before


def test_enqueue_with_json_arguments_creates_the_job(client, signed_in, db) -> None:
    answer = post(
        client,
        "/enqueue",
        signed_in,
        kind="mail.send",
        args='["ops@example.org"]',
        kwargs='{"subject": "from the dashboard"}',
        priority="0",
        countdown="",
    )
    assert answer.status_code == 303
    (row,) = db.jobs()
    assert answer.headers["location"] == f"/jobs/{row['id']}?notice=enqueued"
    assert row["payload"] == {"to": "ops@example.org", "subject": "from the dashboard"}
    assert row["priority"] == 0


def test_enqueue_with_a_countdown_makes_the_job_scheduled(client, signed_in, db) -> None:
    post(client, "/enqueue", signed_in, kind="mail.send", args='["a"]', countdown="600")
    row = db.one(
        "SELECT visible_at - created_at > interval '9 minutes' AS later FROM {{prefix}}_jobs"
    )
    assert row["later"] is True


def test_enqueue_refusals_show_the_typed_error_and_write_nothing(client, signed_in, db) -> None:
    cases = {
        "does not fit": {"kind": "mail.send", "args": "[]", "kwargs": '{"subjekt": "x"}'},
        "not strict JSON": {"kind": "mail.send", "args": '["a"]', "kwargs": '{"subject": NaN}'},
        "invalid priority": {"kind": "mail.send", "args": '["a"]', "priority": "7"},
        "invalid delay": {"kind": "mail.send", "args": '["a"]', "countdown": "-5"},
        "not valid JSON": {"kind": "mail.send", "args": "[oops"},
        "must be a JSON object": {"kind": "mail.send", "args": '["a"]', "kwargs": "[1]"},
        "no task of kind": {"kind": "no.such.kind", "args": "[]"},
    }
    for expected, fields in cases.items():
        answer = post(client, "/enqueue", signed_in, **fields)
        assert answer.status_code == 400, expected
        assert "Refused, nothing was written" in answer.text
        assert expected in answer.text, (expected, answer.text[-2500:])
    assert db.jobs() == []


def test_enqueue_refusal_message_matches_the_error_delay_raises(client, signed_in, tasks, db):
    try:
        tasks["send"].delay(subjekt="x")
    except ArgumentsMismatch as exc:
        message = str(exc)
    answer = post(client, "/enqueue", signed_in, kind="mail.send", kwargs='{"subjekt": "x"}')
    assert str(escape(message)) in answer.text
    assert db.jobs() == []
