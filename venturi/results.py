"""Results (SPEC 5.3, ADR 0124): a handler's return value, stored and waited for.

The value is stored as strict JSON on the job's row by the fenced statement
that records the run's end, so storing it costs no round trip. A value JSON
cannot hold still completes the job: its result is its text form (``str``),
and a warning says so. A result longer than the App's ``result_max_bytes``
(UTF-8) is not stored at all: the job completes, its journal note says how
large the result was, and waiting for it raises ``ResultUnavailable``. The
bound is applied by the runtime before ``finish`` (``bounded``), so it holds
whatever the backend.

Waiting (``wait_for_result``) reads the row; when the job is not terminal
yet, it subscribes to the job's own wake-up channel, marks the row awaited
(so the finish statement that ends it sends one NOTIFY; jobs nobody waits for
send none), reads again, then sleeps on the subscription with a polling
backstop (``POLL_START`` doubling to ``POLL_MAX``) for the ends that are not
recorded by a finish (lease recovery at the backstop, operator cancel).
"""

from __future__ import annotations

import logging
import time
from dataclasses import replace
from typing import Any

from venturi.backend import Listener, Results
from venturi.errors import (
    BackendUnavailable,
    InvalidArgument,
    InvalidPayload,
    JobFailed,
    JobNotFound,
    ResultTimeout,
    ResultUnavailable,
)
from venturi.serialization import decode_json, encode_json, is_storable_text
from venturi.types import Outcome, Status, StoredResult

__all__ = [
    "DEFAULT_RESULT_MAX_BYTES",
    "POLL_MAX",
    "POLL_START",
    "bounded",
    "encode_result",
    "outcome_of",
    "status_of",
    "validate_result_max_bytes",
    "wait_for_result",
]

logger = logging.getLogger(__name__)

#: Largest result stored, in UTF-8 bytes of its JSON text: results live on the
#: job's row, so a large one is read with every read of the row.
DEFAULT_RESULT_MAX_BYTES = 1_048_576
#: The waiter's polling backstop: first interval, doubled after each wait, up to the cap.
POLL_START = 0.05
POLL_MAX = 1.0


def encode_result(value: Any, *, job_id: str, kind: str) -> str:
    """``value`` as strict JSON; one JSON cannot hold becomes its text form (a warning)."""
    try:
        return encode_json(value, what="return value")
    except InvalidPayload as exc:
        try:
            text = str(value)
        except Exception:
            text = object.__repr__(value)
        if not is_storable_text(text):
            text = text.replace("\x00", "\\x00").encode(errors="replace").decode()
        logger.warning(
            "job %s (kind %s) returned a value that is not strict JSON (%s); "
            "its result is stored as its text form",
            job_id,
            kind,
            exc,
            extra={"job_id": job_id, "kind": kind},
        )
        return encode_json(text, what="return value")


def validate_result_max_bytes(value: object) -> int:
    """``App(result_max_bytes=)``: a non-negative int (``InvalidArgument`` otherwise)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidArgument(f"result_max_bytes must be an int, got {value!r}")
    if value < 0:
        raise InvalidArgument(f"result_max_bytes must not be negative, got {value}")
    return value


def bounded(outcome: Outcome, max_bytes: int) -> Outcome:
    """``outcome`` as it is handed to ``finish``: a result over ``max_bytes`` dropped, noted.

    Applied by the runtime above the storage boundary (``runtime/executor.record``),
    so every backend stores bounded outcomes.
    """
    result = outcome.result
    if result is None or len(result) * 4 <= max_bytes:
        return outcome
    size = len(result.encode())
    if size <= max_bytes:
        return outcome
    logger.warning("a result of %d bytes was dropped (result_max_bytes=%d)", size, max_bytes)
    note = f"result of {size} bytes not stored (result_max_bytes={max_bytes})"
    return replace(outcome, result=None, note=note)


def outcome_of(stored: StoredResult, job_id: str) -> Any:
    """The decoded result of a terminal job, or the error its end means."""
    if stored.status is Status.DEAD:
        raise JobFailed(job_id, stored.note)
    if stored.result is None:
        raise ResultUnavailable(job_id, stored.note)
    return decode_json(stored.result)


def wait_for_result(backend: Results, job_id: str, timeout: float | None) -> Any:
    """Block until ``job_id`` is terminal (at most ``timeout`` s; None: no limit).

    Raises ``JobFailed`` (dead), ``ResultTimeout``, ``JobNotFound`` (no such
    job, or it was cleaned up meanwhile), ``ResultUnavailable``.
    """
    deadline = None if timeout is None else time.monotonic() + max(timeout, 0.0)
    stored = _read(backend, job_id)
    if stored.status.is_terminal:
        return outcome_of(stored, job_id)
    if deadline is not None and deadline <= time.monotonic():
        raise ResultTimeout(job_id, timeout or 0.0, stored.status.value)
    listener = backend.listen_result(job_id)
    try:
        _subscribe(listener)
        backend.await_result(job_id)
        poll = POLL_START
        while True:
            stored = _read(backend, job_id)
            if stored.status.is_terminal:
                return outcome_of(stored, job_id)
            wait = poll
            if deadline is not None:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise ResultTimeout(job_id, timeout or 0.0, stored.status.value)
                wait = min(wait, remaining)
            try:
                listener.wait(wait)
            except BackendUnavailable:
                time.sleep(wait)  # the next wait resubscribes; the poll covers the gap
            poll = min(poll * 2, POLL_MAX)
    finally:
        listener.close()


def status_of(backend: Results, job_id: str) -> Status:
    return _read(backend, job_id).status


def _read(backend: Results, job_id: str) -> StoredResult:
    stored = backend.read_result(job_id)
    if stored is None:
        raise JobNotFound(job_id)
    return stored


def _subscribe(listener: Listener) -> None:
    """Subscribe before the row is marked, so no wake-up sent after the mark is missed."""
    listener.wait(0)
