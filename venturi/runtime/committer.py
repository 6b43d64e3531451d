"""The committer: the one thread of a worker that records outcomes, in batches (ADR 0104).

Handlers queue their ``Execution`` and each ``finish`` call (``Leases``) takes
everything queued, so an idle worker adds no latency and a busy one records
many outcomes per round trip.
"""

from __future__ import annotations

import logging
import queue
from collections.abc import Callable, Sequence

from venturi.errors import BackendUnavailable
from venturi.runtime.executor import Execution
from venturi.runtime.leases import LeaseKeeper
from venturi.runtime.service import ServiceThread
from venturi.types import OutcomeKind

__all__ = ["Committer"]

logger = logging.getLogger(__name__)

#: Outcomes per ``finish`` round trip at most.
MAX_FINISH_BATCH = 500
#: Outcomes that make the row pending again, possibly eligible at once.
_PENDING_AGAIN = frozenset({OutcomeKind.PAUSED, OutcomeKind.RETRIED})


class Committer:
    """Records queued outcomes with ``record``, batching whatever is queued.

    A batch that hits ``BackendUnavailable`` is kept and retried (with the
    service's backoff): the fence makes a retry of an already-written outcome
    harmless (it comes back as lost, never as a second completion).

    A batch that returned rows to ``pending`` (paused, retried) calls
    ``on_pending`` once written: such a row may be eligible at once, and the
    wake-up sent when its handler ended came before it was pending again.
    ``on_recorded``, when given, is called with the kinds of every batch written
    (a keyed kind's slots are free only once its outcomes are, ADR 0138).
    """

    def __init__(
        self,
        record: Callable[[Sequence[Execution]], set[str]],
        keeper: LeaseKeeper,
        *,
        on_pending: Callable[[], None],
        name: str,
        on_recorded: Callable[[set[str]], None] | None = None,
    ) -> None:
        self._record = record
        self._keeper = keeper
        self._on_pending = on_pending
        self._on_recorded = on_recorded
        self._queue: queue.SimpleQueue[Execution | None] = queue.SimpleQueue()
        self._batch: list[Execution] = []
        self._is_closing = False
        self._service = ServiceThread(name, self._step)

    def start(self) -> None:
        self._service.start()

    def put(self, execution: Execution) -> None:
        self._queue.put(execution)

    def request_stop(self) -> None:
        """Record everything queued so far, then end the thread."""
        self._queue.put(None)

    def join(self, deadline: float) -> bool:
        """Wait until every queued outcome is recorded; False (and the thread told to end) if not.

        Outcomes left unrecorded are not lost: their jobs are recovered when
        their lease expires (ADR 19).
        """
        if self._service.join(deadline):
            return True
        self._service.request_stop()
        logger.warning(
            "%s could not record every outcome before stopping; "
            "those jobs will be recovered when their lease expires",
            self._service.name,
        )
        return False

    def _step(self) -> float:
        if not self._batch and not self._is_closing:
            try:
                self._take(self._queue.get(timeout=1.0))
            except queue.Empty:
                return 0.0
        while len(self._batch) < MAX_FINISH_BATCH:
            try:
                self._take(self._queue.get_nowait())
            except queue.Empty:
                break
        if self._batch:
            # Renewal stops first, so a renewal racing this finish is not reported as lost.
            self._keeper.drop(e.job.claim.job_id for e in self._batch)
            try:
                self._record(self._batch)
            except BackendUnavailable:
                raise
            except Exception:
                logger.exception(
                    "recording %d outcome(s) failed; trying one by one", len(self._batch)
                )
                self._record_one_by_one()
            if any(e.outcome.kind in _PENDING_AGAIN for e in self._batch):
                self._on_pending()
            if self._on_recorded is not None:
                self._on_recorded({e.job.kind for e in self._batch})
            self._batch = []
        if self._is_closing and self._queue.empty():
            self._service.request_stop()
        return 0.0

    def _record_one_by_one(self) -> None:
        """Isolate an outcome the database refuses, so it cannot block the others.

        A refused outcome is dropped: its job stays claimed until its lease
        lapses and recovery returns it to ``pending`` (counting a failure, so
        the backstop ends a job that can never be recorded).
        """
        for index, execution in enumerate(self._batch):
            try:
                self._record([execution])
            except BackendUnavailable:
                self._batch = self._batch[index:]
                raise
            except Exception:
                claim = execution.job.claim
                logger.exception(
                    "the outcome of job %s (kind %s) run %d could not be recorded; "
                    "the job will be recovered when its lease expires",
                    claim.job_id,
                    execution.job.kind,
                    claim.run_count,
                    extra={"job_id": claim.job_id, "kind": execution.job.kind},
                )

    def _take(self, item: Execution | None) -> None:
        if item is None:
            self._is_closing = True
        else:
            self._batch.append(item)
