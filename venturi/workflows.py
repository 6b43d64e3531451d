"""Signatures (SPEC 5.4): a task call to be made later, checked when it is built.

``task.s(*args, **kwargs)`` is a signature that will receive its parent's
result as its first positional argument; ``task.si(...)`` is an immutable one
that will not. Both are checked against the handler's signature when they are
built (with a placeholder for the parent's result), and their arguments must
be strict JSON: a signature that could never run is refused at once, with
the same ``EnqueueError`` as ``.delay()`` and nothing written.

``sig.delay(*extra)`` enqueues the call now: a signature's ``extra``
arguments go before its own (Celery's partial calls); an immutable one takes
none. ``group(...)`` enqueues signatures side by side in one transaction and
waits for their results in order; ``chain`` and ``chord``, which need
follow-ups written by the fenced finish, are designed in ADR 0125 and not
built yet.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from venturi.errors import ArgumentsMismatch, ConfigurationError
from venturi.serialization import encode_json
from venturi.types import JobRef, NewJob

if TYPE_CHECKING:
    from venturi.task import Task


@dataclass(frozen=True, slots=True)
class Signature:
    """One deferred call of ``task``; build it with ``task.s`` / ``task.si``."""

    task: Task[Any, Any]
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    immutable: bool = False

    @classmethod
    def build(
        cls,
        task: Task[Any, Any],
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        *,
        immutable: bool,
    ) -> Signature:
        """Check the call against ``task``'s handler, and its arguments as strict JSON.

        An immutable signature is a whole call. A mutable one may still receive a
        parent's result first, so here it must fit as a partial call (no unknown
        keyword, no repeated argument, not too many positional ones); where it is
        placed (a group's member, a chain's step) it is checked whole.
        """
        if immutable:
            task.binding.bind(args, kwargs)
        else:
            _bind_partial(task, args, kwargs)
        what = f"the arguments of the signature {task.kind}"
        encode_json(list(args), what=what)
        encode_json(dict(kwargs), what=what)
        return cls(task, tuple(args), MappingProxyType(dict(kwargs)), immutable)

    def __repr__(self) -> str:
        shown = [repr(a) for a in self.args] + [f"{k}={v!r}" for k, v in self.kwargs.items()]
        return f"{self.task.kind}.{'si' if self.immutable else 's'}({', '.join(shown)})"

    def delay(self, *extra: Any) -> JobRef:
        """Enqueue the call now; ``extra`` goes before the signature's own arguments."""
        if extra and self.immutable:
            raise ArgumentsMismatch(
                f"{self!r} is immutable (built with .si): it takes no further arguments"
            )
        return self.task.apply_async((*extra, *self.args), dict(self.kwargs))

    def new_job(self) -> NewJob:
        """The call as it is (no parent's result): validated and encoded, no I/O."""
        return self.task.new_job(self.args, dict(self.kwargs))


@dataclass(frozen=True, slots=True)
class Group:
    """Signatures run in parallel: ``group(resize.s(i) for i in ids).delay()``.

    Every member is checked as a whole call when the group is built, and
    ``delay`` writes them all in one ``enqueue`` (one transaction): all or
    nothing. Members must enqueue through one App.
    """

    members: tuple[Signature, ...]

    def delay(self) -> GroupRef:
        if not self.members:
            return GroupRef(())
        enqueuers = {id(m.task._enqueuer()) for m in self.members}
        if len(enqueuers) > 1:
            raise ConfigurationError("the members of a group must enqueue through one App")
        first = self.members[0].task
        jobs = [m.new_job() for m in self.members]
        refs = first._enqueuer().enqueue(jobs)
        return GroupRef(tuple(first._with_source(refs)))


@dataclass(frozen=True, slots=True)
class GroupRef:
    """The members' refs, in the group's order."""

    refs: tuple[JobRef, ...]

    def results(self, timeout: float | None = None) -> list[Any]:
        """Every member's result, in order, all within ``timeout`` s (None: no limit).
        Raises what ``JobRef.result`` raises for the first member that has no result."""
        deadline = None if timeout is None else time.monotonic() + timeout
        results = []
        for ref in self.refs:
            left = None if deadline is None else max(deadline - time.monotonic(), 0.0)
            results.append(ref.result(left))
        return results

    async def aresults(self, timeout: float | None = None) -> list[Any]:
        return await asyncio.to_thread(self.results, timeout)


def group(*members: Signature | Iterable[Signature]) -> Group:
    """``group(a.s(1), b.s(2))`` or ``group(sig for ...)``; members checked as whole calls."""
    flat: list[Signature] = []
    for member in members:
        if isinstance(member, Signature):
            flat.append(member)
        elif isinstance(member, Group):
            flat.extend(member.members)
        else:
            flat.extend(_signature(m) for m in member)
    for member in flat:
        member.task.binding.bind(member.args, member.kwargs)
    return Group(tuple(flat))


def _signature(value: object) -> Signature:
    if isinstance(value, Group):
        raise ConfigurationError("nest a group with group(g1, g2), not inside an iterable")
    if not isinstance(value, Signature):
        raise ArgumentsMismatch(
            f"a group takes signatures (task.s(...), task.si(...)), got {value!r}"
        )
    return value


def _bind_partial(task: Task[Any, Any], args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    parameters = list(inspect.signature(task.fn).parameters.values())
    if task.binding.takes_context:
        parameters = parameters[1:]
    try:
        inspect.Signature(parameters).bind_partial(*args, **kwargs)
    except TypeError as exc:
        raise ArgumentsMismatch(
            f"{task.kind}: the signature cannot fit the handler: {exc}"
        ) from None
