"""The worker's internals: service threads, the run path, leases, waiting, claim planning.

Nothing here is public API (``venturi/__init__.py`` is): the modules may
change shape between releases.
"""
