"""A handler's signature and the JSON a job stores for it, in both directions.

The payload of a job is a JSON object of the *named* arguments that were
passed (defaults are not stored, so a default changed in code applies to jobs
already queued). Positional-only parameters are stored by name too; a
``*args`` parameter is stored under its name as an array; extra keyword
arguments of a ``**kwargs`` parameter are stored at the top level, beside the
named ones (an extra keyword that collides with a parameter name is refused).
Named arguments rather than a positional list keep a stored job readable and
let dedup and merge functions (ADR 10) address arguments by name.

At run time the payload is checked against the signature *before* the handler
runs, so a payload that no longer fits (the code changed since enqueue) is told
apart from an ``ArgumentsMismatch`` the handler raises itself; values are
converted back by the handler's annotations (``venturi.conversion``). The
carry (ADR 15) is decoded into, and encoded from, the task's ``carry=`` type.
"""

from __future__ import annotations

import functools
import inspect
import reprlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from venturi.argument_types import Checker, checker_for
from venturi.context import Context
from venturi.conversion import Converter, converter_for, resolve_annotations
from venturi.errors import (
    ArgumentsMismatch,
    ArgumentTypeMismatch,
    ConfigurationError,
    InvalidPayload,
)
from venturi.serialization import encode_json

__all__ = [
    "Binding",
]

R = TypeVar("R")

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
_NAMED = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
_CONTEXT_NAMES = frozenset({"Context", "venturi.Context", "venturi.context.Context"})


def _is_context_annotation(annotation: object) -> bool:
    if annotation is Context:
        return True
    # A string under ``from __future__ import annotations`` (quoted once more if the
    # source quoted it); resolving it could fail at decoration, so match the name.
    return isinstance(annotation, str) and annotation.strip("'\"") in _CONTEXT_NAMES


class _Unquoted(str):
    """Shows a string annotation (``from __future__ import annotations``) as written."""

    __slots__ = ()

    def __repr__(self) -> str:
        return str(self)


class Binding(Generic[R]):
    """How the calls of one handler become payloads, and stored JSON becomes a call again.

    ``kind`` names the task in error messages; ``carry`` is the task's
    ``carry=`` dataclass, if any. Raises ``ConfigurationError`` when the
    handler's signature cannot be read.

    Attributes:
        takes_context: whether the handler's first parameter receives the ``Context``
            (named ``ctx``, or annotated ``Context``, and positional).
        required: the parameters (besides ``ctx``) a call must give.
    """

    def __init__(self, fn: Callable[..., R], *, kind: str, carry: type | None = None) -> None:
        self._fn = fn
        self._kind = kind
        self._carry = carry
        self._what = f"payload of {kind!r}"
        try:
            parameters = list(inspect.signature(fn).parameters.values())
        except (TypeError, ValueError) as exc:
            raise ConfigurationError(f"cannot read the signature of {fn!r}: {exc}") from exc
        first = parameters[0] if parameters else None
        self.takes_context: bool = (
            first is not None
            and first.kind in _POSITIONAL
            and (first.name == "ctx" or _is_context_annotation(first.annotation))
        )
        if self.takes_context:
            parameters = parameters[1:]
        self._parameters = parameters
        self._signature = inspect.Signature(parameters)
        self._parameter_names = frozenset(p.name for p in parameters)
        self._names = frozenset(
            p.name for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        )
        self.required: frozenset[str] = frozenset(
            p.name
            for p in parameters
            if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        )
        self._defaults = {p.name: p.default for p in parameters if p.default is not p.empty}
        self._is_simple = all(p.kind in _NAMED for p in parameters)
        self._positional_names = tuple(p.name for p in parameters if p.kind in _POSITIONAL)
        #: The fewest positional arguments that give every required parameter, when all
        #: of them can be given so (a simple signature's calls without keywords).
        self._fewest_positional = (
            len(self.required) if self.required <= set(self._positional_names) else None
        )
        self._var_keyword = next((p.name for p in parameters if p.kind is p.VAR_KEYWORD), None)
        self._var_positional = next(
            (p.name for p in parameters if p.kind is p.VAR_POSITIONAL), None
        )
        self._converters: dict[str, Converter] | None = None
        self._checkers: dict[str, tuple[Checker, str, bool]] | None = None

    # -- enqueue: call -> payload ----------------------------------------------------

    def bind(self, args: Sequence[Any], kwargs: Mapping[str, Any] | None) -> dict[str, Any]:
        """The call as named arguments (the payload's shape), or ``ArgumentsMismatch``."""
        if type(args) is not tuple and (
            isinstance(args, str | bytes) or not isinstance(args, Sequence)
        ):
            raise ArgumentsMismatch(f"{self._kind}: args must be a list or tuple, got {args!r}")
        if kwargs is None:
            kwargs = {}
        elif type(kwargs) is not dict and not isinstance(kwargs, Mapping):
            raise ArgumentsMismatch(f"{self._kind}: kwargs must be a mapping, got {kwargs!r}")
        if self._is_simple:
            # The hot path: named parameters only, so binding is zip + checks (positional
            # arguments alone, as most .delay() calls give, are only counted; keywords
            # alone, as delay_many's mapping items, are the arguments as they are); any
            # doubt goes to inspect's bind, which also words the error.
            if not kwargs:
                fewest = self._fewest_positional
                if fewest is not None and fewest <= len(args) <= len(self._positional_names):
                    return dict(zip(self._positional_names, args, strict=False))
            elif not args:
                if self.required <= kwargs.keys() <= self._names:
                    return dict(kwargs)
            else:
                arguments = dict(zip(self._positional_names, args, strict=False))
                if len(args) <= len(self._positional_names) and not (
                    kwargs.keys() & arguments.keys()
                ):
                    arguments.update(kwargs)
                    if self.required <= arguments.keys() <= self._names:
                        return arguments
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise ArgumentsMismatch(
                f"{self._kind}{self._shown_signature()} cannot take this call: {exc}"
            ) from None
        if self._is_simple:
            return bound.arguments
        arguments = {}
        for name, value in bound.arguments.items():
            if name == self._var_positional:
                arguments[name] = list(value)
                continue
            if name != self._var_keyword:
                arguments[name] = value
                continue
            for key, extra in value.items():
                if key in self._parameter_names or key in arguments:
                    raise ArgumentsMismatch(
                        f"{self._kind}: keyword {key!r} collides with a parameter name; "
                        "it could not be told apart in the stored payload"
                    )
                arguments[key] = extra
        return arguments

    def with_defaults(self, arguments: Mapping[str, Any]) -> dict[str, Any]:
        """``arguments`` (from ``bind``) with the defaults of parameters not passed."""
        return {**self._defaults, **arguments}

    def encode_payload(self, arguments: Mapping[str, Any]) -> str:
        """The payload text of ``arguments`` (from ``bind``): ``InvalidPayload`` if not
        JSON, then ``ArgumentTypeMismatch`` if ``check_types`` refuses it."""
        payload = encode_json(arguments, what=self._what)
        self.check_types(arguments)
        return payload

    def check_types(self, arguments: Mapping[str, Any]) -> None:
        """Raise ``ArgumentTypeMismatch`` for the first of ``arguments`` (named, as from
        ``bind``) whose value its parameter's annotation does not admit
        (``venturi.argument_types``); unannotated parameters admit any value, and a
        parameter whose default is ``None`` admits ``None``."""
        checkers = self._checkers
        if checkers is None:
            checkers = self._checkers = self._build_checkers()
        for name, (check, expected, takes_none) in checkers.items():
            if name in arguments:
                value = arguments[name]
                if not check(value) and not (takes_none and value is None):
                    raise ArgumentTypeMismatch(self._kind, name, expected, value)

    def encode_combined(self, payload: object) -> str:
        """The payload text of a ``Merge.combine`` result, checked against the signature.

        Raises ``InvalidPayload`` when it is not a mapping or not JSON, and
        ``ArgumentsMismatch`` when the handler could not take it.
        """
        if not isinstance(payload, Mapping):
            raise InvalidPayload(
                f"Merge.combine of {self._kind!r} needs a mapping of named arguments, "
                f"got {payload!r}"
            )
        self._rebuild(payload)
        return encode_json(dict(payload), what=f"combined payload of {self._kind!r}")

    # -- run: stored JSON -> call ----------------------------------------------------

    def prepare(self, ctx: Context | None, payload: object) -> Callable[[], R]:
        """The handler bound to a decoded payload, ready to call.

        Raises ``ArgumentsMismatch`` *before* the call when the payload no
        longer fits, so the caller can tell it from one the handler raises.
        ``ctx=None`` gives a handler that takes a context a fresh one.
        """
        if not isinstance(payload, Mapping):
            shown = reprlib.repr(payload)
            raise ArgumentsMismatch(f"{self._kind}: the payload is not a JSON object: {shown}")
        args, kwargs = self._rebuild(payload)
        if self.takes_context:
            context = ctx if ctx is not None else self.fresh_context()
            return functools.partial(self._fn, context, *args, **kwargs)
        return functools.partial(self._fn, *args, **kwargs)

    def fresh_context(self) -> Context:
        """The context of a call outside any job (``job_id=None``, ``run_count=0``)."""
        return Context(job_id=None, kind=self._kind, run_count=0, failure_count=0)

    def decode_carry(self, raw: Any) -> Any:
        """A decoded carry (JSON value) as the ``carry`` type when one is declared.

        ``None`` stays ``None`` (the first run). Raises ``InvalidPayload`` when the
        stored object no longer fits the dataclass (fields renamed or removed).
        """
        carry = self._carry
        if raw is None or carry is None:
            return raw
        convert = converter_for(carry)
        if convert is None:
            return raw
        try:
            return convert(raw)
        except (TypeError, ValueError) as exc:
            raise InvalidPayload(f"stored carry does not fit {carry.__qualname__}: {exc}") from exc

    def encode_carry(self, value: object) -> str:
        """The carry a run leaves, as JSON text; with a ``carry`` type it must be one (or None)."""
        carry = self._carry
        if carry is not None and value is not None and not isinstance(value, carry):
            raise InvalidPayload(
                f"carry must be a {carry.__qualname__} or None, not {type(value).__qualname__}"
            )
        return encode_json(value, what="carry")

    # -- internals -----------------------------------------------------------------

    def _rebuild(self, payload: Mapping[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """Positional and keyword arguments from named ones, checked against the signature."""
        values = self._convert(payload)
        if self._is_simple:
            keys = values.keys()
            if self.required <= keys <= self._names:
                return [], values
            missing = sorted(self.required - keys)
            unexpected = sorted(keys - self._names)
            raise ArgumentsMismatch(
                f"{self._kind}{self._shown_signature()} does not fit the payload"
                + (f"; missing {', '.join(missing)}" if missing else "")
                + (f"; unexpected {', '.join(unexpected)}" if unexpected else "")
            )
        args, kwargs = self._split(values)
        try:
            self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise ArgumentsMismatch(
                f"{self._kind}{self._shown_signature()} does not fit the payload: {exc}"
            ) from None
        return args, kwargs

    def _split(self, values: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        remaining = dict(values)
        args: list[Any] = []
        kwargs: dict[str, Any] = {}
        # With values for *args, every parameter before it must be passed positionally.
        var_positional = self._var_positional
        as_positional = var_positional is not None and bool(remaining.get(var_positional))
        for p in self._parameters:
            if p.kind is p.POSITIONAL_ONLY or (p.kind is p.POSITIONAL_OR_KEYWORD and as_positional):
                if p.name in remaining:
                    args.append(remaining.pop(p.name))
                elif p.default is not p.empty:
                    args.append(p.default)
                else:
                    raise ArgumentsMismatch(f"{self._kind}: the payload is missing {p.name!r}")
            elif p.kind in _NAMED:
                if p.name in remaining:
                    kwargs[p.name] = remaining.pop(p.name)
            elif p.kind is p.VAR_POSITIONAL:
                extra = remaining.pop(p.name, [])
                if not isinstance(extra, list | tuple):
                    raise ArgumentsMismatch(f"{self._kind}: *{p.name} must be stored as an array")
                args.extend(extra)
        if remaining:
            if self._var_keyword is None:
                raise ArgumentsMismatch(
                    f"{self._kind}: unexpected argument(s) {', '.join(sorted(remaining))}"
                )
            kwargs.update(remaining)
        return args, kwargs

    def _convert(self, payload: Mapping[str, Any]) -> dict[str, Any]:
        values = dict(payload)
        converters = self._converters
        if converters is None:
            converters = self._converters = self._build_converters()
        for name, convert in converters.items():
            if name in values:
                try:
                    values[name] = convert(values[name])
                except (TypeError, ValueError) as exc:
                    raise ArgumentsMismatch(
                        f"{self._kind}: argument {name!r} does not fit its annotation: {exc}"
                    ) from None
        return values

    def _build_converters(self) -> dict[str, Converter]:
        """Converters for named parameters, resolved on first use (names may be defined later)."""
        built = {name: converter_for(hint) for name, hint in self._hints().items()}
        return {name: c for name, c in built.items() if c is not None}

    def _build_checkers(self) -> dict[str, tuple[Checker, str, bool]]:
        """For each annotated named parameter that not every value fits: its checker, the
        annotation as shown in errors, and whether its default is ``None``."""
        built = {}
        for name, hint in self._hints().items():
            check = checker_for(hint)
            if check is not None:
                shown = inspect.formatannotation(hint)
                built[name] = (check, shown, self._defaults.get(name, ...) is None)
        return built

    def _hints(self) -> dict[str, object]:
        """The named parameters' annotations, string ones evaluated."""
        named = {
            p.name: p.annotation
            for p in self._parameters
            if p.annotation is not p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
        }
        return resolve_annotations(self._fn, named)

    def _shown_signature(self) -> str:
        """The signature (without ctx) for messages, string annotations unquoted."""
        return str(
            self._signature.replace(
                parameters=[
                    p.replace(annotation=_Unquoted(p.annotation))
                    if isinstance(p.annotation, str)
                    else p
                    for p in self._parameters
                ]
            )
        )
