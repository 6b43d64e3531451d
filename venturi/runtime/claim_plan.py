"""Claim planning: which kinds one claim asks for, how many jobs, and with which lease.

Pure arithmetic over counts the caller passes in, no clock, no threads and no
database, beside ``Prefetch`` (how deep to claim ahead) and ``ClaimFloors``
(where a claim starts). The rules and their reasons are in ADR 0107 (caps),
ADR 0109 (leases), ADR 0114 (claim-ahead), ADR 0128 (limits across
workers: the clock of ``throttle`` and ``request`` is the caller's monotonic one),
ADR 0129 (fair kinds: ``turns``) and ADR 0139 (an operator's overrides: ``override``).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from venturi.errors import ConfigurationError
from venturi.runtime.prefetch import Prefetch
from venturi.types import KindLimits, SharedLimit

if TYPE_CHECKING:
    from venturi.task import Task

__all__ = ["ClaimPlan", "ClaimRequest", "kind_limits"]

_UNLIMITED = KindLimits()


def kind_limits(task: Task[Any, Any], shared: Mapping[str, SharedLimit]) -> KindLimits:
    """What bounds ``task``'s claims across workers (ADR 0128, 0138): its options, with
    its shared limits looked up in ``shared`` (``ConfigurationError`` naming one that
    is not declared)."""
    options = task.options
    missing = [name for name in options.limits if name not in shared]
    if missing:
        raise ConfigurationError(
            f"task {task.kind!r} names shared limit(s) {', '.join(missing)} that no "
            f"app.limit(...) declares; declare them on the App before starting workers"
        )
    return KindLimits(
        global_concurrency=options.global_concurrency,
        rate_limit=options.rate_limit,
        key_concurrency=options.key_concurrency,
        rate_per_key=options.rate_key is not None,
        shared=tuple(shared[name] for name in options.limits),
    )


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
        limits: the global cap and rate limit of the kinds that declare one (ADR 0128).
        fair: the kinds that declare a ``fair_key``, claimed each on its own (ADR 0129).
    """

    def __init__(
        self,
        *,
        leases: Mapping[str, timedelta],
        caps: Mapping[str, int] | None = None,
        concurrency: int = 1,
        limits: Mapping[str, KindLimits] | None = None,
        fair: Collection[str] = (),
    ) -> None:
        self.kinds: tuple[str, ...] = tuple(sorted(leases))
        self.concurrency = concurrency
        self.limits = dict(limits or {})
        #: The decorators' limits, under the operator's overrides (``override``).
        self._declared = dict(self.limits)
        self._leases = dict(leases)
        self._caps = dict(caps or {})
        self._throttled_until: dict[str, float] = {}
        self.fair = frozenset(fair)
        self._turn = 0
        #: Which read of the overrides this plan has applied (``Runner._controlled``).
        self.overrides_read = 0

    @classmethod
    def for_tasks(
        cls,
        tasks: Mapping[str, Task[Any, Any]],
        *,
        concurrency: int = 1,
        shared: Mapping[str, SharedLimit] | None = None,
    ) -> ClaimPlan:
        """The plan for serving exactly these tasks (kind -> task); ``shared``: the
        App's shared limits (ADR 0138), each with every kind that names it."""
        return cls(
            leases={kind: task.options.lease for kind, task in tasks.items()},
            caps={
                kind: t.options.concurrency
                for kind, t in tasks.items()
                if t.options.concurrency is not None
            },
            concurrency=concurrency,
            limits={
                kind: limits
                for kind, t in tasks.items()
                if (limits := kind_limits(t, shared or {})) != _UNLIMITED
            },
            fair=[kind for kind, t in tasks.items() if t.options.fair_key is not None],
        )

    def override(self, overrides: Mapping[str, KindLimits]) -> None:
        """Put the operator's overrides (ADR 0139) over the decorators' limits: each given
        bound replaces the declared one; a kind left out gets its declared limits back.
        A fair kind keeps its fair claim (limits are refused for it, ADR 0129), and a
        per-key cap applies only to a keyed kind, whose jobs store their key (ADR 0138);
        the per-key rate and the shared limits stay as declared."""
        limits = dict(self._declared)
        for kind, override in overrides.items():
            if kind not in self._leases or kind in self.fair:
                continue
            declared = limits.get(kind, _UNLIMITED)
            merged = replace(
                declared,
                global_concurrency=declared.global_concurrency
                if override.global_concurrency is None
                else override.global_concurrency,
                rate_limit=declared.rate_limit
                if override.rate_limit is None
                else override.rate_limit,
                key_concurrency=override.key_concurrency
                if override.key_concurrency is not None and declared.is_keyed
                else declared.key_concurrency,
            )
            if merged != _UNLIMITED:
                limits[kind] = merged
        self.limits = limits

    def is_capped(self, kind: str) -> bool:
        return kind in self._caps

    def ended(self, kind: str) -> None:
        """A job of ``kind`` claimed here had its outcome written: a keyed kind left out of
        requests because its free keys were drained (ADR 0138) has a key free again, so
        ask at once."""
        if kind in self.limits and self.limits[kind].is_keyed:
            self._throttled_until.pop(kind, None)

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
        self, *, free: int, running: Mapping[str, int], is_renewed: bool, now: float | None = None
    ) -> ClaimRequest | None:
        """The claim for ``free`` jobs, given the jobs held per kind; None when none is due.

        Only kinds with room under their cap are asked for, and the limit is
        at most the smallest such room (ADR 0107); given ``now``, a kind
        throttled across workers is not asked for until its time (``throttle``;
        without ``now``, the database alone enforces the limits). ``is_renewed``:
        whether a lease keeper will renew the claims (ADR 0109, see ``lease``).
        """
        if free <= 0:
            return None
        kinds: list[str] = []
        limit = free
        for kind in self.kinds:
            if now is not None and not self.is_unthrottled(kind, now):
                continue
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

    def turns(self, request: ClaimRequest) -> list[ClaimRequest]:
        """``request`` as the claims to make one after another when it asks for fair
        kinds: each fair kind alone, the other kinds together, each claim asking for
        what the earlier ones left. Which goes first moves on by one at every call,
        so no group's backlog keeps another from ever being claimed (ADR 0129)."""
        fair = [kind for kind in request.kinds if kind in self.fair]
        others = tuple(kind for kind in request.kinds if kind not in self.fair)
        groups = [(kind,) for kind in fair] + ([others] if others else [])
        start = self._turn % len(groups)
        self._turn += 1
        return [
            ClaimRequest(kinds, request.limit, request.lease)
            for kinds in groups[start:] + groups[:start]
        ]

    def throttle(self, throttled: Mapping[str, float], now: float) -> None:
        """Leave each kind out of requests for its seconds from ``now`` (``claim_limited``)."""
        for kind, seconds in throttled.items():
            self._throttled_until[kind] = now + seconds

    def is_unthrottled(self, kind: str, now: float) -> bool:
        return self._throttled_until.get(kind, now) <= now

    def next_unthrottled(self, now: float) -> float | None:
        """Seconds until the soonest throttled kind may be asked for again; None: none is."""
        waits = [until - now for until in self._throttled_until.values() if until > now]
        return max(min(waits), 0.0) if waits else None

    def lease(self, kinds: Collection[str], *, is_renewed: bool) -> timedelta:
        """The lease a batch of ``kinds`` is claimed with (ADR 0109).

        Renewed claims take the shortest lease, so a crash holds none past its
        own; claims nobody renews take the longest, so none lapses while the
        batch runs one job after another.
        """
        leases = [self._leases[kind] for kind in kinds]
        return min(leases) if is_renewed else max(leases)
