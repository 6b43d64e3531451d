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

from venturi.backend import Backend
from venturi.errors import ConfigurationError, InvalidArgument
from venturi.key_options import validate_limit_name
from venturi.options import TaskOptions, parse_rate_limit
from venturi.runtime.claim_plan import kind_limits
from venturi.types import KeyOccupancy, KindLimits, RateLimit, SharedLimit

__all__ = ["SharedLimits"]


class SharedLimits:
    """The shared limits of an App, by name, as declared (the kinds come from its tasks),
    and what the operator reads of limits: those in force per kind, the busiest keys."""

    #: name -> (concurrency, rate); set by ``App.__init__``.
    _declared_limits: dict[str, tuple[int | None, RateLimit | None]]

    def tasks(self) -> Mapping[str, Any]:
        raise NotImplementedError  # App's

    @property
    def backend(self) -> Backend:
        raise NotImplementedError  # App's

    def limits_of(self, kind: str) -> KindLimits:
        """The limits across workers a kind's task declares (``global_concurrency``,
        ``rate_limit`` and ``rate_key``, ``key_concurrency``, its shared limits with
        their values): what its claims are held to. ``InvalidArgument`` for a kind no
        task declares; ``ConfigurationError`` when it names an undeclared shared limit."""
        task = self.tasks().get(kind)
        if task is None:
            raise InvalidArgument(f"no task declares kind {kind!r}")
        return kind_limits(task, self.shared_limits())

    def key_occupancy(self, kind: str, *, limit: int = 10) -> list[KeyOccupancy]:
        """The busiest keys of a keyed kind (``concurrency_key=`` or ``rate_key=``): at
        most ``limit`` (1-1000), most running first, then most pending."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 1000:
            raise InvalidArgument(f"limit must be an integer from 1 to 1000, got {limit!r}")
        return self.backend.key_occupancy(kind, limit=limit)

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
