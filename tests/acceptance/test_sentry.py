"""Failed runs reach Sentry (ADR 0140): a real worker runs real jobs on PostgreSQL, and the
events are read from sentry-sdk's own transport hook (a ``Transport`` that keeps the
envelopes it is given), never from a mock of venturi."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import sentry_sdk
from sentry_sdk.envelope import Envelope
from sentry_sdk.transport import Transport
from support import wait_until

import venturi
from venturi.contrib.sentry import instrument, sentry_event, traceback_exceptions
from venturi.events import RunEnded
from venturi.types import OutcomeKind, Status
from venturi.worker import Worker


class CapturingTransport(Transport):
    """Keeps every envelope the client would have sent."""

    def __init__(self, options: dict[str, Any] | None = None) -> None:
        super().__init__(options)
        self.envelopes: list[Envelope] = []

    def capture_envelope(self, envelope: Envelope) -> None:
        self.envelopes.append(envelope)

    def events(self) -> list[dict[str, Any]]:
        return [
            item.payload.json
            for envelope in self.envelopes
            for item in envelope.items
            if item.type == "event" and item.payload.json is not None
        ]


@pytest.fixture
def transport() -> Iterator[CapturingTransport]:
    """A Sentry client on the global scope (as ``sentry_sdk.init`` installs it), sending
    into a ``CapturingTransport``; removed after the test."""
    capturing = CapturingTransport()
    client = sentry_sdk.Client(
        dsn="https://public@sentry.example.invalid/1",
        transport=capturing,
        default_integrations=False,
    )
    scope = sentry_sdk.get_global_scope()
    scope.set_client(client)
    yield capturing
    scope.set_client(None)
    client.close(timeout=2)


def test_each_failed_run_is_one_event_with_its_tags_and_traceback(
    app: venturi.App, start_worker: Callable[..., Worker], transport: CapturingTransport
) -> None:
    instrument(app)

    def parse_amount(text: str) -> int:
        return int(text)

    @app.task(kind="sentry.charge", max_failures=2, backoff=0)
    def charge(amount: str) -> int:
        return parse_amount(amount)

    @app.task(kind="sentry.fine")
    def fine() -> str:
        return "ok"

    failing = charge.delay("twelve")
    good = fine.delay()
    start_worker()
    wait_until(lambda: app.job(failing.id).job.status is Status.DEAD, timeout=20)
    wait_until(lambda: app.job(good.id).job.status is Status.COMPLETED, timeout=20)
    wait_until(lambda: len(transport.events()) >= 2, timeout=10)

    events = transport.events()
    assert [e["tags"]["venturi.run"] for e in events] == ["1", "2"]
    assert [e["tags"]["venturi.outcome"] for e in events] == ["retried", "dead"]
    for event in events:
        assert event["tags"]["venturi.job_id"] == failing.id
        assert event["tags"]["venturi.kind"] == "sentry.charge"
        assert event["level"] == "error"
        [exception] = event["exception"]["values"]
        assert exception["type"] == "ValueError"
        assert "invalid literal for int()" in exception["value"]
        frames = exception["stacktrace"]["frames"]
        # The user's frames, innermost last: the handler, then its helper.
        assert [f["function"] for f in frames if f["in_app"]][-2:] == ["charge", "parse_amount"]
        assert frames[-1]["context_line"] == "return int(text)"
        assert frames[-1]["filename"] == __file__
        assert not any(f["in_app"] for f in frames if "/venturi/runtime/" in f["filename"])
    # The completed job sent nothing.
    assert {e["tags"]["venturi.job_id"] for e in events} == {failing.id}


def test_after_uninstrument_a_failed_run_sends_nothing(
    app: venturi.App, start_worker: Callable[..., Worker], transport: CapturingTransport
) -> None:
    instrumentation = instrument(app)
    instrumentation.uninstrument()

    @app.task(kind="sentry.broken", max_failures=1)
    def broken() -> None:
        raise RuntimeError("not reported")

    ref = broken.delay()
    start_worker()
    wait_until(lambda: app.job(ref.id).job.status is Status.DEAD, timeout=20)
    assert transport.events() == []


def test_chained_exceptions_come_cause_first() -> None:
    def inner() -> None:
        raise KeyError("missing")

    try:
        try:
            inner()
        except KeyError as error:
            raise RuntimeError("lookup failed") from error
    except RuntimeError as error:
        import traceback

        text = "".join(traceback.format_exception(error))
    cause, raised = traceback_exceptions(text)
    assert (cause["type"], cause["value"]) == ("KeyError", "'missing'")
    assert cause["stacktrace"]["frames"][-1]["function"] == "inner"
    assert (raised["type"], raised["value"]) == ("RuntimeError", "lookup failed")


def test_a_cut_traceback_keeps_its_inner_frames_and_a_run_without_one_sends_its_note() -> None:
    text = (
        "Traceback (most recent call last):\n"
        "  ... (9000 characters of outer frames omitted)\n"
        "    outer()\n"
        '  File "/srv/app/jobs.py", line 12, in charge\n'
        "    raise ValueError(amount)\n"
        "ValueError: 12\n"
    )
    [value] = traceback_exceptions(text)
    assert (value["type"], value["value"]) == ("ValueError", "12")
    [frame] = value["stacktrace"]["frames"]
    assert (frame["function"], frame["lineno"], frame["in_app"]) == ("charge", 12, True)

    run = RunEnded(
        job_id="01J0000000000000000000000A",
        kind="mail.send",
        run=3,
        worker_id="w",
        outcome=OutcomeKind.DEAD,
        duration=0.5,
        is_failure=True,
        note="Fail: mailbox gone",
        traceback=None,
    )
    event = sentry_event(run)
    assert event["message"] == "Fail: mailbox gone"
    assert "exception" not in event
    assert event["tags"] == {
        "venturi.job_id": "01J0000000000000000000000A",
        "venturi.kind": "mail.send",
        "venturi.run": "3",
        "venturi.outcome": "dead",
    }


def test_import_venturi_needs_no_sentry_sdk() -> None:
    code = (
        "import sys; sys.modules['sentry_sdk'] = None\n"
        "import venturi, venturi.cli, venturi.worker\n"
        "assert 'sentry_sdk' not in [m for m, v in sys.modules.items() if v is not None]\n"
        "try:\n"
        "    import venturi.contrib.sentry\n"
        "except ImportError:\n"
        "    print('needs sentry-sdk')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "needs sentry-sdk"
