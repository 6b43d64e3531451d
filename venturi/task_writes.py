"""Where a task's enqueues go, and the refs they return.

An enqueue through an App goes to its backend, or to an eager session of it
when one is active here (``venturi.testing.eager``, ADR 0120); observed
events (``App.events``) see the jobs on the way. Every ref comes back able to
wait for its result through the App (ADR 0124). ``write_alike`` is the path
of calls that take every default (``JobTemplate``): the backend's
``enqueue_alike``, one ref per job made here (ADR 0142).
"""

from __future__ import annotations

from collections.abc import Sequence
from contextvars import ContextVar
from typing import Protocol, TypeGuard

from venturi.events import Events
from venturi.job_template import JobTemplate
from venturi.refs import JobRef, ResultSource
from venturi.registry import AppLike
from venturi.types import NewJob
from venturi.workflows import Enqueuer

__all__ = [
    "EagerHook",
    "awrite",
    "awrite_alike",
    "eager_of",
    "eager_session",
    "with_source",
    "write",
    "write_alike",
    "write_one",
]


class EagerHook(Enqueuer, Protocol):
    """What ``venturi.testing.eager(app)`` installs: enqueues through ``app`` go to it instead."""

    @property
    def app(self) -> AppLike: ...


#: The eager session of the current context (``venturi.testing.eager``), else None.
#: A contextvar, so it is scoped to the ``with`` block: threads started elsewhere,
#: a worker's among them, never see it (ADR 0120).
eager_session: ContextVar[EagerHook | None] = ContextVar("venturi_eager_session", default=None)


def eager_of(app: AppLike) -> EagerHook | None:
    """The eager session active here (ADR 0120), when it is ``app``'s."""
    eager = eager_session.get()
    return eager if eager is not None and eager.app is app else None


def write(app: AppLike, jobs: Sequence[NewJob], connection: object | None) -> list[JobRef]:
    """Every sync enqueue of ``NewJob``s: to ``app``'s enqueuer, told to its events when
    observed; the refs with their source (``with_source``)."""
    eager = eager_of(app)
    enqueuer: Enqueuer = eager if eager is not None else app.backend
    events: Events | None = getattr(app, "events", None)
    if events is None or not events.active:
        refs = enqueuer.enqueue(jobs, connection=connection)
    else:
        refs = events.enqueue(jobs, lambda part: enqueuer.enqueue(part, connection=connection))
    return with_source(refs, app)


async def awrite(app: AppLike, jobs: Sequence[NewJob], connection: object | None) -> list[JobRef]:
    """``write``, awaited: ``aenqueue`` on ``app``'s backend; an eager session runs the
    jobs inline instead."""
    eager = eager_of(app)
    if eager is not None:
        return with_source(eager.enqueue(jobs, connection=connection), app)
    backend = app.backend
    events: Events | None = getattr(app, "events", None)
    if events is None or not events.active:
        refs = await backend.aenqueue(jobs, connection=connection)
    elif events.tracer is None:
        refs = await backend.aenqueue(jobs, connection=connection)
        events.enqueued(jobs, refs)
    else:
        with events.tracer.enqueue(jobs) as traced:
            refs = await backend.aenqueue(traced, connection=connection)
            events.enqueued(jobs, refs)
    return with_source(refs, app)


def write_alike(
    app: AppLike,
    template: JobTemplate,
    ids: Sequence[str],
    payloads: Sequence[str],
    connection: object | None,
) -> list[JobRef]:
    """``write`` of ``template.jobs(ids, payloads)`` through the backend's
    ``enqueue_alike``, without those jobs; an eager session or observed events take
    the jobs themselves (``write``)."""
    if _needs_jobs(app):
        return write(app, template.jobs(ids, payloads), connection)
    app.backend.enqueue_alike(template, ids, payloads, connection=connection)
    return _plain_refs(ids, app)


def write_one(app: AppLike, template: JobTemplate, job_id: str, payload: str) -> JobRef:
    """``write_alike`` of one job, outside the caller's transaction: ``.delay()``'s
    path, without its lists (ADR 0143)."""
    if _needs_jobs(app):
        return write(app, [template.job(job_id, payload)], None)[0]
    app.backend.enqueue_alike(template, (job_id,), (payload,))
    return JobRef(job_id, False, app if _is_result_source(app) else None)


async def awrite_alike(
    app: AppLike,
    template: JobTemplate,
    ids: Sequence[str],
    payloads: Sequence[str],
    connection: object | None,
) -> list[JobRef]:
    """``write_alike``, awaited (``aenqueue_alike``)."""
    if _needs_jobs(app):
        return await awrite(app, template.jobs(ids, payloads), connection)
    await app.backend.aenqueue_alike(template, ids, payloads, connection=connection)
    return _plain_refs(ids, app)


def with_source(refs: list[JobRef], app: AppLike) -> list[JobRef]:
    """The refs, able to wait for their results through ``app`` (ADR 0124) when it is a
    ``ResultSource``, unless their enqueuer gave them a source already (an eager session)."""
    if not _is_result_source(app):
        return refs
    return [ref if ref.source is not None else JobRef(ref.id, ref.merged, app) for ref in refs]


def _plain_refs(ids: Sequence[str], app: AppLike) -> list[JobRef]:
    """The refs of jobs written as they are (no merge), sourced as ``with_source``'s."""
    source = app if _is_result_source(app) else None
    if len(ids) == 1:  # adelay(): no comprehension's frame
        return [JobRef(ids[0], False, source)]
    return [JobRef(job_id, False, source) for job_id in ids]


def _needs_jobs(app: AppLike) -> bool:
    """Whether an enqueue through ``app`` needs each job as a ``NewJob``: an eager session
    of it runs them, or its observed events see (and may add headers to) them."""
    if eager_of(app) is not None:
        return True
    events: Events | None = getattr(app, "events", None)
    return events is not None and events.active


#: ``isinstance(app, ResultSource)`` per App class: a runtime Protocol check is a
#: visible share of every ``.delay()`` (bench/JOURNAL.md, section 6).
_RESULT_SOURCE_CLASSES: dict[type, bool] = {}


def _is_result_source(app: object) -> TypeGuard[ResultSource]:
    known = _RESULT_SOURCE_CLASSES.get(type(app))
    if known is None:
        known = _RESULT_SOURCE_CLASSES[type(app)] = isinstance(app, ResultSource)
    return known
