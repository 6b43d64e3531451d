"""``App.limit``: limits shared by several kinds (ADR 0138), a mixin of ``App``.

A shared limit is declared once per App, ``app.limit("stripe", concurrency=5,
rate="100/s")``, and named by tasks, ``@app.task(limits=["stripe"])``: the jobs
of every kind naming it count together, across every worker of the prefix. A
worker (or drain) resolves the names when it starts; an undeclared name is a
``ConfigurationError`` then (or at ``@app.task`` decoration, for the App's own
tasks), naming it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from venturi.errors import ConfigurationError
from venturi.key_options import validate_limit_name
from venturi.options import TaskOptions, parse_rate_limit
from venturi.types import RateLimit, SharedLimit

__all__ = ["SharedLimits"]


class SharedLimits:
    """The shared limits of an App, by name, as declared (the kinds come from its tasks)."""

    #: name -> (concurrency, rate); set by ``App.__init__``.
    _declared_limits: dict[str, tuple[int | None, RateLimit | None]]

    def tasks(self) -> Mapping[str, Any]:
        raise NotImplementedError  # App's

    def limit(self, name: str, *, concurrency: int | None = None, rate: str | None = None) -> None:
        """Declare the shared limit ``name``: at most ``concurrency`` jobs claimed at once
        and at most ``rate`` starts (``"<n>/s"``, ``"/m"``, ``"/h"``) of every kind
        whose task names it in ``limits=``, across every worker of the prefix.

        ``ConfigurationError`` for a bad name or value, neither bound given, or a name
        declared twice. Example::

            app.limit("stripe", concurrency=5, rate="100/s")

            @app.task(limits=["stripe"])
            def charge(customer: str) -> None: ...
        """
        validate_limit_name(name)
        if concurrency is not None and (
            isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1
        ):
            raise ConfigurationError(
                f"shared limit {name!r}: concurrency must be an integer of at least 1, "
                f"got {concurrency!r}"
            )
        if concurrency is None and rate is None:
            raise ConfigurationError(f"shared limit {name!r} needs concurrency= or rate= (or both)")
        if name in self._declared_limits:
            raise ConfigurationError(f"shared limit {name!r} is declared twice")
        self._declared_limits[name] = (
            concurrency,
            None if rate is None else parse_rate_limit(rate),
        )

    def shared_limits(self) -> dict[str, SharedLimit]:
        """Every declared shared limit, with the kinds of this App's tasks that name it."""
        kinds: dict[str, list[str]] = {name: [] for name in self._declared_limits}
        for kind, task in sorted(self.tasks().items()):
            for name in task.options.limits:
                kinds.setdefault(name, []).append(kind)
        return {
            name: SharedLimit(name, tuple(kinds[name]), concurrency, rate)
            for name, (concurrency, rate) in self._declared_limits.items()
        }

    def _check_limits_declared(self, options: TaskOptions) -> None:
        """At ``@app.task``: every name in ``limits=`` is declared on this App."""
        missing = [name for name in options.limits if name not in self._declared_limits]
        if missing:
            raise ConfigurationError(
                f"limits= names {', '.join(repr(n) for n in missing)}, not declared on this "
                f"App; call app.limit({missing[0]!r}, concurrency=..., rate=...) first"
            )
