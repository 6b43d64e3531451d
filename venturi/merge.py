"""Merge decisions for deduplicated jobs (ADR 10).

When a task declares ``dedup=`` and a ``pending`` job of the same kind and
dedup key already exists, the task's ``merge`` function is asked, under the
backend's dedup lock, what to do with the oldest such sibling::

    def merge(existing: dict, incoming: dict) -> Merge: ...

Both arguments are JSON objects of named arguments (the stored payload and
the new one). The answer is one of:

* ``Merge.keep()`` (the default): drop the incoming job; the caller gets the
  existing id with ``merged=True``.
* ``Merge.replace()``: the existing row takes the incoming payload.
* ``Merge.combine(payload)``: the existing row takes ``payload``, built from both.
* ``Merge.independent()``: insert the incoming job as a row of its own.

Keep, replace and combine leave one row that keeps its id, ``created_at`` and
``visible_at``, takes the higher of the two tiers, and gets a ``merged``
journal entry.

Example, coalescing counters::

    @task(dedup=lambda page, **_: page,
          merge=lambda old, new: Merge.combine({**old, "hits": old["hits"] + new["hits"]}))
    def record_hits(page: str, hits: int) -> None: ...
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from venturi.errors import EnqueueError
from venturi.serialization import decode_json
from venturi.types import MergeAction, MergeDecision, MergeResolver

__all__ = [
    "Merge",
    "MergeFunction",
    "keep_existing",
    "resolve_keep",
    "resolver",
]


@dataclass(frozen=True, slots=True)
class Merge:
    """One merge decision; build it with the four constructors, not directly."""

    action: MergeAction
    payload: Mapping[str, Any] | None = None

    @staticmethod
    def keep() -> Merge:
        """Keep the existing job as it is; the incoming one is dropped."""
        return _KEEP

    @staticmethod
    def replace() -> Merge:
        """The existing job takes the incoming job's arguments."""
        return _REPLACE

    @staticmethod
    def combine(payload: Mapping[str, Any]) -> Merge:
        """The existing job takes ``payload`` (named arguments), e.g. built from both."""
        return Merge(MergeAction.COMBINE, payload)

    @staticmethod
    def independent() -> Merge:
        """Insert the incoming job anyway, as a separate row."""
        return _INDEPENDENT


_KEEP = Merge(MergeAction.KEEP)
_REPLACE = Merge(MergeAction.REPLACE)
_INDEPENDENT = Merge(MergeAction.INDEPENDENT)

#: The user's merge function: ``(existing, incoming) -> Merge``.
MergeFunction = Callable[[dict[str, Any], dict[str, Any]], Merge]


def keep_existing(existing: dict[str, Any], incoming: dict[str, Any]) -> Merge:
    """The default merge function: the first pending job wins."""
    return _KEEP


def resolve_keep(existing: Mapping[str, Any]) -> MergeDecision:
    """The backend-side resolver (``NewJob.merge``) that always keeps the sibling.

    What ``keep_existing`` amounts to, without decoding either payload; beat's
    rows use it whatever the task's own merge function (``Schedule.new_job``).
    """
    return _KEEP_DECISION


_KEEP_DECISION = MergeDecision(MergeAction.KEEP)


def resolver(
    merge: MergeFunction, payload: str, kind: str, encode_combined: Callable[[Any], str]
) -> MergeResolver:
    """What the backend calls, under its dedup lock, with the sibling's stored payload:
    ``merge``'s answer for ``payload`` (the incoming job of ``kind``) as a decision.

    A combined payload is encoded by ``encode_combined`` (the task's binding), so it is
    checked as the task's own payloads are.
    """
    if merge is keep_existing:
        return resolve_keep

    def resolve(existing: Mapping[str, Any]) -> MergeDecision:
        decision = merge(dict(existing), decode_json(payload))
        if not isinstance(decision, Merge):
            raise EnqueueError(
                f"the merge function of {kind!r} returned {decision!r}; return "
                "Merge.keep(), Merge.replace(), Merge.combine(payload) or Merge.independent()"
            )
        if decision.action is MergeAction.REPLACE:
            return MergeDecision(MergeAction.REPLACE, payload)
        if decision.action is MergeAction.COMBINE:
            return MergeDecision(MergeAction.COMBINE, encode_combined(decision.payload))
        return MergeDecision(decision.action)

    return resolve
