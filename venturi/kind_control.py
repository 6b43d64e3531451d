"""The App's control of kinds at run time (ADR 0139): pause, resume, limit overrides, the list.

``App`` inherits ``KindControlMethods``. A change is validated here (nothing is
written for bad input), stored with its audit entry in one transaction, and
reaches the workers within seconds: a pause at their next claim (the claim
statement reads it), an override at their next read of the overrides (every
``runtime.runner.CONTROL_REFRESH`` seconds), both woken by the change.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from venturi.controls import (
    LIMIT_NAMES,
    UNSET,
    AuditEntry,
    KindControl,
    KindInfo,
    KindState,
    Limits,
    Unset,
)
from venturi.errors import ConfigurationError, InvalidArgument, InvalidKind, KindNotFound
from venturi.options import parse_rate_limit, validate_kind
from venturi.types import Status

if TYPE_CHECKING:
    from venturi.backend import Backend
    from venturi.task import Task

__all__ = ["KindControlMethods", "actor_name", "audit_limit", "declared_limits", "default_actor"]

#: The most audit entries ``kind_audit`` / ``schedule_audit`` return.
MAX_AUDIT = 1000


def default_actor() -> str:
    """Who a change is journaled as when the caller names nobody: ``host:pid``."""
    return f"{socket.gethostname()}:{os.getpid()}"


def declared_limits(task: Task[Any, Any]) -> Limits:
    """The limits a task's decorator declares (ADR 0128, 0138)."""
    options = task.options
    rate = options.rate_limit
    return Limits(
        options.global_concurrency,
        None if rate is None else _rate_text(rate.starts, rate.period.total_seconds()),
        options.key_concurrency,
    )


class KindControlMethods:
    """``App``'s methods for kinds (a mixin; ``App`` provides ``backend`` and ``tasks``)."""

    if TYPE_CHECKING:

        @property
        def backend(self) -> Backend: ...

        def tasks(self) -> Mapping[str, Task[Any, Any]]: ...

    def pause_kind(self, kind: str, *, actor: str | None = None) -> KindControl:
        """Stop every worker of the prefix from claiming ``kind``'s jobs, within seconds.

        Running jobs finish; enqueue still works (the jobs wait, pending). A
        kind no task registers and no job has is ``KindNotFound``. ``actor``:
        who the audit trail names (default ``host:pid``).
        """
        kind = self._known_kind(kind)
        return self.backend.set_kind_paused(kind, paused=True, actor=actor_name(actor))

    def resume_kind(self, kind: str, *, actor: str | None = None) -> KindControl:
        """Let workers claim ``kind`` again; idle workers are woken at once."""
        kind = self._known_kind(kind)
        return self.backend.set_kind_paused(kind, paused=False, actor=actor_name(actor))

    def set_limits(
        self,
        kind: str,
        *,
        global_concurrency: int | Unset | None = UNSET,
        rate_limit: str | Unset | None = UNSET,
        key_concurrency: int | Unset | None = UNSET,
        actor: str | None = None,
    ) -> KindControl:
        """Override ``kind``'s limits across workers for every worker, within seconds.

        A value replaces the decorator's (``global_concurrency``,
        ``key_concurrency``: integers >= 1; ``rate_limit``: ``"<n>/s"``,
        ``"<n>/m"``, ``"<n>/h"``); ``None`` clears the override (the
        decorator's value is in force again); a limit not named is left as
        it is. Bad values (``InvalidArgument``), an unknown kind
        (``KindNotFound``) or a fair kind (``ConfigurationError``: fair claims
        take no limits, ADR 0129): nothing is written.
        """
        given = {
            "global_concurrency": global_concurrency,
            "rate_limit": rate_limit,
            "key_concurrency": key_concurrency,
        }
        changes: dict[str, int | str | None] = {}
        for name, value in given.items():
            if value is UNSET:
                continue
            changes[name] = _validated_limit(name, value)
        if not changes:
            raise InvalidArgument(
                f"set_limits({kind!r}) names no limit: give one of {', '.join(LIMIT_NAMES)}"
                " (None clears an override)"
            )
        kind = self._known_kind(kind)
        task = self.tasks().get(kind)
        limits_set = [n for n in ("global_concurrency", "rate_limit") if changes.get(n) is not None]
        if task is not None and task.options.fair_key is not None and limits_set:
            raise ConfigurationError(
                f"kind {kind!r} declares fair_key, whose claims take no limits across workers"
                f" (ADR 0129): {' and '.join(limits_set)} cannot be set for it"
            )
        is_keyed = task is None or task.options.concurrency_key or task.options.rate_key
        if changes.get("key_concurrency") is not None and not is_keyed:
            raise ConfigurationError(
                f"kind {kind!r} declares no concurrency_key, so its jobs store no key and a"
                " key_concurrency override would bound nothing (ADR 0138); declare"
                " @task(concurrency_key=...) first"
            )
        return self.backend.set_kind_limits(kind, changes, actor=actor_name(actor))

    def kinds(self) -> list[KindInfo]:
        """Every kind of the prefix (registered by this App, with jobs, or with a stored
        state), by name: its state, its jobs per status, its limits (declared, overridden,
        in force)."""
        tasks = self.tasks()
        counts = {kind_stats.kind: kind_stats.counts for kind_stats in self.backend.stats().kinds}
        controls = {control.kind: control for control in self.backend.kind_controls()}
        infos = []
        for kind in sorted(set(tasks) | set(counts) | set(controls)):
            control = controls.get(kind, KindControl(kind))
            task = tasks.get(kind)
            found = counts.get(kind, {})
            infos.append(
                KindInfo(
                    kind=kind,
                    state=KindState.PAUSED if control.paused else KindState.ACTIVE,
                    registered=task is not None,
                    counts={status: found.get(status, 0) for status in Status},
                    declared=declared_limits(task) if task is not None else Limits(),
                    overrides=control.overrides,
                    updated_at=control.updated_at,
                )
            )
        return infos

    def kind(self, kind: str) -> KindInfo:
        """``kinds()``'s entry for one kind; ``KindNotFound`` when the prefix has none."""
        kind = self._known_kind(kind)
        for info in self.kinds():
            if info.kind == kind:
                return info
        raise KindNotFound(kind)

    def kind_audit(self, kind: str, *, limit: int = 50) -> list[AuditEntry]:
        """The newest ``limit`` changes made to ``kind`` (who, what, when), newest first."""
        limit = audit_limit(limit)
        return self.backend.audit_trail("kind", self._known_kind(kind), limit=limit)

    def _known_kind(self, kind: str) -> str:
        """``kind``, validated, when a task registers it or the prefix has a job or state
        of it; else ``KindNotFound``."""
        try:
            kind = validate_kind(kind)
        except InvalidKind as exc:
            raise KindNotFound(repr(kind)) from exc
        if kind in self.tasks() or self.backend.kind_known(kind):
            return kind
        raise KindNotFound(kind)


def _validated_limit(name: str, value: object) -> int | str | None:
    if value is None:
        return None
    if name == "rate_limit":
        try:
            rate = parse_rate_limit(value)
        except ConfigurationError as exc:
            raise InvalidArgument(str(exc)) from exc
        return _rate_text(rate.starts, rate.period.total_seconds())
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidArgument(
            f"{name} must be an integer of at least 1 (or None to clear it), got {value!r}"
        )
    return value


def _rate_text(starts: int, period_seconds: float) -> str:
    unit = {1.0: "s", 60.0: "m", 3600.0: "h"}[period_seconds]
    return f"{starts}/{unit}"


def actor_name(actor: str | None) -> str:
    if actor is None:
        return default_actor()
    if not isinstance(actor, str) or not actor.strip() or len(actor) > 200:
        raise InvalidArgument(
            f"actor must be a non-empty name of at most 200 characters, got {actor!r}"
        )
    return actor.strip()


def audit_limit(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_AUDIT:
        raise InvalidArgument(f"limit must be an integer from 1 to {MAX_AUDIT}, got {limit!r}")
    return limit
