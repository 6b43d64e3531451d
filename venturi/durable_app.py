"""The App's half of durable execution (ADR 0137): sending events, reading steps back.

``App`` inherits ``DurableMethods``; ``app.send`` records an event for a job
(``ctx.wait_for`` returns it), ``app.job`` shows a job's steps and events, and
``app.retry(id, reset_steps=True)`` starts a durable job over.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from venturi.backend import Backend
from venturi.durable import MAX_EVENT_PAYLOAD_BYTES, validate_event_name
from venturi.errors import JobNotFound
from venturi.serialization import encode_json, is_storable_text
from venturi.types import JobDetail, JobRow

__all__ = ["DurableMethods", "canonical_job_id"]


class DurableMethods:
    """``send``, ``asend`` and the durable parts of ``job`` and ``retry``."""

    if TYPE_CHECKING:

        @property
        def backend(self) -> Backend:
            """The App's backend (``App.backend``)."""
            ...

    def send(
        self, job_id: str, name: str, payload: Any = None, *, connection: object | None = None
    ) -> None:
        """Send the event ``name`` to the job: its ``ctx.wait_for(name)`` returns
        ``payload`` (strict JSON, at most ``MAX_EVENT_PAYLOAD_BYTES`` encoded), and a
        job paused waiting for it is woken at once (a NOTIFY to the workers).

        An event is sent once: a second send of ``name`` to the job raises
        ``EventAlreadySent``; a send to a completed or dead job ``JobFinished``, to
        no job ``JobNotFound``; a bad name ``InvalidArgument``, a payload that is
        not JSON or too large ``InvalidPayload``. Nothing is written then. With
        ``connection=`` (a ``psycopg.Connection``) the event is written in the
        caller's transaction and exists exactly when it commits.
        """
        job, event, encoded = _validated(job_id, name, payload)
        self.backend.send_event(job, event, encoded, connection=connection)

    async def asend(
        self, job_id: str, name: str, payload: Any = None, *, connection: object | None = None
    ) -> None:
        """``send`` on the running event loop (``connection=``: a ``psycopg.AsyncConnection``)."""
        job, event, encoded = _validated(job_id, name, payload)
        await self.backend.asend_event(job, event, encoded, connection=connection)

    def _with_steps(self, detail: JobDetail) -> JobDetail:
        """``detail`` with the job's recorded steps and events (one more read)."""
        state = self.backend.load_steps(detail.job.id)
        return replace(detail, steps=state.steps, events=state.events)

    def _retry_from_start(self, job_id: str) -> JobRow:
        return self.backend.retry_job_from_start(job_id)


def canonical_job_id(job_id: object) -> str:
    """As ``App``'s ids: upper case; one the database cannot hold names no job."""
    if not isinstance(job_id, str) or not is_storable_text(job_id):
        raise JobNotFound(str(job_id))
    return job_id.upper()


def _validated(job_id: str, name: str, payload: Any) -> tuple[str, str, str]:
    """The checks before anything is written: id, name, payload."""
    job = canonical_job_id(job_id)
    event = validate_event_name(name)
    encoded = encode_json(
        payload, what=f"the payload of event {event!r}", max_bytes=MAX_EVENT_PAYLOAD_BYTES
    )
    return job, event, encoded
