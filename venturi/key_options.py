"""The options of limits per key, shared limits, debounce and failure callbacks (ADR 0138).

``parse_key_options`` checks them at decoration, after ``TaskOptions.parse``
has read the others (it needs ``dedup``, ``rate_limit`` and ``fair_key``);
``claim_key`` computes a call's key at enqueue. A keyed kind's key is stored
where a fair kind's is (the ``fair_key`` column, V10), so the two cannot be
declared together: a keyed claim already takes its keys in turn.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, Final

from venturi.errors import ConfigurationError, InvalidArgument
from venturi.serialization import is_storable_text

__all__ = [
    "LINK_ERROR_HEADER",
    "MAX_CLAIM_KEY_BYTES",
    "callback_kind",
    "claim_key",
    "parse_key_options",
    "validate_limit_name",
]

#: The job header naming a job's own failure callback (``link_error=``); read by the
#: ``_on_dead`` trigger (V13).
LINK_ERROR_HEADER: Final = "venturi-link-error"

#: A claim key sits in ``_jobs_fair`` beside the kind, like a fair key.
MAX_CLAIM_KEY_BYTES: Final = 255
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}")


def parse_key_options(options: Mapping[str, Any], values: dict[str, Any]) -> None:
    """Validate ``concurrency_key``, ``key_concurrency``, ``rate_key``, ``limits``,
    ``debounce`` and ``on_dead`` into ``values`` (``ConfigurationError`` naming the
    option and what it accepts)."""
    concurrency_key = _key_function("concurrency_key", options.get("concurrency_key"))
    rate_key = _key_function("rate_key", options.get("rate_key"))
    per_key = options.get("key_concurrency")
    if per_key is not None:
        if isinstance(per_key, bool) or not isinstance(per_key, int) or per_key < 1:
            raise ConfigurationError(
                f"key_concurrency must be an integer of at least 1, got {per_key!r}"
            )
        if concurrency_key is None:
            raise ConfigurationError(
                "key_concurrency needs concurrency_key=, the function of the task's "
                "arguments that gives each job's key (e.g. lambda tenant, **_: tenant)"
            )
    if concurrency_key is not None:
        values["concurrency_key"] = concurrency_key
        values["key_concurrency"] = 1 if per_key is None else per_key
    if rate_key is not None:
        if "rate_limit" not in values:
            raise ConfigurationError("rate_key needs rate_limit= (e.g. rate_limit='10/s')")
        if concurrency_key is not None and rate_key is not concurrency_key:
            raise ConfigurationError(
                "rate_key and concurrency_key must be the same function: a job has one key"
            )
        values["rate_key"] = rate_key
    if (concurrency_key or rate_key) is not None and "fair_key" in values:
        raise ConfigurationError(
            "fair_key cannot be combined with concurrency_key or rate_key: a keyed kind's "
            "claims already take its keys in turn (ADR 0138)"
        )
    if options.get("limits"):
        values["limits"] = _limits_option(options["limits"])
        if "fair_key" in values:
            raise ConfigurationError("fair_key cannot be combined with limits= on one task yet")
    if options.get("debounce") is not None:
        values["debounce"] = _debounce_option(options["debounce"], values)
    if options.get("on_dead") is not None:
        values["on_dead"] = _on_dead_option(options["on_dead"])


def validate_limit_name(name: object) -> str:
    """A shared limit's name: 1-100 letters, digits, ``_ . : -``, starting with a
    letter or digit."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"a shared limit's name must be 1-100 letters, digits or '_.:-' "
            f"(e.g. 'stripe'), got {name!r}"
        )
    return name


def claim_key(function: Callable[..., object], arguments: Mapping[str, Any], kind: str) -> str:
    """The key ``function`` (a task's ``concurrency_key`` / ``rate_key``) gives for a
    call's named arguments: text, or a number made text; ``InvalidArgument`` when it
    raises or gives anything else (nothing is written)."""
    try:
        value = function(**arguments)
    except Exception as exc:
        raise InvalidArgument(
            f"the key function of {kind!r} raised {type(exc).__name__}: {exc}"
        ) from exc
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise InvalidArgument(
            f"the key function of {kind!r} must return text or a number, got {value!r}"
        )
    key = value if isinstance(value, str) else str(value)
    if not key:
        raise InvalidArgument(f"the key function of {kind!r} returned an empty string")
    if _CONTROL.search(key) or not is_storable_text(key):
        raise InvalidArgument(f"key {key!r} of {kind!r} has control characters or bad UTF-8")
    if len(key.encode()) > MAX_CLAIM_KEY_BYTES:
        raise InvalidArgument(
            f"key of {kind!r} is over {MAX_CLAIM_KEY_BYTES} bytes; use a shorter one (an id)"
        )
    return key


def _key_function(name: str, value: object) -> Callable[..., object] | None:
    if value is None:
        return None
    if not callable(value):
        raise ConfigurationError(f"{name} must be callable, got {value!r}")
    return value


def _limits_option(value: object) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, list | tuple | set | frozenset):
        raise ConfigurationError(
            f"limits must be a list of shared limit names (limits=['stripe']), got {value!r}"
        )
    names = tuple(sorted({validate_limit_name(name) for name in value}))
    return names


def _debounce_option(value: object, values: Mapping[str, Any]) -> timedelta:
    delay = value if isinstance(value, timedelta) else None
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            delay = timedelta(seconds=value)
        except (OverflowError, ValueError):
            delay = None
    if delay is None or delay <= timedelta(0):
        raise ConfigurationError(
            f"debounce must be a positive timedelta (or seconds), got {value!r}"
        )
    if "dedup" not in values:
        raise ConfigurationError(
            "debounce needs dedup=, the function whose key tells which enqueues are one burst"
        )
    return delay


def callback_kind(value: object) -> str:
    """The kind of a failure callback given as a task or a signature (``handler.s()``);
    the callback is enqueued with ``job_id``, ``kind`` and ``note`` only, so a signature
    must carry no arguments of its own (``ConfigurationError`` otherwise)."""
    task = getattr(value, "task", value)
    if getattr(value, "args", ()) or getattr(value, "kwargs", None):
        raise ConfigurationError(
            f"a failure callback is called with job_id, kind and note only; "
            f"give it without arguments (handler.s()), got {value!r}"
        )
    return str(_on_dead_option(task).kind)


def _on_dead_option(value: object) -> Any:
    if not (
        callable(getattr(value, "new_job", None)) and isinstance(getattr(value, "kind", None), str)
    ):
        raise ConfigurationError(
            f"on_dead must be a task (decorated with @task or @app.task), got {value!r}"
        )
    return value
