"""Retention: workers delete old terminal jobs periodically, one worker at a time.

Each step takes the prefix's ``pruner`` role (a session advisory lock held
only for the step), so a fleet of workers prunes at most once at a time and
never blocks on each other: a worker that finds the role taken skips that
round. The delete itself is ``Operator.cleanup`` (bounded batches through
``_jobs_finished``, journals by cascade, never pending or claimed rows).
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Protocol

from venturi.backend import Coordination, Operator
from venturi.naming import PRUNER_ROLE

__all__ = ["Pruner", "PrunerBackend"]

logger = logging.getLogger(__name__)


class PrunerBackend(Coordination, Operator, Protocol):
    """What the pruner uses: ``try_lead`` (Coordination) and ``cleanup`` (Operator)."""


class Pruner:
    """One retention round per ``interval`` seconds; ``run_once`` returns rows deleted."""

    def __init__(
        self,
        backend: PrunerBackend,
        *,
        retention: timedelta,
        interval: float = 60.0,
        batch_size: int = 1000,
    ) -> None:
        self._backend = backend
        self._retention = retention
        self._batch_size = batch_size
        self.interval = interval

    def run_once(self) -> int | None:
        """Prune if no other worker is; ``None`` when another holds the role."""
        leadership = self._backend.try_lead(PRUNER_ROLE)
        if leadership is None:
            return None
        try:
            deleted = self._backend.cleanup(
                older_than=self._retention, status=None, batch_size=self._batch_size
            )
        finally:
            leadership.release()
        if deleted:
            logger.info(
                "retention: deleted %d job(s) finished over %s ago", deleted, self._retention
            )
        return deleted

    def step(self) -> float:
        """The ServiceThread step: one round, then wait ``interval``."""
        self.run_once()
        return self.interval
