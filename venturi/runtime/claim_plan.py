"""Claim planning: which kinds one claim asks for, how many jobs, and with which lease.

Pure arithmetic over counts the caller passes in, no clock, no threads and no
database, beside ``Prefetch`` (how deep to claim ahead) and ``ClaimFloors``
(where a claim starts). The rules and their reasons are in ADR 0107 (caps),
ADR 0109 (leases) and ADR 0114 (claim-ahead).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from venturi.runtime.prefetch import Prefetch

if TYPE_CHECKING:
    from venturi.task import Task


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    """One claim to make: up to ``limit`` jobs of ``kinds``, each held for ``lease``."""

    kinds: tuple[str, ...]
    limit: int
    lease: timedelta


class ClaimPlan:
    """The claims of one worker (or drain) serving ``leases``' kinds.

    Options:
        leases: the lease of every kind served; the kinds are claimed in sorted order.
        caps: the per-process concurrency cap of the capped kinds (ADR 23).
        concurrency: the handler threads that run the claimed jobs.
    """

    def __init__(
        self,
        *,
        leases: Mapping[str, timedelta],
        caps: Mapping[str, int] | None = None,
        concurrency: int = 1,
    ) -> None:
        self.kinds: tuple[str, ...] = tuple(sorted(leases))
        self.concurrency = concurrency
        self._leases = dict(leases)
        self._caps = dict(caps or {})

    @classmethod
    def for_tasks(cls, tasks: Mapping[str, Task[Any, Any]], *, concurrency: int = 1) -> ClaimPlan:
        """The plan for serving exactly these tasks (kind -> task)."""
        return cls(
            leases={kind: task.options.lease for kind, task in tasks.items()},
            caps={
                kind: t.options.concurrency
                for kind, t in tasks.items()
                if t.options.concurrency is not None
            },
            concurrency=concurrency,
        )

    def is_capped(self, kind: str) -> bool:
        return kind in self._caps

    def room(self, *, held: int, prefetch: Prefetch) -> int:
        """Jobs worth claiming now, for a worker holding ``held`` unfinished jobs (ADR 0114).

        With an idle handler, whatever room there is; while every handler has
        work, nothing until the room reaches ``prefetch.refill_at()``.
        """
        room = self.concurrency + prefetch.depth() - held
        if held >= self.concurrency and room < prefetch.refill_at():
            return 0
        return room

    def request(
        self, *, free: int, running: Mapping[str, int], is_renewed: bool
    ) -> ClaimRequest | None:
        """The claim for ``free`` jobs, given the jobs held per kind; None when none is due.

        Only kinds with room under their cap are asked for, and the limit is
        at most the smallest such room (ADR 0107). ``is_renewed``: whether a
        lease keeper will renew the claims (ADR 0109, see ``lease``).
        """
        if free <= 0:
            return None
        kinds: list[str] = []
        limit = free
        for kind in self.kinds:
            cap = self._caps.get(kind)
            if cap is None:
                kinds.append(kind)
                continue
            room = cap - running.get(kind, 0)
            if room > 0:
                kinds.append(kind)
                limit = min(limit, room)
        if not kinds:
            return None
        return ClaimRequest(tuple(kinds), limit, self.lease(kinds, is_renewed=is_renewed))

    def lease(self, kinds: Collection[str], *, is_renewed: bool) -> timedelta:
        """The lease a batch of ``kinds`` is claimed with (ADR 0109).

        Renewed claims take the shortest lease, so a crash holds none past its
        own; claims nobody renews take the longest, so none lapses while the
        batch runs one job after another.
        """
        leases = [self._leases[kind] for kind in kinds]
        return min(leases) if is_renewed else max(leases)
