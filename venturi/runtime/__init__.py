"""The worker's internals: the engine, service threads, the run path, leases, waiting, claims.

Nothing here is public API (``venturi/__init__.py`` is): the modules may
change shape between releases. Each module's ``__all__`` lists what the rest
of the package imports from it.
"""

__all__: list[str] = []
