"""With a token, reading needs the sign-in too (SPEC 6.6): every page, fragment and
change answers a stranger with the way to the sign-in and nothing else;
``public_read`` keeps reading open. And the command's start checks beyond loopback."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
from dashboard_support import BASE, TOKEN, claimed_job, csrf_of, dead_job, sign_in
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from venturi import chain
from venturi.cli import main
from venturi.cli.services import DASHBOARD_TOKEN_ENV
from venturi.dashboard import create_app

PAGE = {"accept": "text/html,application/xhtml+xml;q=0.9,*/*;q=0.8"}


@pytest.fixture
def stranger(app, tasks):
    """A browser that has not signed in, on a dashboard with a token (the default)."""
    with TestClient(create_app(app, token=TOKEN), base_url=BASE) as client:
        yield client


@pytest.fixture
def rows(app, db, tasks) -> dict[str, str]:
    flow = chain(tasks["send"].si("a@example.org"), tasks["send"].si("b@example.org")).delay()
    return {
        "dead": dead_job(app, db, tasks["send"], note="ValueError: secret-note-4711"),
        "claimed": claimed_job(db, tasks["send"]),
        "workflow": flow.id,
        "waiting": app.workflow(flow.id).steps[-1].id,
    }


def reads(rows: dict[str, str]) -> list[str]:
    return [
        "/",
        "/jobs",
        "/jobs?status=dead&kind=mail.send",
        f"/jobs/{rows['dead']}",
        f"/jobs/{rows['waiting']}",
        "/jobs/bulk?action=retry",
        "/workflows",
        f"/workflows/{rows['workflow']}",
        "/workers",
        "/schedules",
        "/enqueue",
    ]


def sign_in_to(client, target: str, *, token: str = TOKEN, root: str = ""):
    """Post the sign-in form of a fresh login page, asking to go back to ``target``."""
    login = client.get(f"{root}/login").text
    return client.post(
        f"{root}/login",
        data={"csrf": csrf_of(login), "token": token, "next": target},
        headers={"origin": BASE},
        follow_redirects=False,
    )


def counting(app, *names: str) -> list[str]:
    calls: list[str] = []
    for name in names:
        operation = getattr(app, name)

        def counted(*args, _name=name, _operation=operation, **kwargs):
            calls.append(_name)
            return _operation(*args, **kwargs)

        setattr(app, name, counted)
    return calls


def test_a_page_asked_for_without_sign_in_redirects_to_the_sign_in(stranger, rows, app) -> None:
    calls = counting(
        app, "stats", "job", "job_summaries", "workflows", "workflow", "workers", "result"
    )
    for path in reads(rows):
        answer = stranger.get(path, headers=PAGE, follow_redirects=False)
        assert answer.status_code == 303, path
        target = urlsplit(answer.headers["location"])
        assert target.path == "/login", path
        assert parse_qs(target.query) == {"next": [path], "notice": ["sign-in-to-read"]}
        assert answer.text == ""
    assert calls == []  # nothing was read for a stranger


def test_anything_else_asked_for_without_sign_in_is_a_401(stranger, rows, app, db) -> None:
    before = db.jobs(), db.journal()
    for path in reads(rows):
        for headers in ({}, {"accept": "application/json"}, {**PAGE, "x-venturi-live": "1"}):
            answer = stranger.get(path, headers=headers, follow_redirects=False)
            assert answer.status_code == 401, (path, headers)
            assert "mail.send" not in answer.text
            assert "secret-note-4711" not in answer.text
            assert "/login" in answer.text
    csrf = csrf_of(stranger.get("/login").text)
    for path, fields in (
        (f"/jobs/{rows['dead']}/retry", {"csrf": csrf}),
        (f"/jobs/{rows['claimed']}/cancel", {"csrf": csrf}),
        ("/jobs/bulk", {"csrf": csrf, "action": "retry", "kind": "", "note": ""}),
        ("/enqueue", {"csrf": csrf, "kind": "mail.send", "args": '["a"]', "kwargs": "{}"}),
        ("/logout", {"csrf": csrf}),
    ):
        answer = stranger.post(path, data=fields, headers={"origin": BASE}, follow_redirects=False)
        assert answer.status_code == 401, path
        form = stranger.post(
            path, data=fields, headers={"origin": BASE, **PAGE}, follow_redirects=False
        )
        assert form.status_code == 303, path  # a browser's form: to the sign-in, not back
        assert form.headers["location"] == "/login?notice=sign-in-to-read"
    assert (db.jobs(), db.journal()) == before


def test_the_sign_in_page_and_static_files_need_no_sign_in(stranger) -> None:
    login = stranger.get("/login?notice=sign-in-to-read", headers=PAGE)
    assert login.status_code == 200
    assert "Sign in with the dashboard&#39;s token to read it." in login.text
    assert "Reading needs it too." in login.text
    assert 'href="/jobs"' not in login.text  # no way round it offered
    for path in ("/static/live.js", "/static/dashboard.css", "/static/favicon.svg"):
        assert stranger.get(path).status_code == 200, path


def test_signing_in_leads_back_to_the_page_asked_for(stranger, rows) -> None:
    asked = "/jobs?status=dead&kind=mail.send"
    sent = stranger.get(asked, headers=PAGE, follow_redirects=False).headers["location"]
    login = stranger.get(sent, headers=PAGE).text
    assert 'name="next" value="/jobs?status=dead&amp;kind=mail.send"' in login
    answer = sign_in_to(stranger, asked)
    assert answer.status_code == 303
    assert answer.headers["location"] == f"{asked}&notice=signed-in"
    page = stranger.get(answer.headers["location"], headers=PAGE)
    assert page.status_code == 200
    assert rows["dead"] in page.text
    assert "secret-note-4711" in page.text


def test_a_wrong_token_keeps_the_page_to_go_back_to(stranger) -> None:
    assert 'name="next" value="/workers"' in stranger.get("/login?next=/workers").text
    answer = sign_in_to(stranger, "/workers", token="not-the-token")
    assert answer.status_code == 403
    assert 'name="next" value="/workers"' in answer.text
    assert stranger.get("/workers").status_code == 401


@pytest.mark.parametrize(
    "target",
    [
        "//evil.example/x",
        "/\\evil.example/x",
        "http://evil.example/x",
        "evil.example",
        "/jobs\r\nset-cookie: x=1",
        "",
    ],
)
def test_the_sign_in_sends_back_to_no_other_site(stranger, target) -> None:
    answer = sign_in_to(stranger, target)
    assert answer.status_code == 303
    assert answer.headers["location"] == "/?notice=signed-in"


def test_mounted_the_way_back_stays_under_the_mount(app, tasks) -> None:
    host = Starlette(routes=[Mount("/ops/queue", create_app(app, token=TOKEN))])
    with TestClient(host, base_url=BASE) as client:
        sent = client.get("/ops/queue/workers", headers=PAGE, follow_redirects=False)
        assert sent.headers["location"] == (
            "/ops/queue/login?next=%2Fops%2Fqueue%2Fworkers&notice=sign-in-to-read"
        )
        for target, expected in (
            ("/ops/queue/workers", "/ops/queue/workers?notice=signed-in"),
            ("/ops/other", "/ops/queue/?notice=signed-in"),
            ("/ops/queueish", "/ops/queue/?notice=signed-in"),
        ):
            answer = sign_in_to(client, target, root="/ops/queue")
            assert answer.headers["location"] == expected, target


def test_behind_a_stripping_proxy_the_way_back_names_the_prefix(app, tasks) -> None:
    with TestClient(create_app(app, token=TOKEN, root_path="/queue/"), base_url=BASE) as client:
        sent = client.get("/jobs", headers=PAGE, follow_redirects=False)
        assert sent.headers["location"] == (
            "/queue/login?next=%2Fqueue%2Fjobs&notice=sign-in-to-read"
        )


def test_a_forged_or_foreign_session_reads_nothing(app, tasks, rows) -> None:
    with TestClient(create_app(app, token=TOKEN), base_url=BASE) as client:
        client.get("/login")
        nonce = client.cookies["venturi_dashboard"].split(".")[0]
        client.cookies.set("venturi_dashboard", f"{nonce}.1.{'0' * 64}")
        assert client.get(f"/jobs/{rows['dead']}").status_code == 401
        client.cookies.clear()
        sign_in(client)
        cookie = client.cookies["venturi_dashboard"]
        assert client.get(f"/jobs/{rows['dead']}").status_code == 200
    with TestClient(create_app(app, token="another-token-42"), base_url=BASE) as other:
        other.cookies.set("venturi_dashboard", cookie)
        assert other.get(f"/jobs/{rows['dead']}").status_code == 401


def test_signing_out_ends_reading(stranger, rows) -> None:
    csrf = sign_in(stranger)
    assert stranger.get("/").status_code == 200
    answer = stranger.post(
        "/logout", data={"csrf": csrf}, headers={"origin": BASE}, follow_redirects=False
    )
    assert answer.status_code == 303
    assert stranger.get("/").status_code == 401


def test_public_read_keeps_reading_open_and_changes_behind_the_sign_in(app, tasks, rows, db):
    with TestClient(create_app(app, token=TOKEN, public_read=True), base_url=BASE) as client:
        for path in reads(rows):
            assert client.get(path, headers=PAGE).status_code in (200, 403), path
        page = client.get(f"/jobs/{rows['dead']}", headers=PAGE).text
        assert "secret-note-4711" in page
        assert "Sign in to make changes" in page
        assert "Reading needs no sign-in." in client.get("/login").text
        before = db.jobs()
        csrf = csrf_of(client.get("/login").text)
        answer = client.post(
            f"/jobs/{rows['dead']}/retry", data={"csrf": csrf}, headers={"origin": BASE}
        )
        assert answer.status_code == 403
        assert db.jobs() == before


def test_an_authorize_hook_it_approves_reads_without_the_token(app, tasks, rows) -> None:
    dashboard = create_app(
        app, token=TOKEN, authorize=lambda request: request.headers.get("x-role") == "admin"
    )
    with TestClient(dashboard, base_url=BASE) as client:
        assert client.get(f"/jobs/{rows['dead']}").status_code == 401
        assert client.get(f"/jobs/{rows['dead']}", headers={"x-role": "admin"}).status_code == 200


def test_without_a_token_the_host_in_front_decides_who_reads(app, tasks, rows) -> None:
    """Read-only, or the host's own sign-in (``authorize``, as Django mounts it): the
    dashboard has no sign-in of its own to ask for."""
    for dashboard in (
        create_app(app, read_only=True),
        create_app(app, authorize=lambda request: False, secret=b"k" * 32),
    ):
        with TestClient(dashboard, base_url=BASE) as client:
            assert client.get(f"/jobs/{rows['dead']}", headers=PAGE).status_code == 200


# -- the command's start checks ------------------------------------------------------


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "192.0.2.10", "queue.example.org"])
@pytest.mark.parametrize("mode", [[], ["--read-only"], ["--public-read"]])
def test_beyond_loopback_without_a_token_the_command_refuses_to_start(
    host, mode, capsys, monkeypatch
) -> None:
    monkeypatch.delenv(DASHBOARD_TOKEN_ENV, raising=False)
    status = main(["dashboard", "--app", "no_such_module:app", "--host", host, *mode])
    assert status == 2
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith(f"venturi: error: refusing to serve the dashboard on {host} ")
    assert f"--token T (8 characters or more) or set ${DASHBOARD_TOKEN_ENV}" in line
    if mode == ["--read-only"]:
        assert "drop --read-only" in line


def test_the_command_takes_public_read(capsys) -> None:
    from venturi.cli import build_parser

    assert build_parser().parse_args(["dashboard", "--app", "m:app"]).public_read is False
    args = build_parser().parse_args(["dashboard", "--app", "m:app", "--public-read"])
    assert args.public_read is True
