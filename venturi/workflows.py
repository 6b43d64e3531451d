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
waits for their results in order.

``chain(a, b, c)`` and ``chord(header, callback)``, and any nesting of them
with groups, are compiled here, before any I/O, into a ``NewWorkflow``: every
step gets its job id, its position, its parents (edges) and the parameter
that will receive their results, and is checked whole against its handler
(a chain step with a placeholder for the parent's result). The backend writes
it in one transaction; from then on each finish hands results on (ADR 0125).

This module sits below ``venturi.task`` (whose ``s``/``si`` build signatures)
and never imports it: a signature sees its task through ``TaskLike``, the
seam ``Task`` implements.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, Protocol, runtime_checkable

from ulid import ULID

from venturi.binding import Binding
from venturi.errors import ArgumentsMismatch, ConfigurationError
from venturi.key_options import callback_kind
from venturi.options import TaskOptions
from venturi.refs import JobRef, ResultSource
from venturi.serialization import encode_json
from venturi.types import NewEdge, NewJob, NewStep, NewWorkflow

__all__ = [
    "Canvas",
    "Chain",
    "Chord",
    "Enqueuer",
    "Group",
    "GroupRef",
    "Signature",
    "TaskLike",
    "WorkflowRef",
    "WorkflowWriter",
    "chain",
    "chord",
    "group",
]


class Enqueuer(Protocol):
    """Where a task's enqueues go: its App's backend, or an eager session."""

    def enqueue(
        self, jobs: Sequence[NewJob], *, connection: object | None = None
    ) -> list[JobRef]: ...


class TaskLike(Protocol):
    """What a signature needs of its task: the seam ``venturi.task.Task`` implements.

    Besides the task's kind, handler, binding and options, and its own
    ``new_job`` and ``apply_async``: ``enqueuer()``, where its enqueues go
    now (an eager session of its App when one is active here, else the App's
    backend), and ``with_source(refs)``, the refs able to wait for their
    results through its App.
    """

    @property
    def kind(self) -> str: ...

    @property
    def fn(self) -> Callable[..., Any]: ...

    @property
    def binding(self) -> Binding[Any]: ...

    @property
    def options(self) -> TaskOptions: ...

    def new_job(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None
    ) -> NewJob: ...

    def apply_async(
        self, args: Sequence[Any] = (), kwargs: Mapping[str, Any] | None = None
    ) -> JobRef: ...

    def enqueuer(self) -> Enqueuer: ...

    def with_source(self, refs: list[JobRef]) -> list[JobRef]: ...


class _Chainable:
    """``a | b`` is ``chain(a, b)``, as in Celery's canvas (a group before a step: a chord)."""

    __slots__ = ()

    def __or__(self, other: Canvas) -> Chain:
        return chain(self, other)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class Signature(_Chainable):
    """One deferred call of ``task``; build it with ``task.s`` / ``task.si``."""

    task: TaskLike
    args: tuple[Any, ...]
    kwargs: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    immutable: bool = False

    @classmethod
    def build(
        cls,
        task: TaskLike,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        *,
        immutable: bool,
    ) -> Signature:
        """Check the call against ``task``'s handler (and, whole, its values against the
        annotations), and its arguments as strict JSON.

        An immutable signature is a whole call. A mutable one may still receive a
        parent's result first, so here it must fit as a partial call (no unknown
        keyword, no repeated argument, not too many positional ones); where it is
        placed (a group's member, a chain's step) it is checked whole.
        """
        arguments = task.binding.bind(args, kwargs) if immutable else None
        if arguments is None:
            _bind_partial(task, args, kwargs)
        what = f"the arguments of the signature {task.kind}"
        encode_json(list(args), what=what)
        encode_json(dict(kwargs), what=what)
        if arguments is not None:
            task.binding.check_types(arguments)  # after the JSON check, as at enqueue
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
class Group(_Chainable):
    """Signatures (or chains, chords) run in parallel: ``group(resize.s(i) for i in ids)``.

    Every member is checked as a whole call before anything is written. A group
    of plain signatures is written by one ``enqueue`` (one transaction: all or
    nothing) and needs no workflow; one with a chain or chord among its
    members is a workflow (ADR 0125), and its ref waits for each member's last
    step. Members must enqueue through one App.
    """

    members: tuple[Canvas, ...]

    def delay(self) -> GroupRef:
        if not self.members:
            return GroupRef(())
        signatures = [m for m in self.members if isinstance(m, Signature)]
        if len(signatures) < len(self.members):
            ref = _enqueue_workflow(self)
            return GroupRef(ref.outputs, ref.id)
        enqueuer = _one_enqueuer(signatures)
        jobs = [m.new_job() for m in signatures]  # each checked whole before anything is written
        refs = enqueuer.enqueue(jobs)
        return GroupRef(tuple(signatures[0].task.with_source(refs)))


@dataclass(frozen=True, slots=True)
class GroupRef:
    """The members' refs, in the group's order (a member chain's: its last step's);
    ``workflow_id`` when the group was written as a workflow."""

    refs: tuple[JobRef, ...]
    workflow_id: str | None = None

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


def group(*members: Canvas | Iterable[Canvas]) -> Group:
    """``group(a.s(1), b.s(2))`` or ``group(sig for ...)``; a member may be a chain or
    a chord, nested groups are flattened.

    Where the group is placed decides what its members receive, so they are
    checked whole there: by ``delay()`` as they are, by ``chain``/``chord``
    with the parent's result first; before any I/O, either way.
    """
    flat: list[Canvas] = []
    for member in members:
        if isinstance(member, Group):
            flat.extend(member.members)
        elif isinstance(member, Signature | Chain | Chord):
            flat.append(member)
        else:
            flat.extend(_member(m) for m in member)
    return Group(tuple(flat))


def _member(value: object) -> Canvas:
    if isinstance(value, Group):
        raise ConfigurationError("nest a group with group(g1, g2), not inside an iterable")
    if not isinstance(value, Signature | Chain | Chord):
        raise ArgumentsMismatch(
            f"a group takes signatures (task.s(...), task.si(...)), chains or chords, got {value!r}"
        )
    return value


@dataclass(frozen=True, slots=True)
class Chain(_Chainable):
    """Steps run one after another, each given its predecessor's result first
    (``.si`` steps are not); a group step hands the next one the list of its
    members' results, in order. Build it with ``chain(...)``."""

    steps: tuple[Canvas, ...]
    #: The kind enqueued when one of its steps' jobs ends dead (``on_error``, ADR 0138).
    error_callback: str | None = None

    def on_error(self, callback: Any) -> Chain:
        """This chain, with ``callback`` (a task or ``handler.s()``) enqueued with
        ``job_id``, ``kind`` and ``note`` for each of its jobs that ends ``dead``, in
        the transaction that records the death (ADR 0138)."""
        return replace(self, error_callback=callback_kind(callback))

    def delay(self) -> WorkflowRef:
        return _enqueue_workflow(self)


@dataclass(frozen=True, slots=True)
class Chord(_Chainable):
    """``header`` (a group) in parallel, then ``body`` once, given the list of the
    header members' results in order. Build it with ``chord(...)``."""

    header: Group
    body: Canvas

    def delay(self) -> WorkflowRef:
        return _enqueue_workflow(self)


#: What a workflow is made of.
Canvas = Signature | Group | Chain | Chord


def chain(*steps: Canvas) -> Chain:
    """``chain(fetch.s(url), parse.s(), store.s())``: checked whole now, nothing written.

    Raises ``ArgumentsMismatch`` / ``InvalidPayload`` for a step that could not
    take its call (a mutable step's first positional argument is its
    predecessor's result), ``ConfigurationError`` for an empty chain.
    """
    flat: list[Canvas] = []
    for step in steps:
        if isinstance(step, Chain):
            flat.extend(step.steps)
        elif isinstance(step, Signature | Group | Chord):
            flat.append(step)
        else:
            raise ArgumentsMismatch(
                f"a chain takes signatures, groups, chains or chords, got {step!r}"
            )
    if not flat:
        raise ConfigurationError("a chain needs at least one step")
    built = Chain(tuple(flat))
    _check(built)
    return built


def chord(header: Group | Iterable[Canvas], body: Canvas) -> Chord:
    """``chord([fetch.s(u) for u in urls], merge_all.s())``: ``body`` runs once, after
    every header member completed, with their results as a list in header order.
    Checked whole now (``ArgumentsMismatch``, ``InvalidPayload``), nothing written."""
    members = header if isinstance(header, Group) else group(*header)
    if not members.members:
        raise ConfigurationError("a chord needs at least one header member")
    if not isinstance(body, Signature | Group | Chain | Chord):
        raise ArgumentsMismatch(f"a chord's body is a signature, got {body!r}")
    built = Chord(members, body)
    _check(built)
    return built


@dataclass(frozen=True, slots=True)
class WorkflowRef:
    """What ``chain(...).delay()`` / ``chord(...).delay()`` return.

    ``outputs`` are the steps whose results are the workflow's: a chain's last
    step, a chord's body; several when the last step is a group
    (``is_list``), whose ``result`` is then the list.
    """

    id: str
    outputs: tuple[JobRef, ...]
    is_list: bool = False

    def result(self, timeout: float | None = None) -> Any:
        """The workflow's result, waiting up to ``timeout`` s (None: no limit); raises
        what ``JobRef.result`` raises (``JobFailed`` naming the dead dependency)."""
        if not self.is_list:
            return self.outputs[0].result(timeout)
        return GroupRef(self.outputs).results(timeout)

    def results(self, timeout: float | None = None) -> list[Any]:
        """The outputs' results as a list (one item unless the last step is a group)."""
        return GroupRef(self.outputs).results(timeout)

    async def aresult(self, timeout: float | None = None) -> Any:
        return await asyncio.to_thread(self.result, timeout)

    async def aresults(self, timeout: float | None = None) -> list[Any]:
        return await asyncio.to_thread(self.results, timeout)


@runtime_checkable
class WorkflowWriter(Protocol):
    """Where a workflow goes: the App's backend, or an eager session (which runs it)."""

    def enqueue_workflow(self, workflow: NewWorkflow) -> None: ...


def _enqueue_workflow(canvas: Canvas) -> WorkflowRef:
    workflow, outputs, is_list, tasks = _compile(canvas)
    if isinstance(canvas, Chain) and canvas.error_callback is not None:
        workflow = replace(workflow, on_error=canvas.error_callback)
    enqueuer = _one_enqueuer(tasks)
    if not isinstance(enqueuer, WorkflowWriter):
        raise ConfigurationError(f"{type(enqueuer).__qualname__} cannot write workflows")
    enqueuer.enqueue_workflow(workflow)
    refs = [JobRef(i) for i in outputs]
    if isinstance(enqueuer, ResultSource):
        refs = [JobRef(i, source=enqueuer) for i in outputs]
    else:
        refs = tasks[0].task.with_source(refs)
    return WorkflowRef(workflow.id, tuple(refs), is_list)


def _one_enqueuer(signatures: Sequence[Signature]) -> Enqueuer:
    enqueuers = {id(m.task.enqueuer()) for m in signatures}
    if len(enqueuers) > 1:
        raise ConfigurationError("the steps of a group or workflow must enqueue through one App")
    return signatures[0].task.enqueuer()


class _Compiler:
    """Places each signature of a canvas as a step: ids, positions, parents."""

    def __init__(self) -> None:
        self.steps: list[NewStep] = []
        self.edges: list[NewEdge] = []
        self.signatures: list[Signature] = []

    def place(self, node: Canvas, parents: Sequence[str], as_list: bool) -> list[str]:
        """Place ``node`` after ``parents`` (whose results it gets, as a list when
        ``as_list``); returns the steps whose results are ``node``'s."""
        if isinstance(node, Signature):
            return [self._step(node, parents, as_list)]
        if isinstance(node, Group):
            return [out for m in node.members for out in self.place(m, parents, as_list)]
        if isinstance(node, Chord):
            return self.place(node.body, self.place(node.header, parents, as_list), True)
        for step in node.steps:
            parents = self.place(step, parents, as_list)
            as_list = _is_list(step)
        return list(parents)

    def _step(self, sig: Signature, parents: Sequence[str], as_list: bool) -> str:
        receives = bool(parents) and not sig.immutable
        job, input_arg = _step_job(sig, receives, as_list)
        for position, parent in enumerate(parents):
            self.edges.append(NewEdge(parent, job.id, position))
        self.steps.append(NewStep(job, len(parents), input_arg, as_list, len(self.steps)))
        self.signatures.append(sig)
        return job.id


def _check(canvas: Canvas) -> None:
    """Check every step of ``canvas`` now, as a whole workflow; one whose first steps
    only fit with a parent's result first (it is meant to be nested: a chain's
    step, a chord's body) is checked that way, and whole again where it is placed.
    Raises the whole workflow's error when neither fits."""
    try:
        _compile(canvas)
    except ArgumentsMismatch:
        try:
            _Compiler().place(canvas, ("",), False)
        except ArgumentsMismatch:
            pass
        else:
            return
        raise


def _compile(canvas: Canvas) -> tuple[NewWorkflow, list[str], bool, list[Signature]]:
    compiler = _Compiler()
    outputs = compiler.place(canvas, (), False)
    workflow = NewWorkflow(str(ULID()), tuple(compiler.steps), tuple(compiler.edges))
    return workflow, outputs, _is_list(canvas), compiler.signatures


def _is_list(node: Canvas) -> bool:
    """Whether ``node``'s result is a list: a group's, or a chain's ending in one."""
    if isinstance(node, Group):
        return True
    if isinstance(node, Chain):
        return _is_list(node.steps[-1])
    return False


class _ParentResult:
    """Stands for the parent's result while a chain step is checked against its handler."""

    def __repr__(self) -> str:
        return "<parent result>"


_PARENT = _ParentResult()


def _step_job(sig: Signature, receives: bool, as_list: bool) -> tuple[NewJob, str | None]:
    """The step's job (payload without the parents' results) and the parameter that
    will receive them; the call is checked whole, with a placeholder for them."""
    if not receives:
        return replace(sig.new_job(), dedup_key=None, merge=None), None
    task = sig.task
    arguments = task.binding.bind((_PARENT, *sig.args), sig.kwargs)
    name = next((k for k, v in arguments.items() if v is _PARENT), None)
    if name is None:
        what = "its parents' results" if as_list else "its parent's result"
        raise ArgumentsMismatch(
            f"{sig!r}: {what} would go into *args; give the handler a first positional "
            "parameter for it, or use .si"
        )
    del arguments[name]
    payload = task.binding.encode_payload(arguments)
    return NewJob(str(ULID()), task.kind, payload, priority=task.options.priority), name


def _bind_partial(task: TaskLike, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
    parameters = list(inspect.signature(task.fn).parameters.values())
    if task.binding.takes_context:
        parameters = parameters[1:]
    try:
        inspect.Signature(parameters).bind_partial(*args, **kwargs)
    except TypeError as exc:
        raise ArgumentsMismatch(
            f"{task.kind}: the signature cannot fit the handler: {exc}"
        ) from None
