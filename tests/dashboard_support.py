"""Helpers of the dashboard tests (importable as ``dashboard_support``): sign-in,
rows as a worker would leave them, and a real uvicorn server in a thread."""

from __future__ import annotations

import re
import socket
import threading
from typing import Any

import uvicorn
from starlette.testclient import TestClient
from support import wait_until

import venturi

TOKEN = "test-token-0123456789"
BASE = "http://127.0.0.1"
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def csrf_of(html: str) -> str:
    found = _CSRF.search(html)
    assert found is not None, "no CSRF field on the page"
    return found.group(1)


def sign_in(client: TestClient, root: str = "") -> str:
    """Signs the client in with the token; returns the CSRF token of the new session."""
    page = client.get(f"{root}/login")
    assert page.status_code == 200
    answer = client.post(
        f"{root}/login",
        data={"csrf": csrf_of(page.text), "token": TOKEN},
        headers={"origin": BASE},
        follow_redirects=False,
    )
    assert answer.status_code == 303, answer.text
    return csrf_of(client.get(f"{root}/").text)


def dead_job(
    app: venturi.App,
    db: Any,
    task: Any,
    note: str = "ValueError: boom",
    traceback: str | None = None,
) -> str:
    """A job that failed for good, as a worker would have left it (with the run's
    traceback, when given)."""
    ref = task.delay("dead@example.org")
    db.execute(
        "UPDATE {{prefix}}_jobs SET status = 'dead', finished_at = now(), run_count = 1,"
        " failure_count = 1 WHERE id = %s",
        (ref.id,),
    )
    db.execute(
        "INSERT INTO {{prefix}}_journal"
        " (job_id, kind, run_no, recorded_at, outcome, note, traceback)"
        " VALUES (%s, %s, 1, now(), 'dead', %s, %s)",
        (ref.id, task.kind, note, traceback),
    )
    return str(ref.id)


def claimed_job(db: Any, task: Any) -> str:
    """A job a worker is running, as its claim would have left it."""
    ref = task.delay("running@example.org")
    db.execute(
        "UPDATE {{prefix}}_jobs SET status = 'claimed', run_count = 1,"
        " claimed_by = 'web-1:4242', claim_expires_at = now() + interval '2 minutes'"
        " WHERE id = %s",
        (ref.id,),
    )
    return str(ref.id)


def traceback_text(message: str = "ValueError: no such mailbox") -> str:
    """A traceback as the executor stores it."""
    return (
        "Traceback (most recent call last):\n"
        '  File "/srv/app/mail.py", line 12, in send\n'
        "    deliver(to)\n"
        '  File "/srv/app/smtp.py", line 40, in deliver\n'
        "    raise ValueError(message)\n"
        f"{message}\n"
    )


class Served:
    """A real uvicorn server on a free loopback port, in a thread of this process."""

    def __init__(self, asgi: Any) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}"
        config = uvicorn.Config(asgi, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name="dashboard-server"
        )
        self._thread.start()
        wait_until(lambda: self._server.started, timeout=15)

    def stop(self) -> None:
        self._server.should_exit = True
        self._thread.join(timeout=15)
        self._socket.close()


def seed(app: venturi.App, db: Any, tasks: dict[str, Any]) -> None:
    """Rows of every status spread over the last hour, as a busy queue would have."""
    send = tasks["send"]
    refs = send.delay_many([{"to": f"user{i}@example.org"} for i in range(120)])
    for i, ref in enumerate(refs[:90]):
        db.execute(
            "UPDATE {{prefix}}_jobs SET status = 'completed', run_count = 1,"
            " finished_at = now() - make_interval(mins => %s) WHERE id = %s",
            ((i * 23) % 53 + i % 7, ref.id),
        )
        db.execute(
            "INSERT INTO {{prefix}}_journal (job_id, kind, run_no, recorded_at, outcome, note)"
            " SELECT id, kind, 1, finished_at, 'completed', %s FROM {{prefix}}_jobs WHERE id = %s",
            (f"sent to user{i}@example.org", ref.id),
        )
    for i, ref in enumerate(refs[90:97]):
        db.execute(
            "UPDATE {{prefix}}_jobs SET status = 'dead', run_count = 3, failure_count = 3,"
            " finished_at = now() - make_interval(mins => %s) WHERE id = %s",
            (i * 7, ref.id),
        )
        db.execute(
            "INSERT INTO {{prefix}}_journal (job_id, kind, run_no, recorded_at, outcome, note)"
            " SELECT id, kind, 3, finished_at, 'dead', %s FROM {{prefix}}_jobs WHERE id = %s",
            ("SMTPRecipientsRefused: 550 mailbox unavailable", ref.id),
        )
    for ref in refs[97:100]:
        db.execute(
            "UPDATE {{prefix}}_jobs SET status = 'claimed', run_count = 1,"
            " claimed_by = 'web-1:4242', claim_expires_at = now() + interval '2 minutes'"
            " WHERE id = %s",
            (ref.id,),
        )
    tasks["send"].apply_async(("later@example.org",), countdown=3600)
    orphan = venturi.App(app.database_url, prefix=app.prefix, set_as_current=False)

    @orphan.task(kind="billing.invoice")
    def invoice(account: int) -> None:
        return None

    invoice.delay_many([{"account": n} for n in range(4)])
    orphan.close()
