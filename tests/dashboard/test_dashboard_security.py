"""The rules around changes: token, read-only, CSRF, origin, escaping, headers.

Every refused change is checked against the rows: nothing written.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from dashboard_support import BASE, TOKEN, claimed_job, csrf_of, dead_job, sign_in
from starlette.testclient import TestClient

import venturi
from venturi.cli import build_parser, main
from venturi.dashboard import create_app
from venturi.errors import ConfigurationError
from venturi.testing import drain
from venturi.types import WorkerRegistration

HOSTILE = "<script>alert(1)</script>"


def snapshot(db) -> tuple[list, list]:
    return db.jobs(), db.journal()


def post(client: TestClient, path: str, fields: dict[str, str], headers=None):
    return client.post(
        path, data=fields, headers={"origin": BASE, **(headers or {})}, follow_redirects=False
    )


def every_change(job_id: str, running_id: str, csrf: str) -> list[tuple[str, dict[str, str]]]:
    return [
        (f"/jobs/{job_id}/retry", {"csrf": csrf}),
        (f"/jobs/{job_id}/cancel", {"csrf": csrf}),
        (f"/jobs/{running_id}/cancel", {"csrf": csrf}),
        ("/jobs/bulk", {"csrf": csrf, "action": "retry", "kind": "", "note": ""}),
        ("/jobs/bulk", {"csrf": csrf, "action": "cancel", "kind": "", "note": ""}),
        ("/enqueue", {"csrf": csrf, "kind": "mail.send", "args": '["a"]', "kwargs": "{}"}),
    ]


@pytest.fixture
def rows(app, db, tasks) -> dict[str, str]:
    return {
        "dead": dead_job(app, db, tasks["send"]),
        "pending": tasks["send"].delay("p").id,
        "claimed": claimed_job(db, tasks["send"]),
    }


def test_without_sign_in_no_action_is_offered_and_every_change_is_refused(client, rows, db) -> None:
    page = client.get(f"/jobs/{rows['dead']}").text
    assert "/retry" not in page
    assert "Sign in to make changes" in page
    assert 'name="kwargs"' not in client.get("/enqueue").text
    before = snapshot(db)
    for path, fields in every_change(
        rows["dead"], rows["claimed"], csrf_of(client.get("/login").text)
    ):
        assert post(client, path, fields).status_code == 403, path
    assert client.get("/jobs/bulk", params={"action": "retry"}).status_code == 403
    assert snapshot(db) == before


def test_a_wrong_token_does_not_sign_in(client, rows, db) -> None:
    page = client.get("/login").text
    answer = post(client, "/login", {"csrf": csrf_of(page), "token": "not-the-token"})
    assert answer.status_code == 403
    assert "not the dashboard&#39;s token" in answer.text
    before = snapshot(db)
    csrf = csrf_of(client.get("/login").text)
    assert post(client, f"/jobs/{rows['dead']}/retry", {"csrf": csrf}).status_code == 403
    assert snapshot(db) == before


def test_read_only_shows_no_action_and_refuses_every_change(app, tasks, rows, db) -> None:
    with TestClient(create_app(app, read_only=True), base_url=BASE) as client:
        page = client.get(f"/jobs/{rows['dead']}").text
        assert "read-only" in page
        assert 'method="post"' not in page
        assert 'method="post"' not in client.get("/jobs", params={"status": "dead"}).text
        assert "Retry all" not in client.get("/jobs", params={"status": "dead"}).text
        assert 'name="kwargs"' not in client.get("/enqueue").text
        running = client.get(f"/jobs/{rows['claimed']}").text
        assert "Request cancellation" not in running
        assert 'method="post"' not in running
        assert client.get("/login").status_code == 404
        before = snapshot(db)
        for path, fields in every_change(rows["dead"], rows["claimed"], "anything"):
            answer = post(client, path, fields)
            assert answer.status_code == 403, path
            assert "read-only" in answer.text
        assert post(client, "/login", {"token": TOKEN}).status_code == 404
        assert snapshot(db) == before


def test_changes_need_the_session_csrf_token(client, signed_in, rows, db) -> None:
    before = snapshot(db)
    for csrf in ("", "0" * 64, signed_in[:-1] + ("0" if signed_in[-1] != "0" else "1")):
        for path, fields in every_change(rows["dead"], rows["claimed"], csrf):
            assert post(client, path, fields).status_code == 403, (path, csrf)
    for path, fields in every_change(rows["dead"], rows["claimed"], "x"):
        del fields["csrf"]
        assert post(client, path, fields).status_code == 403, path
    assert snapshot(db) == before


def test_a_csrf_token_of_another_session_is_refused(app, tasks, client, signed_in, rows, db):
    with TestClient(create_app(app, token=TOKEN), base_url=BASE) as other:
        other_csrf = sign_in(other)
    assert other_csrf != signed_in
    before = snapshot(db)
    assert post(client, f"/jobs/{rows['dead']}/retry", {"csrf": other_csrf}).status_code == 403
    assert snapshot(db) == before


def test_changes_from_another_origin_are_refused(client, signed_in, rows, db) -> None:
    before = snapshot(db)
    path, fields = f"/jobs/{rows['dead']}/retry", {"csrf": signed_in}
    for headers in (
        {"origin": "http://evil.example"},
        {"origin": "null"},
        {"origin": "http://127.0.0.1:9999"},
    ):
        answer = client.post(path, data=fields, headers=headers, follow_redirects=False)
        assert answer.status_code == 403, headers
    answer = client.post(path, data=fields, follow_redirects=False)  # no Origin, no Referer
    assert answer.status_code == 403
    answer = client.post(
        path, data=fields, headers={"referer": "http://evil.example/x"}, follow_redirects=False
    )
    assert answer.status_code == 403
    assert snapshot(db) == before
    answer = client.post(
        path, data=fields, headers={"referer": f"{BASE}/jobs/x"}, follow_redirects=False
    )
    assert answer.status_code == 303


def test_a_forged_signed_in_cookie_is_not_signed_in(app, tasks, rows, db) -> None:
    with TestClient(create_app(app, token=TOKEN, public_read=True), base_url=BASE) as client:
        csrf = csrf_of(client.get("/login").text)  # valid for this anonymous session's nonce
        nonce = client.cookies["venturi_dashboard"].split(".")[0]
        forged = f"{nonce}.1.{'0' * 64}"
        before = snapshot(db)
        client.cookies.set("venturi_dashboard", forged)
        assert post(client, f"/jobs/{rows['dead']}/retry", {"csrf": csrf}).status_code == 403
        assert snapshot(db) == before
        client.cookies.set("venturi_dashboard", forged)
        assert "/retry" not in client.get(f"/jobs/{rows['dead']}").text


def test_a_session_of_another_token_is_not_signed_in(app, tasks, client, signed_in, rows):
    cookie = client.cookies["venturi_dashboard"]
    another = create_app(app, token="another-token-42", public_read=True)
    with TestClient(another, base_url=BASE) as other:
        other.cookies.set("venturi_dashboard", cookie)
        assert "/retry" not in other.get(f"/jobs/{rows['dead']}").text


def test_the_session_cookie_is_http_only_and_same_site_strict(client) -> None:
    cookie = client.get("/").headers["set-cookie"]
    assert "venturi_dashboard=" in cookie
    assert "HttpOnly" in cookie
    assert "SameSite=strict" in cookie or "SameSite=Strict" in cookie
    assert "Path=/" in cookie


def test_sign_out_ends_the_right_to_change(client, signed_in, rows, db) -> None:
    assert post(client, "/logout", {"csrf": signed_in}).status_code == 303
    page = client.get(f"/jobs/{rows['dead']}").text
    assert "/retry" not in page
    csrf = csrf_of(client.get("/login").text)
    before = snapshot(db)
    assert post(client, f"/jobs/{rows['dead']}/retry", {"csrf": csrf}).status_code == 403
    assert snapshot(db) == before


def test_an_authorize_hook_decides_who_may_change(app, tasks, rows, db) -> None:
    dashboard = create_app(
        app, authorize=lambda request: request.headers.get("x-role") == "admin", secret=b"k" * 32
    )
    with TestClient(dashboard, base_url=BASE) as client:
        page = client.get(f"/jobs/{rows['dead']}", headers={"x-role": "admin"}).text
        csrf = csrf_of(page)
        before = snapshot(db)
        assert post(client, f"/jobs/{rows['dead']}/retry", {"csrf": csrf}).status_code == 403
        assert snapshot(db) == before
        answer = post(
            client, f"/jobs/{rows['dead']}/retry", {"csrf": csrf}, headers={"x-role": "admin"}
        )
        assert answer.status_code == 303
        assert db.one("SELECT status FROM {{prefix}}_jobs WHERE id = %s", (rows["dead"],)) == {
            "status": "pending"
        }


def test_hostile_kinds_notes_payloads_and_attachments_render_as_text(client, app, db) -> None:
    other = venturi.App(app.database_url, prefix=app.prefix, set_as_current=False)

    @other.task(kind=HOSTILE)
    def hostile(html: str) -> None:
        return None

    ref = hostile.delay('<img src=x onerror="alert(2)">')
    other.close()
    db.execute(
        "INSERT INTO {{prefix}}_journal (job_id, kind, run_no, recorded_at, outcome, note,"
        " attachment) VALUES (%s, %s, 1, now(), 'retried', %s, %s)",
        (ref.id, HOSTILE, HOSTILE, '{"html": "</pre><script>alert(3)</script>"}'),
    )
    db.execute(
        "UPDATE {{prefix}}_jobs SET carry = '\"<b onmouseover=alert(4)>\"' WHERE id = %s", (ref.id,)
    )
    pages = [
        client.get("/").text,
        client.get("/jobs").text,
        client.get("/jobs", params={"kind": HOSTILE, "note": HOSTILE}).text,
        client.get(f"/jobs/{ref.id}").text,
    ]
    for html in pages:
        assert "<script>alert" not in html
        assert "<img src=x" not in html
        assert "<b onmouseover" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    detail = pages[-1]
    assert "&lt;img src=x onerror=" in detail
    assert "&lt;/pre&gt;&lt;script&gt;alert(3)" in detail
    assert "&lt;b onmouseover=alert(4)&gt;" in detail


def test_hostile_worker_kinds_and_tracebacks_render_as_text(client, app, db, tasks) -> None:
    app.backend.register_worker(
        WorkerRegistration(
            id=f"{HOSTILE}:1", version="<i>9</i>", kinds=(HOSTILE, "<img src=x>"), concurrency=2
        ),
        expires_in=timedelta(minutes=5),
    )
    job_id = dead_job(
        app, db, tasks["send"], traceback=f"Traceback:\n</pre></details>{HOSTILE}\n<img src=x>"
    )
    hostile_kind = venturi.App(app.database_url, prefix=app.prefix, set_as_current=False)

    @hostile_kind.task(kind=HOSTILE)
    def hostile(html: str) -> None:
        return None

    hostile.delay("x")
    hostile_kind.close()
    workers = client.get("/workers").text
    job = client.get(f"/jobs/{job_id}").text
    overview = client.get("/").text
    for html in (workers, job, overview):
        assert "<script>alert" not in html
        assert "<img src=x>" not in html
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x&gt;" in workers
    assert "&lt;i&gt;9&lt;/i&gt;" in workers
    assert "&lt;/pre&gt;&lt;/details&gt;&lt;script&gt;alert(1)" in job
    assert "no live worker serves" not in overview  # the hostile worker serves that kind


def test_security_headers_are_on_every_response(client, signed_in, rows) -> None:
    responses = [
        client.get("/"),
        client.get("/jobs"),
        client.get(f"/jobs/{rows['dead']}"),
        client.get("/jobs/01NOSUCHJOB000000000000000"),
        client.get("/schedules"),
        client.get("/workers"),
        client.get("/workflows"),
        client.get("/workflows/01NOSUCHWORKFLOW0000000000"),
        client.get("/static/dashboard.css"),
        client.get("/static/live.js"),
        post(client, f"/jobs/{rows['dead']}/retry", {"csrf": "wrong"}),
    ]
    for response in responses:
        headers = response.headers
        csp = headers["content-security-policy"]
        assert "script-src 'self'" in csp
        assert "unsafe-inline" not in csp
        assert "frame-ancestors 'none'" in csp
        assert headers["x-content-type-options"] == "nosniff"
        assert headers["x-frame-options"] == "DENY"
        assert headers["referrer-policy"] == "same-origin"


def test_pages_have_no_inline_script_or_style(client, signed_in, rows) -> None:
    for path in (
        "/",
        "/jobs",
        f"/jobs/{rows['dead']}",
        f"/jobs/{rows['claimed']}",
        "/workers",
        "/schedules",
        "/workflows",
        "/enqueue",
        "/login",
    ):
        html = client.get(path).text
        assert "<script>" not in html
        assert " style=" not in html
        assert " onclick=" not in html


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"token": "t" * 10, "read_only": True},
        {"token": "short"},
        {"token": "t" * 10, "live_interval": 0},
    ],
)
def test_create_app_refuses_unsafe_or_unclear_settings(app, options) -> None:
    with pytest.raises(ConfigurationError):
        create_app(app, **options)


def test_the_command_binds_to_loopback_by_default_and_takes_token_or_read_only(capsys) -> None:
    args = build_parser().parse_args(["dashboard", "--app", "m:app"])
    assert (args.host, args.port, args.token, args.read_only) == ("127.0.0.1", 8080, None, False)
    assert main(["dashboard", "--app", "m:app", "--token", "x" * 10, "--read-only"]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_hostile_result_renders_as_text(client, app) -> None:
    @app.task(kind="reports.hostile")
    def hostile(which: int) -> object:
        return HOSTILE if which == 1 else {"</pre><script>alert(5)</script>": "<img src=x>"}

    refs = [hostile.delay(1), hostile.delay(2)]
    drain(app, ["reports.hostile"])
    first, second = (client.get(f"/jobs/{ref.id}").text for ref in refs)
    for html in (first, second):
        assert "<script>alert" not in html
        assert "<img src=x>" not in html
    assert '<pre class="json">&#34;&lt;script&gt;alert(1)&lt;/script&gt;&#34;</pre>' in first
    key = "&#34;&lt;/pre&gt;&lt;script&gt;alert(5)&lt;/script&gt;&#34;"
    assert f"{key}: &#34;&lt;img src=x&gt;&#34;" in second
