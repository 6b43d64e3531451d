"""Mounted inside another ASGI app under a prefix, behind a stripping proxy, and
served by a real WSGI server."""

from __future__ import annotations

import threading
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import httpx2
import pytest
from dashboard_support import TOKEN, csrf_of, dead_job, sign_in
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from venturi.dashboard import create_app, create_wsgi_app


def test_mounted_under_a_prefix_links_assets_and_actions_stay_under_it(app, db, tasks) -> None:
    async def home(request):
        return PlainTextResponse("host app")

    host = Starlette(
        routes=[
            Route("/", home),
            Mount("/ops/queue", create_app(app, token=TOKEN)),
        ]
    )
    job_id = dead_job(app, db, tasks["send"])
    with TestClient(host, base_url="http://127.0.0.1") as client:
        assert client.get("/").text == "host app"
        unsigned = client.get(
            f"/ops/queue/jobs/{job_id}", headers={"accept": "text/html"}, follow_redirects=False
        )
        assert unsigned.status_code == 303
        assert unsigned.headers["location"].startswith(
            f"/ops/queue/login?next=%2Fops%2Fqueue%2Fjobs%2F{job_id}"
        )
        login = client.get("/ops/queue/login")
        assert 'href="/ops/queue/static/dashboard.css"' in login.text
        assert "Path=/ops/queue" in login.headers["set-cookie"]
        assert client.get("/ops/queue/static/dashboard.css").status_code == 200
        csrf = sign_in(client, "/ops/queue")
        overview = client.get("/ops/queue/")
        assert overview.status_code == 200
        assert 'href="/ops/queue/jobs"' in overview.text
        assert 'href="/ops/queue/static/dashboard.css"' in overview.text
        page = client.get(f"/ops/queue/jobs/{job_id}").text
        assert f'action="/ops/queue/jobs/{job_id}/retry"' in page
        answer = client.post(
            f"/ops/queue/jobs/{job_id}/retry",
            data={"csrf": csrf},
            headers={"origin": "http://127.0.0.1"},
            follow_redirects=False,
        )
        assert answer.status_code == 303
        assert answer.headers["location"] == f"/ops/queue/jobs/{job_id}?notice=retried"
    assert db.one("SELECT status FROM {{prefix}}_jobs WHERE id = %s", (job_id,)) == {
        "status": "pending"
    }


def test_root_path_is_used_when_a_proxy_strips_the_prefix(app, tasks) -> None:
    with TestClient(create_app(app, read_only=True, root_path="/queue/"), base_url="http://x") as c:
        page = c.get("/jobs")
        assert page.status_code == 200
        assert 'href="/queue/jobs"' in page.text
        assert 'href="/queue/static/live.js"' not in page.text
        assert 'src="/queue/static/live.js"' in page.text


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        return None


@pytest.fixture
def wsgi_server(app, tasks):
    server: WSGIServer = make_server(
        "127.0.0.1", 0, create_wsgi_app(app, token=TOKEN), handler_class=_QuietHandler
    )
    thread = threading.Thread(target=server.serve_forever, name="wsgiref")
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    thread.join(timeout=10)
    server.server_close()


def test_the_wsgi_form_serves_pages_and_changes_under_a_real_wsgi_server(
    wsgi_server, app, db, tasks
) -> None:
    job_id = dead_job(app, db, tasks["send"])
    with httpx2.Client(base_url=wsgi_server, timeout=30) as client:
        assert client.get("/").status_code == 401
        assert client.get("/static/dashboard.css").status_code == 200
        login = client.get("/login").text
        signed = client.post(
            "/login",
            data={"csrf": csrf_of(login), "token": TOKEN},
            headers={"origin": wsgi_server},
        )
        assert signed.status_code == 303
        overview = client.get("/")
        assert overview.status_code == 200
        assert "mail.send" in overview.text
        assert overview.headers["x-frame-options"] == "DENY"
        page = client.get(f"/jobs/{job_id}").text
        answer = client.post(
            f"/jobs/{job_id}/retry", data={"csrf": csrf_of(page)}, headers={"origin": wsgi_server}
        )
        assert answer.status_code == 303
    assert db.one("SELECT status FROM {{prefix}}_jobs WHERE id = %s", (job_id,)) == {
        "status": "pending"
    }
