"""The worker registry (ADR 0119): a running Worker keeps an entry that says it is alive.

A ``Registration`` is one more part of a running Worker, run by a
``ServiceThread``. Its first step writes the entry; then it heartbeats on the
lease keeper's cadence (``min(lease) / 3``, ADR 0109), one round trip each,
which also sweeps a bounded batch of entries whose heartbeat stopped; when
its thread ends it deletes the entry. An entry expires three heartbeats
(at least ``MIN_EXPIRY``) after its last one: readers ignore it from then,
and the next heartbeat of any live worker deletes it.

Once a minute it also asks which kinds have due jobs that no live worker
serves (a job whose kind no running worker knows otherwise waits forever in
silence) and warns about each such kind at most once per
``UNSERVED_WARNING_INTERVAL``.

The entry's id is ``host:pid``, the ``claimed_by`` of the process's claims.
A process may run several Workers at once (threads inside a web server):
the first to start takes ``host:pid``, the next ``host:pid#2``, and so on,
lowest free number first, so each has an entry of its own with its own kinds
and counts.
"""

from __future__ import annotations

import importlib.metadata
import logging
import threading
import time
from collections.abc import Callable, Collection
from datetime import timedelta

from venturi.backend import Workers
from venturi.errors import VenturiError
from venturi.types import WorkerRegistration

__all__ = ["Registration"]

logger = logging.getLogger(__name__)

#: Other workers' expired entries one heartbeat deletes at most.
SWEEP_BATCH = 100
#: The shortest expiry, so that a worker with a tiny lease does not flicker in
#: and out of the registry whenever a heartbeat is a little late.
MIN_EXPIRY = timedelta(seconds=2)
#: Seconds between two looks for unserved kinds (the first comes one heartbeat
#: interval after start, once workers started at the same time have registered).
UNSERVED_CHECK_INTERVAL = 60.0
#: Seconds before the same unserved kind is warned about again by one worker.
UNSERVED_WARNING_INTERVAL = 600.0

_ids_lock = threading.Lock()
_ids_in_use: set[str] = set()


def _reserve_id(claimed_by: str) -> str:
    """``claimed_by`` if no running Worker of this process has it, else the lowest free ``#n``."""
    with _ids_lock:
        candidate, number = claimed_by, 1
        while candidate in _ids_in_use:
            number += 1
            candidate = f"{claimed_by}#{number}"
        _ids_in_use.add(candidate)
        return candidate


def _release_id(registry_id: str) -> None:
    with _ids_lock:
        _ids_in_use.discard(registry_id)


def _version() -> str:
    try:
        return importlib.metadata.version("venturi")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class Registration:
    """One Worker's registry entry, from its first heartbeat to ``deregister()``.

    Options:
        claimed_by: the ``host:pid`` of the Worker's claims.
        kinds: the kinds it serves; concurrency: its handler threads.
        interval: seconds between heartbeats (the lease renewal cadence).
        running: how many jobs its handlers are running now.

    ``step()`` is the ServiceThread step; ``heartbeat_once()`` and
    ``check_unserved_once()`` are the single iterations tests call.
    ``deregister()`` is the thread's exit action; it never raises.
    """

    def __init__(
        self,
        backend: Workers,
        *,
        claimed_by: str,
        kinds: Collection[str],
        concurrency: int,
        interval: float,
        running: Callable[[], int],
        check_interval: float = UNSERVED_CHECK_INTERVAL,
        warning_interval: float = UNSERVED_WARNING_INTERVAL,
    ) -> None:
        self._backend = backend
        self._running = running
        self.entry = WorkerRegistration(
            id=_reserve_id(claimed_by),
            version=_version(),
            kinds=tuple(kinds),
            concurrency=concurrency,
        )
        self.interval = interval
        self.expires_in = max(timedelta(seconds=3 * interval), MIN_EXPIRY)
        self._check_interval = check_interval
        self._warning_interval = warning_interval
        self._is_registered = False
        #: Unserved kind -> when it was last warned about (time.monotonic()).
        self._warned: dict[str, float] = {}
        now = time.monotonic()
        self._next_heartbeat = now
        self._next_check = now + min(interval, check_interval)

    def heartbeat_once(self) -> list[str]:
        """Register (first call) or heartbeat; returns the ids of dead workers' entries swept."""
        if not self._is_registered:
            self._backend.register_worker(self.entry, expires_in=self.expires_in)
            self._is_registered = True
            logger.debug("worker %s registered", self.entry.id)
            return []
        swept = self._backend.heartbeat_worker(
            self.entry,
            running=self._running(),
            expires_in=self.expires_in,
            sweep_limit=SWEEP_BATCH,
        )
        for worker_id in swept:
            logger.warning(
                "worker %s stopped heartbeating without deregistering (killed or cut off); "
                "its registry entry was swept",
                worker_id,
            )
        return swept

    def check_unserved_once(self) -> list[str]:
        """Warn about unserved kinds not warned about lately; returns the kinds warned now."""
        unserved = self._backend.unserved_kinds()
        now = time.monotonic()
        self._warned = {
            kind: at for kind, at in self._warned.items() if now - at < self._warning_interval
        }
        fresh = [kind for kind in unserved if kind not in self._warned]
        for kind in fresh:
            self._warned[kind] = now
            logger.warning(
                "kind %r has due jobs but no live worker serves it: they wait until a worker "
                "that knows this kind runs (warned again in %d min if still so)",
                kind,
                round(self._warning_interval / 60),
                extra={"kind": kind},
            )
        return fresh

    def step(self) -> float:
        now = time.monotonic()
        if now >= self._next_heartbeat:
            self.heartbeat_once()
            self._next_heartbeat = time.monotonic() + self.interval
        if now >= self._next_check:
            self.check_unserved_once()
            self._next_check = time.monotonic() + self._check_interval
        return max(0.0, min(self._next_heartbeat, self._next_check) - time.monotonic())

    def deregister(self) -> None:
        """Delete the entry and free its id; an unreachable database leaves it to expire."""
        try:
            if self._is_registered:
                self._backend.deregister_worker(self.entry.id)
                logger.debug("worker %s deregistered", self.entry.id)
        except VenturiError as exc:
            logger.warning(
                "worker %s could not deregister (%s); its entry expires in %s",
                self.entry.id,
                exc,
                self.expires_in,
            )
        finally:
            self._is_registered = False
            _release_id(self.entry.id)
