"""Run one claimed job and say how it ended (ADR 11, 13, 15).

``execute`` never raises for anything a handler does: every ending becomes an
``Outcome`` the backend records atomically with its journal entry.

======================================  =========================================
handler ends with                       outcome
======================================  =========================================
``return value``                        ``completed``; note = the value as text
                                        (a ``str`` as is, anything else as JSON,
                                        ``None`` no note); carry saved; result
                                        = the value as strict JSON (results.py)
``ctx.pause(delay, until=)``            ``paused``; carry saved, no failure
``raise Retry(delay=)``                 a failure retried after ``delay``
                                        (``None``: the task's backoff)
any other exception                     a failure: ``retried`` after
                                        ``task.backoff(failure_count)``, note
                                        ``Type: message``, carry saved
a failure reaching ``max_failures``     ``dead`` (the backstop), note says so
``raise Fail(msg)``                     ``dead`` at once, note = ``msg``
payload no longer fits the signature    ``dead``, note says so (code changed)
carry no longer fits ``carry=``         ``dead``, note says so
carry or attachment that is not JSON    a failure, note = the ``InvalidPayload``
``ctx.raise_if_cancelled()``            ``dead``, note ``cancelled``, no failure
claimed after its expiry (ADR 0135)     ``dead``, note ``expired``, no failure;
                                        the handler is never called
a run longer than the task's            ``retried`` (``dead`` at the backstop),
``time_limit``                          note ``time limit exceeded``, whatever
                                        the handler returned
======================================  =========================================

Every run end is one line on the ``venturi.runs`` logger (``_log_run_end``):
INFO, except the job's first failure (WARNING, with the traceback) and a dead
job (ERROR); a later failure's traceback goes to DEBUG only (ADR 0118).

Failures count towards the backstop (``is_failure``); ``Fail`` does too, so
the dead row's ``failure_count`` says that its last run failed. Notes are made
storable: NUL characters are escaped, invalid UTF-8 replaced, and notes longer
than ``MAX_NOTE_CHARS`` truncated, so that no handler output can make an
outcome impossible to record.

A run that ended by an exception (other than the ``Fail`` and ``Retry``
signals, whose message is the note) keeps its traceback as text on its
journal entry, at most ``MAX_TRACEBACK_CHARS``: when longer, the outermost
frames are cut and the innermost ones, with the exception itself, kept. The
text is made here, so no traceback object outlives the run (ADR 0121).

A worker cannot interrupt a handler thread: it records a run past its time
limit, or one cancelled and still running a renewal interval later, itself
(``time_limit_exceeded``, ``cancelled_by_worker``), and the handler's late
outcome is then fenced out. ``execute`` applies the time limit after the fact,
for callers that run handlers inline (``run_once``, ``venturi.testing``).

An ``async def`` handler is awaited (``aexecute``) and its ending goes through
the same mapping (``_conclude``). The worker can cancel a coroutine, so it
ends an async run at its limit, or at a cancellation request, by real
``asyncio`` cancellation (ADR 0126).
"""

from __future__ import annotations

import asyncio
import logging
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from functools import partial
from typing import TYPE_CHECKING, Any

from venturi.backend import Leases
from venturi.context import Cancelled, Context, Pause
from venturi.errors import (
    ArgumentsMismatch,
    ConfigurationError,
    Fail,
    InvalidPayload,
    Retry,
    describe_exception,
)
from venturi.results import bounded, encode_result
from venturi.serialization import encode_json, is_storable_text
from venturi.step_log import StepSource
from venturi.types import ClaimedJob, Finished, Outcome, OutcomeKind

if TYPE_CHECKING:
    from venturi.task import Task

__all__ = [
    "CANCELLED_NOTE",
    "EXPIRED_NOTE",
    "MAX_TRACEBACK_CHARS",
    "TIME_LIMIT_NOTE",
    "Execution",
    "aexecute",
    "cancelled_by_worker",
    "execute",
    "record",
    "refuse_inside_event_loop",
    "time_limit_exceeded",
]

logger = logging.getLogger(__name__)
#: One line per run end; its own logger so that it can be silenced (or kept) apart
#: from the worker's lifecycle lines.
runs_logger = logging.getLogger("venturi.runs")

#: Longest journal note kept; the journal is a log, not a result store.
MAX_NOTE_CHARS = 10_000
#: Longest return value kept as a completed run's note; the job holds the whole result.
MAX_RESULT_NOTE_CHARS = 200
#: Ends a completed run's note that was cut to its head.
RESULT_NOTE_CUT = " ... (cut; the full result is stored with the job)"
#: Longest note shown in a run-end log line (the journal keeps it whole).
_LOGGED_NOTE_CHARS = 300
#: Longest traceback kept with a failed run's journal entry (innermost frames kept).
MAX_TRACEBACK_CHARS = 16_000
TIME_LIMIT_NOTE = "time limit exceeded"
CANCELLED_NOTE = "cancelled"
EXPIRED_NOTE = "expired"
#: The outcome of every run that returned None, the most common ending: made once.
_COMPLETED_WITH_NONE = Outcome(OutcomeKind.COMPLETED, result=encode_json(None, what="return value"))


@dataclass(frozen=True, slots=True)
class Execution:
    """One run of one job and how it ended.

    No exception is kept: a batch may wait through an outage for its
    ``finish``, and a traceback would keep every frame of the run alive
    meanwhile. Failures are logged when the run ends (``_done``).
    """

    job: ClaimedJob
    outcome: Outcome

    def finished(self, result_max_bytes: int) -> Finished:
        """The run as handed to ``finish``: its result bounded (``results.bounded``)."""
        outcome = bounded(self.outcome, result_max_bytes)
        return Finished(self.job.claim, outcome, self.job.workflow_id is not None)


def execute(
    task: Task[Any, Any],
    job: ClaimedJob,
    *,
    cancelled: Callable[[], bool] | None = None,
    steps: StepSource | None = None,
) -> Execution:
    """Run ``job``'s handler in the calling thread and map its ending to an ``Outcome``.

    Only ``KeyboardInterrupt`` and similar interpreter signals propagate;
    ``SystemExit`` raised by a handler is an ordinary failure. ``cancelled`` is
    what ``ctx.is_cancelled()`` reads (set by the worker, ADR 0121).

    An ``async def`` handler runs here too, on a fresh event loop
    (``asyncio.run``), cut at its ``time_limit`` by real cancellation; inside
    a running event loop that is impossible and ``ConfigurationError`` is
    raised before the handler starts (await ``aexecute`` there, ADR 0126).

    ``steps`` is where the run's durable steps go (``ctx.step``, ADR 0137); without
    it they are kept in memory for the run.
    """
    if task.is_async and not job.is_expired:
        return _run_on_own_loop(task, job, cancelled, steps)
    started = time.monotonic()
    begun = _begin(task, job, cancelled, started, steps)
    if isinstance(begun, Execution):
        return begun
    ctx, call = begun
    try:
        result = call()
    except (Exception, SystemExit) as exc:
        return _conclude(task, job, ctx, started, error=exc)
    return _conclude(task, job, ctx, started, result=result)


async def aexecute(
    task: Task[Any, Any],
    job: ClaimedJob,
    *,
    cancelled: Callable[[], bool] | None = None,
    steps: StepSource | None = None,
) -> Execution:
    """``execute`` for an ``async def`` handler, awaited on the running loop (ADR 0126).

    The ending is mapped by the same code as a sync call's. A cancellation of
    the awaiting task (the worker ending the run, or stopping) propagates as
    ``asyncio.CancelledError``: its caller records the run. A
    ``CancelledError`` the handler raised itself, while nobody cancelled the
    task, is an ordinary failure.
    """
    started = time.monotonic()
    begun = _begin(task, job, cancelled, started, steps)
    if isinstance(begun, Execution):
        return begun
    ctx, call = begun
    try:
        result = await call()
    except (Exception, SystemExit) as exc:
        return _conclude(task, job, ctx, started, error=exc)
    except asyncio.CancelledError as exc:
        current = asyncio.current_task()
        if current is None or current.cancelling():
            raise
        return _conclude(task, job, ctx, started, error=exc)
    return _conclude(task, job, ctx, started, result=result)


def refuse_inside_event_loop(what: str) -> None:
    """Raise ``ConfigurationError`` when this thread runs an event loop (``asyncio.run``
    cannot start another): ``what`` names the call that wanted to run async handlers."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return
    raise ConfigurationError(
        f"{what} runs async handlers with asyncio.run, which cannot start inside a running "
        "event loop; call it from synchronous code, or await venturi.testing.aperform(...)"
    )


def _run_on_own_loop(
    task: Task[Any, Any],
    job: ClaimedJob,
    cancelled: Callable[[], bool] | None,
    steps: StepSource | None,
) -> Execution:
    refuse_inside_event_loop(f"running the async handler of {task.kind!r} inline")
    limit = task.options.time_limit
    started = time.monotonic()

    async def limited() -> Execution:
        try:
            async with asyncio.timeout(None if limit is None else limit.total_seconds()):
                return await aexecute(task, job, cancelled=cancelled, steps=steps)
        except TimeoutError:
            return time_limit_exceeded(task, job, started)

    return asyncio.run(limited())


def _begin(
    task: Task[Any, Any],
    job: ClaimedJob,
    cancelled: Callable[[], bool] | None,
    started: float,
    steps: StepSource | None,
) -> tuple[Context, Callable[[], Any]] | Execution:
    """The run's context and its bound handler, or the ``dead`` run that does not
    start: expired, or whose stored payload or carry no longer fits the code."""
    if job.is_expired:
        return _done(job, Outcome(OutcomeKind.DEAD, note=EXPIRED_NOTE), started, None)
    try:
        carry = task.binding.decode_carry(job.carry)
    except Exception as exc:
        note = f"carry does not fit the task's carry type any more: {exc}"
        return _ended(job, Outcome(OutcomeKind.DEAD, note=note, is_failure=True), started, exc)
    ctx = Context(
        job_id=job.claim.job_id,
        kind=job.kind,
        run_count=job.claim.run_count,
        failure_count=job.failure_count,
        carry=carry,
        cancelled=cancelled,
        steps=None if steps is None else partial(steps.log, job.claim),
    )
    try:
        call = task.binding.prepare(ctx, job.payload)
    except ArgumentsMismatch as exc:
        # Checked before the handler runs: the code changed since the job was enqueued.
        # The row is kept dead, so an operator can retry it once the code fits again.
        note = f"the stored payload no longer fits the handler's signature: {exc}"
        return _ended(job, Outcome(OutcomeKind.DEAD, note=note, is_failure=True), started, exc)
    return ctx, call


def _conclude(
    task: Task[Any, Any],
    job: ClaimedJob,
    ctx: Context,
    started: float,
    *,
    result: Any = None,
    error: BaseException | None = None,
) -> Execution:
    """The one mapping of a handler's ending (``result``, or the ``error`` it raised)
    to an ``Outcome``, for sync calls and awaited ones alike (table above)."""
    if isinstance(error, Pause):
        outcome = Outcome(OutcomeKind.PAUSED, delay=error.delay, eta=error.until)
        error = None
    elif isinstance(error, Cancelled):
        return _ended(job, Outcome(OutcomeKind.DEAD, note=CANCELLED_NOTE), started, None)
    elif isinstance(error, Fail):
        outcome = Outcome(OutcomeKind.DEAD, note=error.message or "Fail", is_failure=True)
    elif isinstance(error, Retry):
        outcome = _failure(task, job, describe_exception(error), delay=error.delay)
    elif error is not None:
        outcome = _failure(task, job, describe_exception(error))
    elif result is None:
        outcome = _COMPLETED_WITH_NONE
    else:
        stored = encode_result(result, job_id=job.claim.job_id, kind=job.kind)
        outcome = Outcome(OutcomeKind.COMPLETED, note=_result_note(result), result=stored)
    try:
        outcome = _with_json(outcome, task, job, ctx)
    except InvalidPayload as exc:
        error = exc
        outcome = _failure(task, job, describe_exception(exc))
    limit = task.options.time_limit
    if limit is not None and time.monotonic() - started > limit.total_seconds():
        return time_limit_exceeded(task, job, started)
    return _ended(job, outcome, started, error)


def time_limit_exceeded(task: Task[Any, Any], job: ClaimedJob, started: float) -> Execution:
    """The run that went past its task's ``time_limit``: a failure, like any other."""
    return _done(job, _failure(task, job, TIME_LIMIT_NOTE), started, None)


def cancelled_by_worker(job: ClaimedJob, started: float) -> Execution:
    """The cancelled run whose handler did not stop in time (or never started)."""
    return _done(job, Outcome(OutcomeKind.DEAD, note=CANCELLED_NOTE), started, None)


def record(backend: Leases, executions: Sequence[Execution], *, result_max_bytes: int) -> set[str]:
    """Write the outcomes in one ``finish`` call; returns the ids written.

    Each outcome goes bounded (``results.bounded``): a result over
    ``result_max_bytes`` is dropped and noted here, above the storage boundary,
    so every backend stores the same. An id missing from the answer had lost
    its claim (lease expired and the row was recovered or released, ADR 19):
    its outcome was discarded by the fence, and the newer state of the row
    stands. That is logged, never retried.
    """
    if not executions:
        return set()
    written = backend.finish([e.finished(result_max_bytes) for e in executions])
    for execution in executions:
        claim = execution.job.claim
        if claim.job_id not in written:
            logger.warning(
                "job %s (kind %s) run %d lost its claim; its %s outcome was discarded",
                claim.job_id,
                execution.job.kind,
                claim.run_count,
                execution.outcome.kind.value,
                extra={"job_id": claim.job_id, "kind": execution.job.kind},
            )
    return written


def _failure(
    task: Task[Any, Any], job: ClaimedJob, note: str, *, delay: timedelta | None = None
) -> Outcome:
    failures = job.failure_count + 1
    max_failures = task.options.max_failures
    if failures >= max_failures:
        note = f"backstop reached after {failures} failures (max_failures={max_failures}): {note}"
        return Outcome(OutcomeKind.DEAD, note=note, is_failure=True)
    if delay is None:
        delay = task.backoff(failures)
    return Outcome(OutcomeKind.RETRIED, note=note, is_failure=True, delay=max(delay, timedelta(0)))


def _with_json(outcome: Outcome, task: Task[Any, Any], job: ClaimedJob, ctx: Context) -> Outcome:
    """Attach the encoded carry (kept on completed, paused, retried) and attachment.

    Raises ``InvalidPayload`` when either is not strict JSON, unless the run is
    already ``dead``: then the bad attachment is dropped and the note says so.
    A run that sets no attachment and leaves an empty carry empty changes
    neither column, so its outcome goes as it is: most runs encode nothing and
    copy no outcome here (bench/README.md).
    """
    if not ctx.has_attachment and (
        outcome.kind is OutcomeKind.DEAD or (ctx.carry is None and job.carry is None)
    ):
        return outcome
    try:
        attachment = encode_json(ctx.attachment, what="attachment") if ctx.has_attachment else None
    except InvalidPayload as exc:
        if outcome.kind is OutcomeKind.DEAD:
            return replace(outcome, note=f"{outcome.note} (attachment dropped: {exc})")
        raise
    if outcome.kind is OutcomeKind.DEAD:
        return replace(outcome, attachment=attachment)
    return replace(outcome, carry=task.binding.encode_carry(ctx.carry), attachment=attachment)


def _result_note(result: Any) -> str | None:
    """The completed run's note: the return value as text (SPEC 2), its head only when
    long, since the result itself is stored in full with the job (SPEC 5.3)."""
    if result is None:
        return None
    if isinstance(result, str):
        text = result
    else:
        try:
            text = encode_json(result, what="return value")
        except InvalidPayload:
            # The job did its work; a return value JSON cannot hold is still worth reading.
            text = repr(result)
    if len(text) > MAX_RESULT_NOTE_CHARS:
        return text[:MAX_RESULT_NOTE_CHARS] + RESULT_NOTE_CUT
    return text


def _storable(text: str) -> str:
    """Text PostgreSQL ``text`` can hold: NUL escaped, invalid UTF-8 replaced."""
    if is_storable_text(text):
        return text
    return text.replace("\x00", "\\x00").encode(errors="replace").decode()


def _traceback_text(error: BaseException) -> str:
    """The formatted traceback, its tail kept (innermost frames and the exception)."""
    text = _storable("".join(traceback.format_exception(error)))
    if len(text) <= MAX_TRACEBACK_CHARS:
        return text
    head = text.partition("\n")[0][:200]
    tail = text[-(MAX_TRACEBACK_CHARS - len(head) - 64) :]
    # Start at a line boundary when there is one, so no frame line is cut in half.
    newline = tail.find("\n")
    if 0 <= newline < len(tail) - 1:
        tail = tail[newline + 1 :]
    omitted = len(text) - len(head) - len(tail)
    return f"{head}\n  ... ({omitted} characters of outer frames omitted)\n{tail}"


def _ended(
    job: ClaimedJob, outcome: Outcome, started: float, error: BaseException | None
) -> Execution:
    """``_done``, with the traceback of an unexpected exception kept as text."""
    if error is not None and not isinstance(error, Fail | Retry):
        outcome = replace(outcome, traceback=_traceback_text(error))
    return _done(job, outcome, started, error)


def _note_text(note: str) -> str:
    """A note PostgreSQL ``text`` can hold: no NUL, valid UTF-8, bounded in size."""
    note = _storable(note)
    if len(note) > MAX_NOTE_CHARS:
        note = note[:MAX_NOTE_CHARS] + " ... (truncated)"
    return note


def _done(
    job: ClaimedJob, outcome: Outcome, started: float, error: BaseException | None
) -> Execution:
    duration = time.monotonic() - started
    if outcome.note is not None:
        outcome = replace(outcome, note=_note_text(outcome.note))
    _log_run_end(job, outcome, duration, error)
    return Execution(job, outcome)


def _log_run_end(
    job: ClaimedJob, outcome: Outcome, duration: float, error: BaseException | None
) -> None:
    """``mail.send 01J... run 2 retried in 3 ms: ConnectionError: ...; next run at ...``.

    The traceback rides on the job's first failure only (``failure_count`` was
    0: its first run to fail, or the first since an operator's retry), so a
    retry storm shows one traceback, not one per run; later ones are DEBUG.
    """
    is_first_failure = outcome.is_failure and job.failure_count == 0
    if outcome.kind is OutcomeKind.DEAD:
        level = logging.ERROR
    elif is_first_failure:
        level = logging.WARNING
    else:
        level = logging.INFO
    if not runs_logger.isEnabledFor(level):
        return  # nothing below is formatted when the line is off (measured: bench/)
    claim = job.claim
    extra = {
        "job_id": claim.job_id,
        "kind": job.kind,
        "run": claim.run_count,
        "outcome": outcome.kind.value,
        "duration_ms": round(duration * 1000, 3),
    }
    how = f"{outcome.kind.value} in {_span(duration)}"
    if outcome.note is not None and outcome.kind is not OutcomeKind.COMPLETED:
        how += f": {_one_line(outcome.note)}"
    if outcome.kind in (OutcomeKind.RETRIED, OutcomeKind.PAUSED):
        how += f"; {_next_run(outcome)}"
    message = "%s %s run %d %s"
    args = (job.kind, claim.job_id, claim.run_count, how)
    shown = _shown_error(error)
    traceback = shown if is_first_failure else None
    runs_logger.log(level, message, *args, exc_info=traceback, extra=extra)
    if shown is not None and traceback is None and runs_logger.isEnabledFor(logging.DEBUG):
        runs_logger.debug("%s %s run %d raised:", *args[:3], exc_info=shown, extra=extra)


def _shown_error(error: BaseException | None) -> BaseException | None:
    """The exception whose traceback a run-end line shows for ``error``.

    A ``Fail`` or ``Retry`` raised ``from exc`` shows ``exc``'s (the failure it
    stands for, not the handler's re-raise), one raised ``from None`` none (its
    handler has logged the exception itself: the Django integration, ADR 0130);
    any other exception, a ``Fail`` or ``Retry`` raised plainly included, its own.
    """
    if isinstance(error, Fail | Retry) and error.__suppress_context__:
        return error.__cause__
    return error


def _next_run(outcome: Outcome) -> str:
    """``next run at 07:08:04 (in 2 s)``: local wall time, for reading only (the row's
    ``visible_at`` is set by the database clock when the outcome is recorded)."""
    now = datetime.now().astimezone()
    when = outcome.eta.astimezone() if outcome.eta is not None else now + outcome.delay
    wait = max((when - now).total_seconds(), 0.0)
    shown = when.strftime("%H:%M:%S" if wait < 86_400 else "%Y-%m-%d %H:%M:%S")
    return f"next run at {shown} (in {_span(wait)})"


def _span(seconds: float) -> str:
    """``0.4 ms``, ``12 ms``, ``2.5 s``, ``3 min``, ``2 h``, ``4 d``: three digits at most."""
    for unit, size in (("d", 86_400.0), ("h", 3_600.0), ("min", 60.0), ("s", 1.0)):
        if seconds >= size:
            value = seconds / size
            return f"{value:.0f} {unit}" if value >= 100 else f"{value:.3g} {unit}"
    return f"{seconds * 1000:.3g} ms"


def _one_line(note: str) -> str:
    text = " ".join(note.split())
    if len(text) > _LOGGED_NOTE_CHARS:
        return text[:_LOGGED_NOTE_CHARS] + " ..."
    return text
